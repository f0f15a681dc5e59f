"""Samples of timed outputs: a few elements of every timed call's output, taken at positions drawn after the call
returned and written to the journal at once, so that any timed call can be re-checked later by the reference.

Why samples: the reference can afford to re-check a few timed calls, not all of them, and which ones must not be
decided (or be readable) inside the candidate's process, or a candidate that is honest only now and then could
pass when it happens to be honest on every call that is kept. So every timed call leaves a sample, out of the
process before the candidate runs again, and the parent picks the calls to re-check once timing is over.

A sample is elements of up to ``PARTS`` of the output's tensors at positions derived from a 64-bit nonce drawn
after the call (the candidate cannot know them while it runs), with each tensor's shape and dtype. The reference
compares the same elements of its own output with the problem's element-wise tolerance
(``compare.compare_elements``): a necessary condition of the full comparison, so an honest output never fails it.

Runs only in worker processes (imports torch).
"""

from __future__ import annotations

import base64
from typing import Any

from kernelpilot.evaluate.compare import Comparison, compare_elements, flatten, unravel

__all__ = ["PER_TENSOR", "PARTS", "positions", "take_sample", "check_sample"]

# Elements sampled per output tensor (all of a smaller one). A stale output differs from the right one almost
# everywhere, so a few dozen elements tell them apart unless the outputs are nearly constant.
PER_TENSOR = 32
# Parts (leaves) of an output sampled per call, chosen by the nonce too (all of an output with fewer): a record
# stays about a kilobyte whatever the output holds, so thousands of timed calls fit the journal.
PARTS = 4
_MASK = (1 << 64) - 1
_LEAF_SALT = 0xD1B54A32D192ED03


def positions(nonce: int, numel: int, count: int = PER_TENSOR) -> list[int]:
    """``count`` flat indices below ``numel`` (every index when ``numel <= count``) from ``nonce`` (splitmix64:
    the same indices in the candidate's process and the reference's, whatever their library versions)."""
    if numel <= count:
        return list(range(numel))
    out = []
    x = nonce & _MASK
    for _ in range(count):
        x = (x + 0x9E3779B97F4A7C15) & _MASK
        z = x
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK
        out.append((z ^ (z >> 31)) % numel)
    return out


def _gather(t, idx: list[int]):
    """The elements of ``t`` at flat indices ``idx`` (row-major, as ``t.reshape(-1)`` numbers them), as a 1-D
    tensor on the host, without copying ``t`` whatever its strides."""
    import torch

    if not idx:
        return torch.empty(0, dtype=t.dtype)
    if t.dim() == 0:
        return t.detach().reshape(1).cpu()
    dims = zip(*(unravel(i, t.shape) for i in idx))          # one list of positions per dimension
    index = tuple(torch.tensor(d, dtype=torch.long, device=t.device) for d in dims)
    return t.detach()[index].cpu()


