"""Cheat: work done while the harness prepares a call. At import it shadows ``torch.Tensor.detach`` with a
function that, handed a 2-D floating-point tensor, computes its softmax there and then and keeps it by the
tensor's address; each call returns the softmax kept for its input, if any, and computes it otherwise.

How it fools a naive harness: one that makes each timed call's inputs and then fingerprints them (which
detaches them) before starting its timer hands the inputs to the candidate's code outside the timer: every
timed call only looks its output up, and the outputs are right, so re-checking them finds nothing.

Caught by: the worker snapshots torch's namespaces (the ``torch``, ``torch.cuda`` and ``torch.nn.functional``
modules and the ``torch.Tensor`` class) before the import and compares after each case: the error-level flag
``harness-tampered`` names ``torch.Tensor.detach``.
"""

import torch

_kept: dict[int, torch.Tensor] = {}
_busy = []


def _softmax(x: torch.Tensor) -> torch.Tensor:
    y = x.float()
    e = (y - y.amax(dim=-1, keepdim=True)).exp()
    return (e / e.sum(dim=-1, keepdim=True)).to(x.dtype)


def _detach(self):
    if not _busy and self.dim() == 2 and self.is_floating_point():
        _busy.append(True)
        try:
            _kept[self.data_ptr()] = _softmax(torch._C.TensorBase.detach(self))
        finally:
            _busy.clear()
    return torch._C.TensorBase.detach(self)


torch.Tensor.detach = _detach


def softmax(x: torch.Tensor) -> torch.Tensor:
    out = _kept.pop(x.data_ptr(), None)
    return out if out is not None and out.shape == x.shape else _softmax(x)
