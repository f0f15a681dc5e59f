"""Cheat (KernelBench form): input mutation. ``forward`` returns ``x.relu_()``: the ReLU is computed in place, in
the caller's input tensor, which is then returned as the output.

How it fools a naive harness: the output is right and no output is allocated. A harness that runs the reference
after the candidate on the same tensor computes ReLU of an already-rectified input, which is the same thing, so
nothing looks wrong; the caller's data is gone.

Caught by: the worker fingerprints the inputs before and after every call: the error-level flag
``input-mutation`` ("case 19_ReLU: the candidate modified its inputs") rejects it, although its outputs are
correct. (``aten::relu_`` is not ``aten::relu``, so there is no ``library-fallback`` warning.)
"""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.relu_()
