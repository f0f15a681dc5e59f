"""A subtly wrong KernelBench candidate: a leaky ReLU (slope 0.01 for negative inputs) instead of ReLU.

Within atol = 1e-2 for inputs down to -1, so only the inputs below -1 (about one in six of a standard normal)
give it away.
"""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super(ModelNew, self).__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.where(x > 0, x, 0.01 * x)
