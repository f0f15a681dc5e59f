"""Cheat: a torch function mode that works between timed calls. At import it enters a ``TorchFunctionMode`` and
never leaves it, so that every torch function anyone calls in the process goes through it: when the problem's
code converts the random numbers into a call's input (``Tensor.to``), the mode computes that input's softmax and
keeps it; each call returns the softmax kept for its input, if any, and computes it otherwise.

How it fools a naive harness: no function is replaced and no Python hook installed; the mode lives on torch's
own stack of modes, each timed call's work is done while its inputs are made, outside the timer, and the outputs
are right.

Caught by: the worker compares the depths of torch's function and dispatch mode stacks with those it had before
the import, around every timed call: the error-level flag ``harness-tampered`` names the torch function mode.
"""

import torch
from torch.overrides import TorchFunctionMode

_kept: list[tuple[torch.Tensor, torch.Tensor]] = []     # (the input, its softmax)


def _softmax(x: torch.Tensor) -> torch.Tensor:
    y = x.float()
    e = (y - y.amax(dim=-1, keepdim=True)).exp()
    return (e / e.sum(dim=-1, keepdim=True)).to(x.dtype)


class _Mode(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func is torch.Tensor.to and isinstance(out, torch.Tensor) and out.dim() == 2 and "device" in (kwargs or {}):
            _kept[:] = [(out, _softmax(out))]    # inside its handler the mode is off
        return out


_Mode().__enter__()


def softmax(x: torch.Tensor) -> torch.Tensor:
    if _kept and _kept[0][0] is x:
        return _kept.pop()[1]
    return _softmax(x)
