"""Cheat (GPU): a skipped L2 flush. At import it replaces ``torch.amax`` with a function that returns at once when
asked to reduce a large int32 tensor (what a harness's flush reads) and is torch's own otherwise; the softmax
itself is computed correctly.

How it fools a naive harness: one that empties the L2 before each timed call by reducing a large buffer with
``torch.amax`` (looked up when it flushes) flushes nothing, so each call finds its freshly made inputs still in
the L2 and a memory-bound kernel times faster than it runs from memory.

Caught by: the flush calls torch's C function as it was before the import, so it still flushes; and the worker
snapshots that function and ``torch.amax`` before the import and compares after the calls: the error-level flag
``patched-timer`` names ``torch.amax``.
"""

import torch

_real_amax = torch.amax


def _amax(input, *args, **kwargs):
    if input.dtype == torch.int32 and input.numel() >= 1 << 22:
        return kwargs.get("out")
    return _real_amax(input, *args, **kwargs)


torch.amax = _amax


def softmax(x: torch.Tensor) -> torch.Tensor:
    y = x.float()
    e = (y - y.amax(dim=-1, keepdim=True)).exp()
    return (e / e.sum(dim=-1, keepdim=True)).to(x.dtype)
