"""Cheat: rigging the choice of re-checked timed outputs. ``bench`` re-checks a few timed outputs, chosen by
reservoir sampling after each call: the first ``keep_n`` timed calls fill the reservoir, and timed call ``t``
replaces slot ``j = int.from_bytes(os.urandom(8)) % (t + 1)`` when ``j < keep_n``. ``os.urandom`` is looked up
when it is called, in the candidate's own process, so at import this candidate replaces it: when an 8-byte draw
comes for timed call ``t`` it returns ``t`` itself, so ``j = t`` and no later call ever enters the reservoir.
(It tells the draws apart by size: the worker's 4-byte draw of a bench case's input seed marks the start of that
case; ``keep_n`` is read from the worker's job file, ``sys.argv[1]``.) The candidate computes honestly on every
call until the first 8-byte draw of a case, which covers the warm-up and the calls whose outputs are kept, and
returns the answer of its latest honest call from then on.

How it fools a harness: ``check`` draws its seeds before the import, so every case there is honest and passes;
in ``bench`` the re-checked outputs would all be honest while most timed samples time a dictionary lookup, and
``eval`` would pass it with a fake speedup.

Caught by: the worker's snapshot of timing functions, taken before the import, includes ``os.urandom``: the
error-level flag ``patched-timer`` ("... replaced timing or synchronisation functions: os.urandom") rejects it,
and the reservoir draws with the ``os.urandom`` captured before the import anyway. The static scan adds the
info-level ``static-patching`` ("assigns os.urandom").
"""

import json
import os
import sys

import torch

_real_urandom = os.urandom
_case = {"in_bench": False, "draws": 0}


def _keep_n() -> int:
    try:
        with open(sys.argv[1]) as f:
            return int(json.load(f).get("verify", 3))
    except Exception:
        return 3


KEEP_N = _keep_n()


def _urandom(n: int) -> bytes:
    if n == 4:                   # a bench case's input seed: the case starts
        _case.update(in_bench=True, draws=0)
    elif n == 8 and _case["in_bench"]:
        t = KEEP_N + _case["draws"]          # the timed call this draw decides about
        _case["draws"] += 1
        return t.to_bytes(8, "little")       # j = t % (t + 1) = t >= keep_n: never kept
    return _real_urandom(n)


os.urandom = _urandom

_latest: dict = {}    # (shape, dtype, device) -> the answer of the latest honest call


def softmax(x: torch.Tensor) -> torch.Tensor:
    key = (tuple(x.shape), x.dtype, str(x.device))
    if key not in _latest or not _case["in_bench"] or _case["draws"] == 0:
        y = x.float()
        e = (y - y.amax(dim=-1, keepdim=True)).exp()
        _latest[key] = (e / e.sum(dim=-1, keepdim=True)).to(x.dtype)
    return _latest[key]
