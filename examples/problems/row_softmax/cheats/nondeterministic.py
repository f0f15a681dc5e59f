"""Cheat (mild): a nondeterministic result. Computes the softmax and scales each value by 1 + u, with u uniform
noise of a quarter of the relative tolerance drawn fresh on every call: the stand-in for a kernel whose result
depends on a race (atomics in an unspecified order, a reduction split that depends on timing).

How it fools a naive harness: each output is within tolerance, so a single check passes; the kernel's results
are not reproducible, which matters to anyone who bisects, caches or compares runs.

Caught by: the worker runs every case twice on identical inputs and compares the two outputs bit for bit; they
differ, which is the warning ``nondeterministic`` (it is not an error: the outputs are correct, and the check
passes).
"""

import torch

_RTOL = {torch.float16: 1e-3, torch.bfloat16: 1e-2, torch.float32: 1e-5}


def softmax(x: torch.Tensor) -> torch.Tensor:
    y = x.float()
    e = (y - y.amax(dim=-1, keepdim=True)).exp()
    y = e / e.sum(dim=-1, keepdim=True)
    amp = _RTOL.get(x.dtype, 1e-5) / 4
    noise = (torch.rand(y.shape, device=y.device) * 2 - 1) * amp
    return (y * (1 + noise)).to(x.dtype)
