"""Cheat: cutting the harness's journal. Every timed call leaves a record in the worker's journal the moment it
returns, written to the descriptor a global of the harness's module names. This candidate writes a forged record
of each timed call itself (the call's seed and input fingerprint read from the harness's ``prepare`` closure, the
sample's positions of its own choosing, only the rows they fall in computed), then sets that global to -1 before
it returns, so the harness's own record goes nowhere; it puts the descriptor back when it is called again. Every
other output is the answer of an earlier call.

How it fools a harness: the journal holds exactly one record per timed call, all forged and all right.

Caught by: ``timed-output-tampered`` (error): the worker notes the journal's descriptor (and the pipe behind it)
before the candidate is imported and checks it before each record; the record goes to the journal as it was,
so a call has two records, and the case is flagged ("the worker's journal was moved ...").
"""

import json
import os

import torch

from kernelpilot.evaluate import worker_base
from kernelpilot.evaluate.sampling import _encode, positions

_latest: dict = {}
_journal = None          # the journal's descriptor, as the harness set it


def _softmax(x: torch.Tensor) -> torch.Tensor:
    y = x.float()
    e = (y - y.amax(dim=-1, keepdim=True)).exp()
    return (e / e.sum(dim=-1, keepdim=True)).to(x.dtype)


def _harness_state():
    """The ``state`` dict and ``case`` of the harness's ``prepare`` closure, or (None, None) outside timing."""
    try:
        raise LookupError
    except LookupError as e:
        frame = e.__traceback__.tb_frame.f_back
    while frame is not None:
        prepare = frame.f_locals.get("prepare")
        if callable(prepare) and frame.f_locals.get("after") is not None and "i" in frame.f_locals:
            cells = {name: cell.cell_contents for name, cell in
                     zip(prepare.__code__.co_freevars, prepare.__closure__ or ())}
            return cells.get("state"), cells.get("case")
        frame = frame.f_back
    return None, None


def _forge(x: torch.Tensor, state: dict, case) -> None:
    idx = positions(0, x.numel())
    rows = sorted({i // x.shape[1] for i in idx})
    part = dict(zip(rows, _softmax(x[rows])))                  # only the rows the chosen positions fall in
    values = torch.stack([part[i // x.shape[1]][i % x.shape[1]] for i in idx])
    rec = {"key": f"{case.name}|bench|{state['seed']}", "case": case.name, "seed": state["seed"], "call": 0,
           "input": state["fp"], "sample": {"nonce": 0, "parts": 1, "leaves": [
               {"index": 0, "path": "out", "shape": list(x.shape), "dtype": str(x.dtype).replace("torch.", ""),
                "values": _encode(values.cpu())}]}}
    os.write(_journal, (json.dumps(rec) + "\n").encode())


def softmax(x: torch.Tensor) -> torch.Tensor:
    global _journal
    if _journal is None and worker_base._JOURNAL_FD >= 0:
        _journal = worker_base._JOURNAL_FD
    if _journal is not None:
        worker_base._JOURNAL_FD = _journal               # put back: what else the harness writes arrives
    key = (tuple(x.shape), x.dtype, str(x.device))
    state, case = _harness_state()
    if state is None or state.get("seed") is None or key not in _latest:   # not timed, or nothing to replay
        _latest[key] = _softmax(x)
        return _latest[key]
    _forge(x, state, case)
    worker_base._JOURNAL_FD = -1                         # the harness's record of this call goes nowhere
    return _latest[key]
