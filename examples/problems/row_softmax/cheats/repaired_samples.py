"""Cheat: repairing the re-checked timed outputs after the fact. ``bench`` keeps a random few whole timed outputs
(a reservoir filled after each call, from ``os.urandom`` captured before the import) as copies, which it saves
for the reference to check only when the case's timing is over. Those copies live in the candidate's process.
On every timed call this candidate finds the harness's sampler on the Python stack (through an exception's
traceback: no ``sys._getframe``, ``inspect`` or ``gc`` for the static scan to see), reads the reservoir from
the closures of its ``after`` hook, and overwrites any copy added since its previous call with the right answer
for that call's inputs, which it kept. It also computes honestly on the last call of every batch (read from
``measure``'s ``samples`` and ``opts``), since timing can stop there and no later call would repair it. Every
other timed call returns the answer of an earlier call.

How it fools a harness that keeps outputs in memory: ``check`` is not timed, so every call there is honest and
every case passes. In ``bench`` the re-checked outputs have all been repaired, so they are right, while nine
timed calls in ten (with a batch of 10) do no work; the repairs run inside a few timed calls, which the median
ignores.

Caught by: ``timed-output-wrong`` (error): every timed call leaves a sample of its output in the journal the
moment it returns, and the parent picks the calls to re-check once timing is over; nine in ten are stale.
Usually ``timed-output-tampered`` (error) as well: the fingerprint of each whole output kept was journaled when
it was kept, and the repaired copy no longer matches it.
"""

import torch

_latest: dict = {}      # (shape, dtype, device) -> the answer of the latest honest call
_prev = None            # the inputs of the previous timed call
_repaired: set = set()  # keys of kept outputs already overwritten


def _softmax(x: torch.Tensor) -> torch.Tensor:
    y = x.float()
    e = (y - y.amax(dim=-1, keepdim=True)).exp()
    return (e / e.sum(dim=-1, keepdim=True)).to(x.dtype)


def _harness_frames():
    """The sampler's frame (locals ``i`` and ``after``) and measure's (``samples`` and ``opts``), or Nones."""
    try:
        raise LookupError
    except LookupError as e:
        frame = e.__traceback__.tb_frame.f_back
    sample = None
    while frame is not None:
        names = frame.f_locals
        if sample is None and "after" in names and "i" in names:
            sample = frame
        elif sample is not None and "samples" in names and "opts" in names:
            return sample, frame
        frame = frame.f_back
    return None, None


def _kept_outputs(after):
    """(key, tensor) for every whole output the harness keeps for re-checking: the lists of (item, tensor) pairs
    among the variables of the ``after`` hook's closure and of the functions it closes over."""
    todo, seen = [after], set()
    while todo:
        fn = todo.pop()
        if id(fn) in seen:
            continue
        seen.add(id(fn))
        for cell in getattr(fn, "__closure__", None) or ():
            try:
                value = cell.cell_contents
            except ValueError:
                continue
            if callable(value) and getattr(value, "__closure__", None):
                todo.append(value)
            elif isinstance(value, list):
                for pair in value:
                    if isinstance(pair, tuple) and len(pair) == 2 and isinstance(pair[1], torch.Tensor):
                        item = pair[0]
                        yield (item.get("key") if isinstance(item, dict) else None) or id(pair[1]), pair[1]


def _repair(sample) -> None:
    after = sample.f_locals["after"]
    if after is None or _prev is None:
        return
    for key, kept in _kept_outputs(after):
        if key not in _repaired:
            _repaired.add(key)
            kept.copy_(_softmax(_prev).to(kept.device))     # the right answer for the call it was kept from


def softmax(x: torch.Tensor) -> torch.Tensor:
    global _prev
    key = (tuple(x.shape), x.dtype, str(x.device))
    sample, measure = _harness_frames()
    if sample is None or key not in _latest:           # not timed (check), or nothing to replay yet
        _latest[key] = _softmax(x)
        return _latest[key]
    _repair(sample)
    if sample.f_locals["i"] < 0:                       # warm-up: never kept
        return _latest[key]
    samples, opts = measure.f_locals["samples"], measure.f_locals["opts"]
    n = len(samples) + 1
    if n % opts.batch == 0 or n >= opts.max_n:         # timing may stop after this call: no later repair
        _latest[key] = _softmax(x)
    _prev = x
    return _latest[key]
