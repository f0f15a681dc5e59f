"""Cheat: a profile hook that works between timed calls. At import it installs a profile function
(``sys.setprofile``), which Python calls on every function call and return; when the harness's code that makes a
call's inputs returns, the hook computes their softmax and keeps it; each call returns the softmax kept for its
input, if any, and computes it otherwise.

How it fools a naive harness: no function of torch, of the problem or of the harness is replaced, so comparing
them finds nothing; each timed call's work is done while its inputs are made, outside the timer, and the outputs
are right.

Caught by: around every timed call the worker compares Python's profile, trace and monitoring hooks with those
it had before the import: the error-level flag ``harness-tampered`` says a profile function was installed.
"""

import sys

import torch

_kept: dict[int, torch.Tensor] = {}


def _softmax(x: torch.Tensor) -> torch.Tensor:
    y = x.float()
    e = (y - y.amax(dim=-1, keepdim=True)).exp()
    return (e / e.sum(dim=-1, keepdim=True)).to(x.dtype)


def _hook(frame, event, arg) -> None:
    if (event == "return" and frame.f_code.co_name == "make_inputs" and isinstance(arg, tuple) and arg
            and isinstance(arg[0], torch.Tensor)):
        sys.setprofile(None)          # not inside its own work
        try:
            _kept.clear()
            _kept[arg[0].data_ptr()] = _softmax(arg[0])
        finally:
            sys.setprofile(_hook)


sys.setprofile(_hook)


def softmax(x: torch.Tensor) -> torch.Tensor:
    out = _kept.pop(x.data_ptr(), None)
    return out if out is not None else _softmax(x)
