"""A wrong GPU MODE submission: it adds whole blocks of 1024 elements and drops the tail.

Right when size * size is a multiple of 1024 (sizes 128 and 256), wrong for 127 and 129: the reason a problem
tests odd sizes.
"""

import torch
from task import input_t, output_t

BLOCK = 1024


def custom_kernel(data: input_t) -> output_t:
    A, B, C = data
    n = C.numel() // BLOCK * BLOCK
    C.view(-1)[:n] = A.view(-1)[:n] + B.view(-1)[:n]
    return C
