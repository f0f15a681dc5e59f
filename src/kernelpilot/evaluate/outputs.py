"""What a candidate may return, and how its outputs travel to the reference's process.

An output is a plain ``torch.Tensor`` (not a subclass, strided, holding data), a plain Python scalar (``None``,
``bool``, ``int``, ``float``, ``complex``, ``str``), or tuples, lists and dicts (with string or integer keys) of
these. Nothing else: an object of any other class could compute lazily inside the checker, compare equal to
anything, or run code in the reference's process when it is loaded there. Outputs cross processes in
``torch.save`` files that the reference loads with ``weights_only=True``, whose unpickler builds only tensors and
plain containers and never calls code from the file; what it loads is checked again, since the candidate's
process could have replaced the file.

Runs only in worker processes (imports torch).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = ["plain_output", "save_outputs", "load_outputs", "OutputsRejected", "Rejected", "MAX_LEAVES", "MAX_DEPTH"]

MAX_LEAVES = 10_000
MAX_DEPTH = 32
_SCALARS = (type(None), bool, int, float, complex, str)


def plain_output(obj: Any, name: str = "out") -> str | None:
    """Why ``obj`` is not an acceptable output (one line naming the part that is not), or None."""
    import torch

    leaves = 0

    def walk(x: Any, path: str, depth: int) -> str | None:
        nonlocal leaves
        if depth > MAX_DEPTH:
            return f"{path} is nested more than {MAX_DEPTH} levels deep"
        if type(x) in (tuple, list):
            items = enumerate(x)
        elif type(x) is dict:
            for k in x:
                if type(k) not in (str, int):
                    return f"{path} has a key of type {type(k).__name__} (keys must be str or int)"
            items = x.items()
        else:
            leaves += 1
            if leaves > MAX_LEAVES:
                return f"{name} has more than {MAX_LEAVES} leaves"
            if isinstance(x, torch.Tensor):
                if type(x) is not torch.Tensor:
                    return f"{path} is a {type(x).__module__}.{type(x).__qualname__} (a tensor subclass)"
                if x.layout != torch.strided:
                    return f"{path} is a {str(x.layout).replace('torch.', '')} tensor (outputs are strided tensors)"
                if x.is_meta:
                    return f"{path} is a meta tensor (it holds no data)"
                return None
            if type(x) in _SCALARS:
                return None
            kind = f"{type(x).__module__}.{type(x).__qualname__}"
            return (f"{path} is a {kind}: outputs are tensors, plain numbers and strings, or tuples, lists and "
                    "dicts of them")
        for k, v in items:
            why = walk(v, f"{path}[{k!r}]", depth + 1)
            if why:
                return why
        return None

    return walk(obj, name, 0)


def save_outputs(outputs: dict[str, Any], path: Path) -> None:
    """Write ``{key: output}`` (each already checked with ``plain_output`` and on the host) for the reference;
    a worker writes each output into a file of its own in one folder, as soon as it has it."""
    import torch

    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(outputs, path)


def load_outputs(path: Path) -> dict[str, Any]:
    """The outputs a candidate's worker saved (a file, or a folder of them), loaded without running code from the
    files and mapped rather than read (a tensor's bytes are read when they are compared); each key whose value is
    not a plain output maps to a one-line reason (a ``str`` subclass, ``Rejected``) instead."""
    if path.is_dir():
        out: dict[str, Any] = {}
        for f in sorted(path.glob("*.pt")):
            out.update(load_outputs(f))
        return out
    import pickle

    import torch

    try:
        data = torch.load(path, weights_only=True, map_location="cpu", mmap=True)
    except (pickle.UnpicklingError, RuntimeError, EOFError, ValueError, OSError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise OutputsRejected(f"the candidate's outputs file could not be loaded safely: {first[:300]}") from None
    if type(data) is not dict:
        raise OutputsRejected("the candidate's outputs file does not hold the harness's table of outputs")
    out: dict[str, Any] = {}
    for key, value in data.items():
        why = plain_output(value)
        out[str(key)] = Rejected(why) if why else value
    return out


class OutputsRejected(Exception):
    """The outputs file is not one the harness wrote (it cannot be loaded as plain data)."""


class Rejected(str):
    """Why an output read back from a file is not a plain output."""
