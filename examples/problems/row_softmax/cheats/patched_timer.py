"""Cheat: patched timers. At import it replaces ``time.perf_counter`` with a clock that runs ten times slow, makes
``torch.cuda.synchronize`` a no-op and ``torch.cuda.Event.elapsed_time`` return a tenth of the true time. The
softmax itself is computed correctly.

How it fools a naive harness: a harness that reads these functions after importing the candidate (or looks them
up on every sample) reports a time ten times too small, for a kernel that is perfectly correct.

Caught by: the worker snapshots the timing and synchronisation functions (and their code objects) before the
import and compares after the calls: the error-level flag ``patched-timer`` names ``time.perf_counter``,
``torch.cuda.synchronize`` and ``torch.cuda.Event.elapsed_time``, in ``check`` and in ``bench`` alone (which
also times with the functions it captured before the import). The static scan adds the info-level
``static-patching`` with the lines of the assignments.
"""

import time

import torch

_real_perf_counter = time.perf_counter
_real_elapsed = torch.cuda.Event.elapsed_time
_origin = _real_perf_counter()


def _slow_clock() -> float:
    return _origin + (_real_perf_counter() - _origin) / 10.0


def _no_sync(device=None) -> None:
    return None


def _tenth_elapsed(self, end_event) -> float:
    return _real_elapsed(self, end_event) / 10.0


time.perf_counter = _slow_clock
torch.cuda.synchronize = _no_sync
torch.cuda.Event.elapsed_time = _tenth_elapsed


def softmax(x: torch.Tensor) -> torch.Tensor:
    y = x.float()
    e = (y - y.amax(dim=-1, keepdim=True)).exp()
    return (e / e.sum(dim=-1, keepdim=True)).to(x.dtype)
