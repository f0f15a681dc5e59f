"""Bad candidate: never returns. Its call blocks forever without using the CPU (the stand-in for a kernel that
deadlocks on a barrier, or a host thread waiting on a flag that is never set).

How it fools a naive harness: one without a timeout waits forever; one that times out with a thread cannot kill
the stuck call.

Caught by: the worker process has a wall-clock limit (``--timeout``, ``EvalOptions.timeout``); past it, its whole
process group is killed and the result is the error "... did not finish within N s (a hang, or a candidate far
too slow); it was killed".
"""

import time

import torch


def softmax(x: torch.Tensor) -> torch.Tensor:
    while True:
        time.sleep(3600)
