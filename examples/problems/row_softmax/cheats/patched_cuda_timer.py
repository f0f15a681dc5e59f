"""Cheat (GPU): a patched CUDA event timer. At import it replaces ``torch.cuda.Event.elapsed_time`` with a
function that reports a fifth of the true time; the softmax itself is computed correctly.

How it fools a naive harness: one that times with CUDA events and calls ``start.elapsed_time(end)`` after
importing the candidate reports the kernel five times faster than it is.

Caught by: the worker snapshots the timing functions (and their code objects) before the import and compares
after the calls: the error-level flag ``patched-timer`` names ``torch.cuda.Event.elapsed_time``.
"""

import torch

_real_elapsed = torch.cuda.Event.elapsed_time


def _fifth(self, end_event) -> float:
    return _real_elapsed(self, end_event) / 5.0


torch.cuda.Event.elapsed_time = _fifth


def softmax(x: torch.Tensor) -> torch.Tensor:
    y = x.float()
    e = (y - y.amax(dim=-1, keepdim=True)).exp()
    return (e / e.sum(dim=-1, keepdim=True)).to(x.dtype)
