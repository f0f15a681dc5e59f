"""Cheat: work done in the harness's own code between timed calls. At import it wraps the method of the
harness's runtime class that makes each call's inputs (``NativeRuntime.make_inputs``) so that it also computes
their softmax and keeps it; each call returns the softmax kept for its input, if any, and computes it otherwise.

How it fools a naive harness: torch and the problem's files are untouched; a harness that watches only its
timing functions misses a method of its own that runs before the timer starts, and the outputs are right.

Caught by: the worker snapshots every function and class method of its own modules (each ``kernelpilot``
module loaded before the import) and compares after each case: the error-level flag ``harness-tampered``
names ``kernelpilot.evaluate.formats.native.NativeRuntime.make_inputs``.
"""

import torch

from kernelpilot.evaluate.formats import native

_kept: dict[int, torch.Tensor] = {}
_real = native.NativeRuntime.make_inputs


def _softmax(x: torch.Tensor) -> torch.Tensor:
    y = x.float()
    e = (y - y.amax(dim=-1, keepdim=True)).exp()
    return (e / e.sum(dim=-1, keepdim=True)).to(x.dtype)


def _make_inputs(self, case, seed, device):
    inputs = _real(self, case, seed, device)
    _kept.clear()
    _kept[inputs[0].data_ptr()] = _softmax(inputs[0])
    return inputs


native.NativeRuntime.make_inputs = _make_inputs


def softmax(x: torch.Tensor) -> torch.Tensor:
    out = _kept.pop(x.data_ptr(), None)
    return out if out is not None else _softmax(x)
