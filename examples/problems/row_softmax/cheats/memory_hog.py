"""Cheat (or a bug): takes host memory without end. Its call allocates 256 MiB blocks, touching every page, until
the process is stopped.

How it harms a harness: without a limit the machine runs out of memory and the kernel's OOM killer takes some
process, maybe the harness or another user's job, with no message that says why.

Caught by: the worker's supervisor adds up the resident memory of the worker and everything it started several
times a second and kills them past the limit (``EvalOptions(memory_limit_gb=...)``, 80% of the machine's memory
by default): "the worker's processes held ... of host memory, over its limit of ...".
"""

import torch

_held = []


def softmax(x: torch.Tensor) -> torch.Tensor:
    while True:
        _held.append(bytearray(256 << 20))
        for i in range(0, len(_held[-1]), 4096):
            _held[-1][i] = 1
