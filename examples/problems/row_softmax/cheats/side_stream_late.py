"""Cheat (GPU): a side stream from the second call on. The first call is honest and runs on the caller's stream;
every later call launches its work on a private ``torch.cuda.Stream`` and returns without making the caller's
stream wait.

How it fools a naive harness: like side_stream.py (CUDA events on the current stream time only the launches;
a device-wide synchronize before reading the output makes the output right), but it also slips past a guard that
profiles only the first call to see where kernels run (on an H200 it timed 1.3 us, against 18 us for the honest
Triton kernel).

Caught by: the profiled guard call is the candidate's first call, which is honest, so ``check`` passes it. While
timing, ``bench`` records the timed stream once more after each sample's device-wide synchronize and compares
the gap with the idle round trip: the device stayed busy after the timed stream finished, which is the
error-level flag ``side-stream`` ("case ...: the GPU stayed busy N us (median) after the timed stream finished
(M us timed): work on another stream or from another thread is outside the timer"), so ``eval`` rejects it.
"""

import torch

_stream = None
_calls = 0


def _softmax(x: torch.Tensor) -> torch.Tensor:
    y = x.float()
    e = (y - y.amax(dim=-1, keepdim=True)).exp()
    return (e / e.sum(dim=-1, keepdim=True)).to(x.dtype)


def softmax(x: torch.Tensor) -> torch.Tensor:
    global _stream, _calls
    _calls += 1
    if _calls == 1:
        return _softmax(x)
    if _stream is None:
        _stream = torch.cuda.Stream()
    _stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(_stream):
        return _softmax(x)
