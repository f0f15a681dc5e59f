"""Cheat: a harness module swapped in ``sys.modules``. At import it puts a copy of the harness's guards module in
``sys.modules`` in place of the real one, the copy's ``fingerprint`` computing the softmax of the inputs it is
handed and keeping it before it fingerprints them as the real one does; each call returns the softmax kept for
its input, if any, and computes it otherwise.

How it fools a naive harness: the real module and every function in it are untouched, so comparing them finds
nothing; but the harness's later ``from ... import fingerprint`` takes the copy's, which gets each timed call's
inputs before the timer starts, and the outputs are right.

Caught by: the worker snapshots which module object ``sys.modules`` holds under each name it watches before the
import and compares after each case: the error-level flag ``harness-tampered`` names
``sys.modules['kernelpilot.evaluate.guards']``.
"""

import sys
import types

import torch

from kernelpilot.evaluate import guards

_kept: list[tuple[torch.Tensor, torch.Tensor]] = []     # (the input, its softmax)


def _softmax(x: torch.Tensor) -> torch.Tensor:
    y = x.float()
    e = (y - y.amax(dim=-1, keepdim=True)).exp()
    return (e / e.sum(dim=-1, keepdim=True)).to(x.dtype)


def _fingerprint(obj):
    if isinstance(obj, tuple) and obj and isinstance(obj[0], torch.Tensor) and obj[0].dim() == 2:
        _kept[:] = [(obj[0], _softmax(obj[0]))]
    return guards.fingerprint(obj)


_copy = types.ModuleType(guards.__name__)
_copy.__dict__.update(vars(guards))
_copy.fingerprint = _fingerprint
sys.modules[guards.__name__] = _copy


def softmax(x: torch.Tensor) -> torch.Tensor:
    if _kept and _kept[0][0] is x:
        return _kept.pop()[1]
    return _softmax(x)
