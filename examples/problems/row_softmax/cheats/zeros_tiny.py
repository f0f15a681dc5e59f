"""Cheat: zeros where the answer is tiny. Computes the softmax, then writes zero wherever the true value is below
the problem's absolute tolerance for the dtype (1e-3 for float16), which on the float16 case (1024 columns,
logits with standard deviation 3) is about nine elements in ten: a kernel that only has to find and write the
few large values.

How it fools a naive harness: every zeroed element is within ``atol`` of the reference, so an elementwise
``|got - expected| <= atol + rtol * |expected|`` test (``torch.allclose``) passes it.

Caught by: the comparison also requires the relative norm error ``||got - expected|| / ||expected||`` to be at
most 10 * max(atol, rtol); here it is about 0.015 against a bound of 0.01, so the float16 case fails with
"out: relative norm error ... above 0.01" and no element outside the elementwise tolerance. (On the float32
case, atol = 1e-5, the values it zeroes are too small to move the norm: that case passes.)
"""

import torch

_ATOL = {torch.float16: 1e-3, torch.bfloat16: 1e-2, torch.float32: 1e-5}


def softmax(x: torch.Tensor) -> torch.Tensor:
    y = x.float()
    e = (y - y.amax(dim=-1, keepdim=True)).exp()
    y = e / e.sum(dim=-1, keepdim=True)
    threshold = 0.999 * _ATOL.get(x.dtype, 1e-5)
    return torch.where(y < threshold, torch.zeros_like(y), y).to(x.dtype)
