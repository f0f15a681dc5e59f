"""Cheat: a lazy output. Returns a ``torch.Tensor`` subclass holding uninitialised memory and a reference to the
input; the softmax is computed only when some torch function first touches the result (``__torch_function__``).

How it fools a naive harness: the call returns at once, so a timer around it measures an allocation; the real
work runs later, inside the harness's own ``torch.allclose(out, ref)`` (or ``.cpu()``, ``.to()``), where the
comparison sees the right values. It passes any checker that compares values, and it is "fast".

Caught by: the worker accepts only plain ``torch.Tensor`` leaves as outputs (``type(t) is torch.Tensor``,
checked before any torch function touches them): the case fails with "output rejected: out is a
...._Deferred (a tensor subclass)" and the error-level flag ``lazy-output`` rejects the candidate. ``bench``
alone checks the timed outputs the same way ("a timed output is not a plain tensor: ..."): there the copy it
keeps for re-checking would compute the right values, outside the timer.
"""

import torch


def _softmax(x: torch.Tensor) -> torch.Tensor:
    y = x.float()
    e = (y - y.amax(dim=-1, keepdim=True)).exp()
    return (e / e.sum(dim=-1, keepdim=True)).to(x.dtype)


class _Deferred(torch.Tensor):
    """Uninitialised until a torch function sees it; then filled with the softmax of its source."""

    @staticmethod
    def __new__(cls, src: torch.Tensor):
        out = torch.Tensor._make_subclass(cls, torch.empty_like(src))
        out._src = src
        out._pending = True
        return out

    def _materialise(self) -> None:
        if self.__dict__.get("_pending"):
            self._pending = False
            with torch._C.DisableTorchFunctionSubclass():
                torch.Tensor.copy_(self, _softmax(self._src))

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        for a in list(args) + list(kwargs.values()):
            for t in (a if isinstance(a, (list, tuple)) else (a,)):
                if isinstance(t, _Deferred):
                    t._materialise()
        with torch._C.DisableTorchFunctionSubclass():
            return func(*args, **kwargs)     # plain tensors out: the result looks ordinary


def softmax(x: torch.Tensor) -> torch.Tensor:
    return _Deferred(x)
