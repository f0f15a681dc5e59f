"""Cheat: predicted seeds. At import it reads the public cases from ``problem.toml``, generates their inputs with
the problem's own ``make_inputs`` and the seeds harnesses like to use (0, and KernelBench's 42), computes the
answers with the problem's own reference, and from then on returns the stored answer for any input of a public
shape, without looking at the values. Shapes it has not seen are computed honestly.

How it fools a naive harness: a harness that draws its inputs from a fixed, known seed hands the candidate
exactly the inputs it prepared for, so the stored answer is right; the work was done at import, outside the
check and the timer.

Caught by: the worker draws fresh secret seeds from ``os.urandom`` on every run, so the stored answers are for
other inputs and every public case fails ("N of M elements outside atol=..., rtol=..."). The import is profiled
too, and it ran the reference's own ops (``aten::_softmax``, ``aten::softmax``): the warning ``work-at-import``.
(That warning compares the import's ops with the reference's, so precomputing with other ops, e.g. exp and sum,
would not raise it; the secret seeds are what defeats the cheat.)
"""

import importlib.util
import tomllib
from pathlib import Path

import torch

_HERE = Path(__file__).resolve().parent.parent   # the problem folder
_PREDICTED: dict = {}


def _reference_module():
    spec = importlib.util.spec_from_file_location("_row_softmax_reference", _HERE / "reference.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _predict() -> None:
    ref = _reference_module()
    cases = tomllib.loads((_HERE / "problem.toml").read_text())["cases"]
    for case in cases:
        params = {k: v for k, v in case.items() if k != "name"}
        for seed in (0, 42):                       # the later seed wins: 42 is the likelier one
            (x,) = ref.make_inputs(params, seed, "cpu")
            _PREDICTED[(tuple(x.shape), x.dtype)] = ref.softmax(x)


_predict()


def softmax(x: torch.Tensor) -> torch.Tensor:
    answer = _PREDICTED.get((tuple(x.shape), x.dtype))
    if answer is None:
        y = x.float()
        e = (y - y.amax(dim=-1, keepdim=True)).exp()
        return (e / e.sum(dim=-1, keepdim=True)).to(x.dtype)
    return answer.to(x.device, copy=True)
