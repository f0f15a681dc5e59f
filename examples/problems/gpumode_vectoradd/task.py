from typing import TypedDict

import torch

# (A, B, C): the two addends and a preallocated output, all (size, size) float16
input_t = tuple[torch.Tensor, torch.Tensor, torch.Tensor]
output_t = torch.Tensor


class TestSpec(TypedDict):
    size: int
    seed: int
