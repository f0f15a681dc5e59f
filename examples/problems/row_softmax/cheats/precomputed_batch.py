"""Cheat: answering timed calls before they are made. A harness that makes a batch of inputs ahead of the timed
calls that use them (so that the calls follow each other closely) leaves the inputs of later calls in memory
while the candidate runs. On every timed call this candidate searches everything the harness's frames and
closures hold (found through an exception's traceback) for other tensors shaped like its input, computes the
answers for the ones it has not seen, and keeps them by content. A call whose input it answered earlier returns
that answer with no work, so most timed calls do none while every output is right; the one call per batch that
does the work is an outlier the median ignores. Where it finds no later inputs it returns the answer of an
earlier call.

How it fools a harness: every re-checked output is right, and the median times a dictionary lookup.

Caught by: each timed call's inputs are made just before the call from a secret seed drawn then, so while the
candidate runs no later call's inputs exist; this candidate finds none and returns stale answers, which the
re-checked samples of timed calls catch: ``timed-output-wrong`` (error).
"""

import torch

_answers: dict = {}     # (shape, first values) of an input -> its answer
_latest: dict = {}


def _softmax(x: torch.Tensor) -> torch.Tensor:
    y = x.float()
    e = (y - y.amax(dim=-1, keepdim=True)).exp()
    return (e / e.sum(dim=-1, keepdim=True)).to(x.dtype)


def _tag(t: torch.Tensor):
    return tuple(t.shape), tuple(t.reshape(-1)[:8].tolist())


def _frames():
    """The frames above this call (through an exception's traceback), innermost first."""
    try:
        raise LookupError
    except LookupError as e:
        frame = e.__traceback__.tb_frame.f_back
    while frame is not None:
        yield frame
        frame = frame.f_back


def _held(like: torch.Tensor):
    """Every tensor shaped like ``like`` that the harness's frames and closures hold (a bounded walk), or None
    outside timing (no sampler on the stack)."""
    frames = list(_frames())
    if not any("after" in f.f_locals and "i" in f.f_locals for f in frames):
        return None
    todo, seen, found = [v for f in frames for v in f.f_locals.values()], set(), []
    while todo and len(seen) < 20000:
        v = todo.pop()
        if id(v) in seen:
            continue
        seen.add(id(v))
        if isinstance(v, torch.Tensor):
            if v.shape == like.shape and v.dtype == like.dtype and v is not like:
                found.append(v)
        elif isinstance(v, dict):
            todo.extend(v.values())
        elif isinstance(v, (list, tuple)):
            todo.extend(v)
        elif callable(v) and getattr(v, "__closure__", None):
            for cell in v.__closure__:
                try:
                    todo.append(cell.cell_contents)
                except ValueError:
                    pass
    return found


def softmax(x: torch.Tensor) -> torch.Tensor:
    held = _held(x)
    if held is None:                                # not timed (check): honest
        return _softmax(x)
    tag = _tag(x)
    if tag in _answers:
        return _answers.pop(tag)                    # answered before it was asked: no work now
    for other in held:
        t = _tag(other)
        if t != tag and t not in _answers:
            _answers[t] = _softmax(other)
    key = (tuple(x.shape), x.dtype, str(x.device))
    if key not in _latest:
        _latest[key] = _softmax(x)
    return _latest[key]                             # nothing found ahead of this call: an earlier answer
