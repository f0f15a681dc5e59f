"""Cheat (GPU, CUDA graphs): a graph replayed off the timed stream. At import it replaces
``torch.cuda.CUDAGraph.replay`` with one that replays the graph on a stream of its own, which the caller's stream
does not wait for; the softmax itself is computed correctly.

How it fools a naive harness: one that times a graph's replay with events on its own stream and calls
``graph.replay()`` (looked up when it replays) records both events with nothing between them, so the replay
times at almost nothing; the device-wide synchronize after still lets the output be right when it is checked.

Caught by: the harness replays with the function as it was before the import, so the replay is timed; and the
worker snapshots it before the import and compares after the calls: the error-level flag ``patched-timer`` names
``torch.cuda.CUDAGraph.replay``.
"""

import torch

_real_replay = torch.cuda.CUDAGraph.replay
_side = []


def _replay(self) -> None:
    if not _side:
        _side.append(torch.cuda.Stream())
    _side[0].wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(_side[0]):
        _real_replay(self)


torch.cuda.CUDAGraph.replay = _replay


def softmax(x: torch.Tensor) -> torch.Tensor:
    y = x.float()
    e = (y - y.amax(dim=-1, keepdim=True)).exp()
    return (e / e.sum(dim=-1, keepdim=True)).to(x.dtype)
