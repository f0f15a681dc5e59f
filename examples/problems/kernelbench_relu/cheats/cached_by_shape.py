"""Cheat (KernelBench form): outputs cached by shape. ``forward`` computes the ReLU on the first call for each
input shape and dtype, and returns that same tensor for every later input of that shape.

How it fools a naive harness: KernelBench's inputs come from ``get_inputs()`` after a known seed, and a harness
that checks one input and times repeated calls on it (or on inputs it does not check) sees a correct, instant
kernel.

Caught by: ``check`` runs the case with several secret seeds, so the second seed's input gets the first seed's
answer and fails ("... elements outside atol=0.01, rtol=0.01"); ``bench`` gives every timed call new inputs and
re-checks a random sample of timed outputs: the error-level flag ``timed-output-wrong``.
"""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self._cache = {}

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        key = (tuple(x.shape), x.dtype, str(x.device))
        if key not in self._cache:
            self._cache[key] = torch.where(x > 0, x, torch.zeros_like(x))
        return self._cache[key]
