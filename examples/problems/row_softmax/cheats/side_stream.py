"""Cheat (GPU): work on a side stream. Launches the softmax on a ``torch.cuda.Stream`` of its own and returns
without making the caller's stream wait for it.

How it fools a naive harness: CUDA events recorded on the current stream around the call measure nothing but
the launches; if the harness then synchronises the whole device before reading the output (most do), the output
is complete and correct. The kernel looks almost free.

Caught by: the worker's profiled call records which stream each kernel ran on, against a marker kernel it
launches on the timed stream first; kernels elsewhere that end after the timed stream's last kernel, when the
timed stream did not wait for them (no stream-wait event in the profile), are the error-level flag
``side-stream`` ("kernels ran on a stream other than the timed one ... outside the timer: ..."). The static scan
adds the info-level ``static-streams``.
"""

import torch

_stream = None


def softmax(x: torch.Tensor) -> torch.Tensor:
    global _stream
    if _stream is None:
        _stream = torch.cuda.Stream()
    _stream.wait_stream(torch.cuda.current_stream())     # the input is ready; the caller's stream never waits back
    with torch.cuda.stream(_stream):
        y = x.float()
        e = (y - y.amax(dim=-1, keepdim=True)).exp()
        out = (e / e.sum(dim=-1, keepdim=True)).to(x.dtype)
    return out
