"""Cheat: work done while the problem's code makes the inputs. At import it finds the problem's module (the file
that makes the inputs, in ``sys.modules``) and replaces its global ``torch`` with a proxy that is torch in every
respect but ``randn``: the proxy's ``randn`` makes the random numbers as torch does, then computes the softmax of
the input they will become (scaled and converted as the problem's code does next) and keeps it; each call returns
the softmax kept for an input of its shape and dtype, if any, and computes it otherwise.

How it fools a naive harness: nothing of torch or of the harness is replaced, only a name in the problem's own
module, so a harness that compares functions finds nothing; each timed call's work is done while the harness
makes its inputs, outside the timer, and the outputs are right.

Caught by: the worker also snapshots the globals of the problem's files before the import and compares after
each case: the error-level flag ``harness-tampered`` names the module's ``torch``.
"""

import sys

import torch

_kept: list[torch.Tensor] = []


def _softmax(x: torch.Tensor) -> torch.Tensor:
    y = x.float()
    e = (y - y.amax(dim=-1, keepdim=True)).exp()
    return (e / e.sum(dim=-1, keepdim=True)).to(x.dtype)


class _Torch:
    def __getattr__(self, name):
        return getattr(torch, name)

    def randn(self, *args, **kwargs):
        r = torch.randn(*args, **kwargs)
        _kept.clear()
        _kept.append(_softmax(r * 3.0))     # float32: the problem scales by 3 and converts after
        return r


for _name, _mod in list(sys.modules.items()):
    if _name.startswith("kpilot_reference") and getattr(_mod, "torch", None) is torch:
        _mod.torch = _Torch()


def softmax(x: torch.Tensor) -> torch.Tensor:
    if _kept and _kept[0].shape == x.shape and x.dtype == torch.float32:
        return _kept.pop().to(x.device)
    return _softmax(x)
