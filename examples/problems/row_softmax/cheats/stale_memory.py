"""Cheat (GPU): stale memory. Returns ``torch.empty_like(x)`` and computes nothing, hoping that the caching
allocator hands it the block where the reference's result (same size, same dtype) was just freed.

How it fools a naive harness: one that runs the reference first in the same process, frees its output and then
calls the candidate often gets exactly that block back, still holding the right answer; the "kernel" takes no
time at all.

Caught by: the reference runs in another process, and before each call the worker fills the memory the caching
allocator will hand out next with 0xFF bytes (NaN in float16 and float32): the output is all NaN and every case
fails ("... elements outside atol=..., rtol=... (N NaN)").
"""

import torch


def softmax(x: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)
