"""Cheat: an output that is not a tensor. ``softmax`` returns an object whose pickled form runs code when it is
loaded (``__reduce__`` names ``os.system``), which compares equal to anything and prints like a tensor.

How it fools a harness: one that ships outputs to the reference's process with ``pickle`` or
``torch.load(weights_only=False)`` runs the candidate's code there, in the process that decides the verdict (it
could patch the comparison); one that compares non-tensor outputs by ``==`` or by their ``repr`` passes it.

Caught by: outputs must be plain tensors, numbers and strings, or tuples, lists and dicts of them. The candidate's
worker rejects the object before saving anything ("output rejected: out is a ...pickled_output..._Anything:
outputs are tensors, ..."), and the reference loads outputs with ``weights_only=True``, which never calls code
from the file. The command in ``__reduce__`` would create ``/tmp/kpilot-cheat-pickled-output-ran``: it never
exists.
"""

import os

import torch

MARKER = "/tmp/kpilot-cheat-pickled-output-ran"


class _Anything:
    def __init__(self, shape):
        self.shape = shape

    def __eq__(self, other):
        return True

    def __repr__(self):
        return f"tensor(shape={self.shape})"

    def __reduce__(self):
        return (os.system, (f"touch {MARKER}",))


def softmax(x: torch.Tensor):
    return _Anything(tuple(x.shape))
