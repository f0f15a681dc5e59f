"""Cheat: a library fallback. Writes no kernel: it calls ``torch.softmax``, the op the reference itself calls.

How it fools a naive harness: it is correct, and as fast as the reference (or faster, where the reference
converts to float32 first); reported as an "optimised kernel" it is a speedup of one, or a speedup that is only
the library's.

Caught by: the worker profiles one call of the candidate and one of the reference, each in its own process, and
intersects the aten ops they run (allocation, views and copies left out). The reference,
``torch.softmax(x.float(), dim=-1).to(x.dtype)``, runs ``aten::softmax`` and ``aten::_softmax`` (``aten::to`` is
left out as a copy); so does this candidate, which gives the warning ``library-fallback``: "the candidate runs
the reference's own library op(s): aten::_softmax, aten::softmax". It is correct, so it passes with that warning.
"""

import torch


def softmax(x: torch.Tensor) -> torch.Tensor:
    return torch.softmax(x, dim=-1, dtype=torch.float32).to(x.dtype)
