"""Cheat (KernelBench form): a library fallback. ``ModelNew.forward`` calls ``torch.relu``, the op the reference
``Model`` calls, and writes no kernel.

How it fools a naive harness: correct, and exactly as fast as the reference; KernelBench-style leaderboards have
counted such "kernels" as a speedup of 1 or, with noise, more.

Caught by: the profiled call of the candidate and of the reference (each in its own process) both run
``aten::relu`` and, inside it, ``aten::clamp_min``: the warning ``library-fallback``, "the candidate runs the
reference's own library op(s): aten::clamp_min, aten::relu". Correct, so it passes with that warning.
"""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x)
