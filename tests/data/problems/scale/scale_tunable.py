"""y = 2x in Triton with a declared tuning space (BLOCK elements per program, NUM_WARPS)."""

import torch
import triton
import triton.language as tl

BLOCK = 64
NUM_WARPS = 1
KPILOT_TUNE = {"BLOCK": [64, 256, 1024], "NUM_WARPS": [1, 4]}
KPILOT_SPECS = {"scale_kernel": {"signature": "x_ptr:*fp32, y_ptr:*fp32, n:i32", "constexprs": {"BLOCK": BLOCK},
                                 "num_warps": NUM_WARPS}}


@triton.jit
def scale_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=mask) * 2, mask=mask)


def scale(x: torch.Tensor) -> torch.Tensor:
    y = torch.empty_like(x)
    scale_kernel[(triton.cdiv(x.numel(), BLOCK),)](x, y, x.numel(), BLOCK=BLOCK, num_warps=NUM_WARPS)
    return y
