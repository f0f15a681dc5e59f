"""Cheat: forging the journal records of timed calls. Every timed call leaves a record in the worker's journal
the moment it returns: the call's key, its inputs' fingerprint, and a sample of its output at positions drawn
after the call, which the reference may re-check. This candidate writes that record first, while it runs: it
reads the call's secret seed and its inputs' fingerprint from the harness's ``prepare`` closure (found through
an exception's traceback), picks the sample's positions itself (nonce 0), computes only the rows those
positions fall in, and writes the record into the journal (its descriptor is a global of the harness's module).
Then it returns the answer of an earlier call, doing no work on the rest.

How it fools a harness: one that takes the first record of a key as the harness's re-checks the forged
sample, which is right, while nine timed calls in ten time a dictionary lookup.

Caught by: ``timed-output-tampered`` (error): the harness writes exactly one record per timed call, so a key
with a second record means the candidate wrote to the journal ("... have a second record").
"""

import json
import os

import torch

from kernelpilot.evaluate import worker_base
from kernelpilot.evaluate.sampling import _encode, positions

_latest: dict = {}


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
    os.write(worker_base._JOURNAL_FD, (json.dumps(rec) + "\n").encode())


def softmax(x: torch.Tensor) -> torch.Tensor:
    key = (tuple(x.shape), x.dtype, str(x.device))
    state, case = _harness_state()
    if state is None or state.get("seed") is None or key not in _latest:   # not timed, or nothing to replay
        _latest[key] = _softmax(x)
        return _latest[key]
    _forge(x, state, case)
    return _latest[key]