def _bits(dtype):
    """The integer type of ``dtype``'s width: bfloat16, bool and the float8 types have no numpy dtype, so every
    sample's bytes travel as integers of the same width."""
    import torch

    return {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[dtype.itemsize]


def _encode(values) -> str:
    return base64.b64encode(values.contiguous().view(_bits(values.dtype)).numpy().tobytes()).decode()


def _decode(text: str, dtype, count: int):
    import torch

    raw = bytearray(base64.b64decode(text.encode(), validate=True))
    if len(raw) != count * dtype.itemsize:
        raise ValueError(f"{len(raw)} bytes for {count} elements of {dtype}")
    return torch.frombuffer(raw, dtype=_bits(dtype)).view(dtype) if count else torch.empty(0, dtype=dtype)


def _parts(nonce: int, count: int) -> list[int]:
    """The output's parts (indices into ``flatten``) a sample holds: all of them up to ``PARTS``, else ``PARTS``
    drawn from the nonce (fewer where two draws meet)."""
    return sorted(set(positions(nonce ^ _LEAF_SALT, count, PARTS)))


def take_sample(out: Any, nonce: int) -> dict[str, Any]:
    """The sample of an output (a tensor, or a nested tuple/list/dict of tensors and plain values): how many parts
    it has, and for each part ``_parts`` chooses its index and path, and for a tensor its shape, dtype and the
    elements at ``positions`` (base64 of their bytes), for a plain value the value (or its repr). JSON-ready."""
    import torch

    flat = flatten(out)
    leaves = []
    for i in _parts(nonce, len(flat)):
        path, x = flat[i]
        if isinstance(x, torch.Tensor):
            shape, dtype = list(x.shape), str(x.dtype).replace("torch.", "")
            x = torch.view_as_real(x) if x.is_complex() else x      # complex elements sampled as (real, imag)
            leaves.append({"index": i, "path": path, "shape": shape, "dtype": dtype,
                           "values": _encode(_gather(x, positions(nonce + i, x.numel())))})
        elif x is None or type(x) in (bool, int, float):
            leaves.append({"index": i, "path": path, "value": x})
        else:
            leaves.append({"index": i, "path": path, "repr": repr(x)})
    return {"nonce": nonce, "parts": len(flat), "leaves": leaves}


def check_sample(sample: Any, expected: Any, tol_for) -> Comparison:
    """Compare a sample of a candidate's output with the reference's output ``expected``: the same structure,
    shapes and dtypes, and the sampled elements within the tolerance ``tol_for(dtype)`` (exact for integers
    and booleans). A malformed sample fails with the reason."""
    import torch

    try:
        nonce = int(sample["nonce"])
        parts = int(sample["parts"])
        leaves = list(sample["leaves"])
    except (TypeError, KeyError, ValueError):
        return Comparison(False, "the sample of the timed output is malformed")
    flat = flatten(expected)
    if parts != len(flat):
        return Comparison(False, f"the timed output has {parts} parts, the reference's {len(flat)}")
    chosen = _parts(nonce, len(flat))      # from the nonce, not from the record: a record cannot pick easy parts
    if [leaf.get("index") if isinstance(leaf, dict) else None for leaf in leaves] != chosen:
        return Comparison(False, "the sample of the timed output is malformed (not the parts its nonce picks)")
    results = []
    for leaf, i in zip(leaves, chosen):
        path, e = flat[i]
        if leaf.get("path") != path:
            return Comparison(False, f"the timed output's parts differ from the reference's at {path}")
        if not isinstance(e, torch.Tensor):
            results.append(_compare_plain(path, leaf, e, tol_for))
            continue
        dtype = str(e.dtype).replace("torch.", "")
        if leaf.get("dtype") != dtype:
            results.append(Comparison(False, f"{path}: dtype {leaf.get('dtype')}, expected {dtype}"))
            continue
        if leaf.get("shape") != list(e.shape):
            results.append(Comparison(False, f"{path}: shape {tuple(leaf.get('shape') or ())}, expected "
                                             f"{tuple(e.shape)}"))
            continue
        ev = torch.view_as_real(e) if e.is_complex() else e
        idx = positions(nonce + i, ev.numel())
        try:
            got = _decode(str(leaf.get("values", "")), ev.dtype, len(idx))
        except (ValueError, KeyError):
            return Comparison(False, f"{path}: the sample of the timed output is malformed")
        results.append(compare_elements(path, got, _gather(ev, idx), idx, tuple(ev.shape),
                                        tol_for(str(e.dtype))))
    bad = [r for r in results if not r.ok]
    return Comparison(not bad, "; ".join(r.message for r in bad),
                      max_abs_err=max((r.max_abs_err for r in results if r.max_abs_err is not None), default=None),
                      mismatched=sum(r.mismatched for r in results), total=sum(r.total for r in results),
                      worst=[w for r in results for w in r.worst][:5])


def _compare_plain(path: str, leaf: dict[str, Any], e: Any, tol_for) -> Comparison:
    """A plain value of the output, as ``compare_outputs`` compares it: a float within the float64 tolerance,
    anything else equal."""
    if "value" not in leaf:
        got = leaf.get("repr")
        ok = got == repr(e)
        return Comparison(ok, "" if ok else f"{path}: {got}, expected {e!r}")
    g = leaf["value"]
    if isinstance(e, float) and isinstance(g, (int, float)):
        tol = tol_for("float64")
        ok = abs(g - e) <= tol.atol + tol.rtol * abs(e)
        return Comparison(ok, "" if ok else f"{path}: {g!r}, expected {e!r}", max_abs_err=abs(g - e))
    ok = bool(g == e)
    return Comparison(ok, "" if ok else f"{path}: {g!r}, expected {e!r}")
