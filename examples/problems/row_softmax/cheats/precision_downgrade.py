"""Cheat: a silent precision downgrade. Converts the input to bfloat16, computes the softmax there, and converts
the result back to the input's dtype, so the output has the right dtype and shape.

How it fools a naive harness: half the bytes to move and a faster math path; a harness with a loose tolerance,
or one that checks only shape and dtype, or compares at bfloat16's precision, takes it.

Caught by: the problem's tolerances (float32: atol = rtol = 1e-5; float16: 1e-3) are far below bfloat16's
resolution (8 bits of mantissa, relative steps of 2^-8), so the cases fail ("N of M elements outside atol=1e-05,
rtol=1e-05; ...", with a relative norm error of about 0.006 on float32 and 0.012 on float16).
"""

import torch


def softmax(x: torch.Tensor) -> torch.Tensor:
    y = x.to(torch.bfloat16)
    e = (y - y.amax(dim=-1, keepdim=True)).exp()
    return (e / e.sum(dim=-1, keepdim=True)).to(x.dtype)
