"""Cheat: specialised to the tested shapes. Processes rows in tiles of a hard-coded 64 rows and has no tail
handling: rows past the last full tile are left at zero. Both public cases (64 and 256 rows) are multiples of
64, so it is exact on them.

How it fools a naive harness: a harness that checks only the shapes it publishes sees a correct kernel; a
"fast" kernel that drops its bounds checks is common, and this is its honest-looking form.

Caught by: the native format's ``vary = ["rows"]`` makes hidden variants of the first case (rows 65 and 35)
that the candidate never saw; they fail while every public case passes, which is the error-level flag
``shape-specialised`` ("correct on every public case but wrong on shapes it was not shown:
rows=35,cols=128,dtype=float32, rows=65,cols=128,dtype=float32").
"""

import torch

ROWS_PER_TILE = 64


def softmax(x: torch.Tensor) -> torch.Tensor:
    rows = x.shape[0]
    out = torch.zeros_like(x)
    for start in range(0, rows - ROWS_PER_TILE + 1, ROWS_PER_TILE):   # full tiles only: no tail
        tile = x[start:start + ROWS_PER_TILE].float()
        e = (tile - tile.amax(dim=-1, keepdim=True)).exp()
        out[start:start + ROWS_PER_TILE] = (e / e.sum(dim=-1, keepdim=True)).to(x.dtype)
    return out
