"""A KernelBench candidate with a declared tuning space, for `kpilot optimize --strategy search` (and its
`--parallel N`): ReLU as a Triton kernel, BLOCK_SIZE elements per program with NUM_WARPS warps. The defaults are
a deliberately small start.

On a machine without a GPU it runs under Triton's interpreter: TRITON_INTERPRET=1 before this file is imported.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl

BLOCK_SIZE = 128
NUM_WARPS = 1
KPILOT_TUNE = {"BLOCK_SIZE": [128, 512, 1024, 2048, 4096], "NUM_WARPS": [1, 2, 4, 8]}


@triton.jit
def relu_kernel(x_ptr, out_ptr, n_elements, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, tl.where(x > 0, x, 0.0), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super(ModelNew, self).__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        out = torch.empty_like(x)
        n = x.numel()
        relu_kernel[(triton.cdiv(n, BLOCK_SIZE),)](x, out, n, BLOCK=BLOCK_SIZE, num_warps=NUM_WARPS)
        return out
