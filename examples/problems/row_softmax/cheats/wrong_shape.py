"""Bad candidate: the wrong output shape. Computes the softmax and returns it transposed (columns by rows), as a
column-major kernel whose output was never transposed back would.

Caught by: the comparison checks structure, shape and dtype before values: each case fails with "out: shape
(128, 64), expected (64, 128)".
"""

import torch


def softmax(x: torch.Tensor) -> torch.Tensor:
    y = x.float()
    e = (y - y.amax(dim=-1, keepdim=True)).exp()
    return (e / e.sum(dim=-1, keepdim=True)).to(x.dtype).t().contiguous()
