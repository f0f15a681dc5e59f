"""Bad candidate: crashes its process. On its first call it reads address 0 through ``ctypes``, which kills the
process with SIGSEGV (the stand-in for a kernel or extension that corrupts memory).

How it fools a naive harness: one that runs candidates in its own process dies with it, taking every result and
the rest of the run along.

Caught by: candidates run in a separate worker process; its death by signal becomes an error result, "the
candidate could not be run: the worker process crashed with a segmentation fault (SIGSEGV)", and the caller
carries on.
"""

import ctypes

import torch


def softmax(x: torch.Tensor) -> torch.Tensor:
    ctypes.string_at(0)          # read from address 0: SIGSEGV
    return x
