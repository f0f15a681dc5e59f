"""A wrong GPU MODE submission that is right on every test size and wrong on the benchmark sizes: past the
largest test it adds only the first half of the elements (half the work, so twice as fast where it is timed).

GPU MODE's `test` mode runs the tests only and passes it; `kpilot check` checks the benchmark shapes too and
fails it.
"""

import torch
from task import input_t, output_t


def custom_kernel(data: input_t) -> output_t:
    A, B, C = data
    n = C.numel() if C.shape[0] <= 256 else C.numel() // 2
    C.view(-1)[:n] = A.view(-1)[:n] + B.view(-1)[:n]
    return C
