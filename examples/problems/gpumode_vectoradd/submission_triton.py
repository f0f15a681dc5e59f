"""A correct GPU MODE submission: vector addition as a Triton kernel writing into the preallocated output.

On a machine without a GPU it runs under Triton's interpreter: TRITON_INTERPRET=1 before this file is imported.
"""

import torch
import triton
import triton.language as tl
from task import input_t, output_t


@triton.jit
def add_kernel(a_ptr, b_ptr, c_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    a = tl.load(a_ptr + offsets, mask=mask)
    b = tl.load(b_ptr + offsets, mask=mask)
    tl.store(c_ptr + offsets, a + b, mask=mask)


def custom_kernel(data: input_t) -> output_t:
    A, B, C = data
    n = C.numel()
    block = 1024
    add_kernel[(triton.cdiv(n, block),)](A, B, C, n, BLOCK_SIZE=block)
    return C
