"""Cheat: input mutation. Computes the softmax in place, in the input's own storage, and returns the input.

How it fools a naive harness: the output is right, and an in-place kernel saves an allocation and a write stream,
so it also looks faster. But the caller's tensor now holds the softmax instead of the logits: a harness that runs
the reference afterwards on the same tensor compares against softmax(softmax(x)), and a harness that reuses its
inputs across timed calls times a different problem from the second call on. (The harsher variant writes zeros
into the input and returns the uniform distribution: the reference, run on the same zeroed tensor, agrees.)

Caught by: the worker fingerprints every input before the call and again after it; a change is the error-level
flag ``input-mutation`` ("case ...: the candidate modified its inputs"), which rejects the candidate although
every case's output is correct.
"""

import torch


def softmax(x: torch.Tensor) -> torch.Tensor:
    y = x.float()
    y = y - y.amax(dim=-1, keepdim=True)
    y = y.exp()
    y = y / y.sum(dim=-1, keepdim=True)
    x.copy_(y)          # the result goes into the input's storage ...
    return x            # ... and the input is the output
