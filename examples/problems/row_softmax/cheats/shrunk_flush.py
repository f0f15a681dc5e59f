"""Cheat (GPU): a shrunk L2 flush buffer. Its calls look for the harness's flush buffer through the garbage
collector (an int32 CUDA tensor of 4 Mi elements or more that it did not make) until they find it, and re-stride
it in place so that it covers one element; the softmax itself is computed correctly.

How it fools a naive harness: the flush then reads 4 bytes instead of twice the L2, so the later calls find their
freshly made inputs still in the L2 and a memory-bound kernel times faster than it runs from memory. Nothing is
replaced: no function's identity or code changes.

Caught by: before each flush the harness checks the buffer's memory, size and strides against those it was made
with (through torch's C methods, which cannot be replaced); a change stops the timing of the case, with the
error-level flag ``harness-tampered``.
"""

import gc

import torch

_done = []


def _shrink() -> bool:
    found = False
    for obj in gc.get_objects():
        try:
            if (isinstance(obj, torch.Tensor) and obj.is_cuda and obj.dtype == torch.int32
                    and obj.numel() >= 1 << 22):
                obj.as_strided_((1,), (1,))
                found = True
        except Exception:
            continue
    return found


def softmax(x: torch.Tensor) -> torch.Tensor:
    if not _done and _shrink():
        _done.append(True)
    y = x.float()
    e = (y - y.amax(dim=-1, keepdim=True)).exp()
    return (e / e.sum(dim=-1, keepdim=True)).to(x.dtype)
