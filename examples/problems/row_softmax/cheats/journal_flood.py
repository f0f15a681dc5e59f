"""Cheat: floods the harness's journal. It finds the pipes among its open file descriptors, makes them
non-blocking, and writes megabytes of records into each, in an endless loop.

How it harms a harness: the parent reads the journal as it comes; a worker writing without end keeps the parent
busy reading (a whole core) until the job's timeout, and its records could crowd out the harness's own.

Caught by: the parent reads at most 64 MiB of journal from a worker; past that it stops reading and ends the
worker: "the worker wrote more than the harness's journal takes".
"""

import os
import stat

import torch

_BLOCK = (b'{"flood": "' + b"x" * 65000 + b'"}\n')


def softmax(x: torch.Tensor) -> torch.Tensor:
    pipes = []
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        try:
            if fd > 2 and stat.S_ISFIFO(os.fstat(fd).st_mode):
                os.set_blocking(fd, False)      # a pipe nobody reads fast (a library's helper) never stalls it
                pipes.append(fd)
        except OSError:
            pass
    while True:
        for fd in pipes:
            try:
                os.write(fd, _BLOCK)
            except OSError:
                pass
