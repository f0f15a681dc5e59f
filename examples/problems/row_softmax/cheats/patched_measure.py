"""Cheat: replaces the harness's own timing function. At import it swaps ``kernelpilot.evaluate.timing.measure``
for one that reports every sample as 0.5 us; the softmax itself is correct but sleeps
20 ms a call.

How it fools a harness: a worker that looks ``measure`` up when it starts timing (after the import) reports a
20 ms call as 0.5 us, with every output right.

Caught by: the worker binds its timing functions before the candidate is imported and times with those; it also
snapshots the harness's functions and code objects and finds them changed: the error-level flag
``harness-tampered`` rejects the candidate, and the time reported is the true one (about 20 ms).
"""

import time

import torch

import kernelpilot.evaluate.timing as _timing

_real = _timing.measure


def _fast(sample, method, opts, **kw):
    t = _real(sample, method, opts, **kw)
    t.median_us = t.min_us = t.mean_us = 0.5
    return t


_timing.measure = _fast


def softmax(x: torch.Tensor) -> torch.Tensor:
    time.sleep(0.02)
    return torch.softmax(x.float(), dim=-1).to(x.dtype)
