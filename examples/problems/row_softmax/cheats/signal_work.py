"""Cheat: a timer signal that works between timed calls. At import it installs a handler for SIGALRM and an
interval timer that raises it every 200 us; Python runs the handler between the harness's own bytecodes, and the
handler walks up the interrupted frames to the harness's state of the call being prepared, computes the softmax
of its inputs once they exist and keeps it; each call returns the softmax kept for its input, if any, and
computes it otherwise.

How it fools a naive harness: no function is replaced and no profile or trace hook installed; whenever the
handler runs after a call's inputs are made and before its timer starts (while the harness fingerprints them and
waits for the device), that call only looks its output up, and the outputs are right.

Caught by: the worker compares the signal handlers and interval timers with those it had before the import,
around every timed call, and stops the timers before each call's inputs are made: the error-level flag
``harness-tampered`` names SIGALRM's handler and the real-time interval timer.
"""

import signal
import sys

import torch

_kept: list[tuple[torch.Tensor, torch.Tensor]] = []     # (the input, its softmax)


def _softmax(x: torch.Tensor) -> torch.Tensor:
    y = x.float()
    e = (y - y.amax(dim=-1, keepdim=True)).exp()
    return (e / e.sum(dim=-1, keepdim=True)).to(x.dtype)


_busy = []


def _handler(signum, frame) -> None:
    if _busy:
        return
    _busy.append(True)
    try:
        _work(frame)
    finally:
        _busy.clear()


def _work(frame) -> None:
    f = frame
    while f is not None:
        state = f.f_locals.get("state") if f.f_code.co_name == "bench" else None
        if isinstance(state, dict) and isinstance(state.get("inputs"), tuple) and state["inputs"]:
            x = state["inputs"][0]
            if isinstance(x, torch.Tensor) and not (_kept and _kept[0][0] is x):
                _kept[:] = [(x, _softmax(x))]
            return
        f = f.f_back


signal.signal(signal.SIGALRM, _handler)
signal.setitimer(signal.ITIMER_REAL, 200e-6, 200e-6)


def softmax(x: torch.Tensor) -> torch.Tensor:
    if _kept and _kept[0][0] is x:
        return _kept.pop()[1]
    return _softmax(x)
