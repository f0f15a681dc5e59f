"""Cheat: outputs cached by shape. Computes the softmax on the first call for each (shape, dtype, device) and
returns that same tensor for every later call with inputs of that shape, whatever their values.

How it fools a naive harness: a harness that checks once with a fixed input, then times many calls on the same
input (or on inputs it does not check), sees a correct answer and a time of nearly nothing.

Caught by: ``check`` runs every case with several secret seeds: the second seed's inputs get the first seed's
answer, and that case fails ("N of M elements outside atol=..., rtol=..."). ``bench`` prepares new inputs
before every timed call and re-checks a random sample of the timed outputs (always including the first) against
the reference in another process: they are wrong, so the case's ``check_ok`` is false and the error-level flag
``timed-output-wrong`` is raised (on the CPU path, ``--device cpu``, as on a GPU).
"""

import torch

_cache: dict = {}


def softmax(x: torch.Tensor) -> torch.Tensor:
    key = (tuple(x.shape), x.dtype, str(x.device))
    if key not in _cache:
        y = x.float()
        e = (y - y.amax(dim=-1, keepdim=True)).exp()
        _cache[key] = (e / e.sum(dim=-1, keepdim=True)).to(x.dtype)
    return _cache[key]
