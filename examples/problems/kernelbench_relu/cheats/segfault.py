"""Bad candidate (KernelBench form): ``forward`` reads address 0 through ``ctypes`` and kills its process with
SIGSEGV, the stand-in for a ``load_inline`` extension that corrupts memory.

Caught by: the candidate runs in a worker process of its own; the result is the error "the candidate could not be
run: the worker process crashed with a segmentation fault (SIGSEGV)", and the caller carries on.
"""

import ctypes

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        ctypes.string_at(0)
        return x
