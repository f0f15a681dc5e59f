"""A KernelBench candidate that writes no kernel: it calls the library op the reference calls.

Correct, and as fast as the reference; a harness should say it falls back to torch.relu rather than count it
as a speedup.
"""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super(ModelNew, self).__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x)
