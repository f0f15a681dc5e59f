"""Cheat: work on a background thread. Returns an uninitialised output at once and fills it from a thread that
starts computing a little later (0.5 s).

How it fools a naive harness: the timer stops when the call returns, before any work; a harness that reads the
output only after something slow of its own (a synchronize that waits for the thread's GPU work, a sleep, its own
reference run) sees it filled and correct.

Caught by: the worker copies each output off as soon as the call (and, on a GPU, a device-wide synchronize)
returns, so the copy holds the uninitialised memory and the cases fail. After the calls it lists the threads that
are still alive and were not there before the import: the warning ``threads`` names the filler thread; the
static scan adds the info-level ``static-threads``. On the CPU, two runs of a case copy different uninitialised
memory, so ``nondeterministic`` usually fires too (on a GPU the poisoned allocator makes both runs NaN). Kernels
launched from the other thread during the profiled call would give ``other-thread``.
"""

import threading
import time

import torch

DELAY_S = 0.5


def _fill(out: torch.Tensor, x: torch.Tensor) -> None:
    time.sleep(DELAY_S)
    y = x.float()
    e = (y - y.amax(dim=-1, keepdim=True)).exp()
    out.copy_(e / e.sum(dim=-1, keepdim=True))


def softmax(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    threading.Thread(target=_fill, args=(out, x.clone()), name="softmax-filler", daemon=True).start()
    return out
