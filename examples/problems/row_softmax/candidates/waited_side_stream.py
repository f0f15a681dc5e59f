"""A correct candidate (GPU) that works on a stream of its own and makes the caller's stream wait for it, as
torch.compile's CUDA-graph warm-up does (``mode="reduce-overhead"``). Its kernels end after the caller's stream's
last kernel, but a timer on the caller's stream includes them: the profile records the caller's stream waiting
for them, and the harness says so with the warning ``other-streams``, not the error ``side-stream`` (compare
``cheats/side_stream.py``, which never waits back)."""

import torch

_stream = None


def softmax(x: torch.Tensor) -> torch.Tensor:
    global _stream
    if _stream is None:
        _stream = torch.cuda.Stream()
    _stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(_stream):
        y = x.float()
        e = (y - y.amax(dim=-1, keepdim=True)).exp()
        out = (e / e.sum(dim=-1, keepdim=True)).to(x.dtype)
    torch.cuda.current_stream().wait_stream(_stream)     # the caller's stream waits: nothing escapes its timer
    out.record_stream(torch.cuda.current_stream())
    return out
