"""Cheat (GPU): a fast path that never runs. Defines a Triton softmax kernel, but the condition that selects it
is never true for the problem's inputs (rows must be a multiple of 4096), so every call falls back to
``torch.softmax``.

How it fools a naive harness: the file reads like a Triton kernel, and the results are correct, so a reviewer
and a harness that looks only at correctness and time credit the kernel; the time is the library's.

Caught by: the worker's profiled call lists the GPU kernels that ran and compares them with the kernels the file
defines (``@triton.jit`` functions): none of them ran, which is the warning ``fast-path-not-run`` (GPU only);
and the ops it ran include the reference's own (``aten::softmax``, ``aten::_softmax``), the warning
``library-fallback``. Both are warnings: the candidate is correct, and passes with them.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def fused_softmax_kernel(x_ptr, y_ptr, cols, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    mask = offs < cols
    v = tl.load(x_ptr + row * stride + offs, mask=mask, other=-float("inf")).to(tl.float32)
    v = tl.exp(v - tl.max(v, axis=0))
    tl.store(y_ptr + row * stride + offs, (v / tl.sum(v, axis=0)).to(y_ptr.dtype.element_ty), mask=mask)


def softmax(x: torch.Tensor) -> torch.Tensor:
    rows, cols = x.shape
    if x.is_cuda and rows % 4096 == 0:          # never true for this problem's cases
        x = x.contiguous()
        y = torch.empty_like(x)
        fused_softmax_kernel[(rows,)](x, y, cols, x.stride(0), BLOCK=triton.next_power_of_2(cols))
        return y
    return torch.softmax(x, dim=-1, dtype=torch.float32).to(x.dtype)
