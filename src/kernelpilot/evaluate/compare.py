"""Compare a candidate's output with the reference's: structure, shape, dtype and values.

A tensor passes when every element satisfies |got - expected| <= atol + rtol * |expected| (NaN only where
the reference has NaN too), AND the relative norm error ||got - expected|| / ||expected|| is at most
``REL_NORM_FACTOR * max(atol, rtol)``. The second test catches outputs that hide inside an absolute
tolerance (all zeros where the true values are tiny). Integer and boolean outputs must match exactly.
Runs only in worker processes (imports torch).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Callable

from kernelpilot.evaluate.problem import Tolerance

__all__ = ["Comparison", "compare_outputs", "compare_elements", "flatten", "unravel", "REL_NORM_FACTOR"]

REL_NORM_FACTOR = 10.0
_WORST = 5


@dataclass
class Comparison:
    ok: bool
    message: str = ""
    max_abs_err: float | None = None
    rel_err: float | None = None
    mismatched: int = 0                 # elements outside tolerance
    total: int = 0
    worst: list[dict[str, Any]] = field(default_factory=list)   # index, got, expected

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def flatten(obj: Any, prefix: str = "out") -> list[tuple[str, Any]]:
    """(path, leaf) pairs of a nested tuple/list/dict output, in a stable order."""
    if isinstance(obj, (tuple, list)):
        out = []
        for i, x in enumerate(obj):
            out.extend(flatten(x, f"{prefix}[{i}]"))
        return out
    if isinstance(obj, dict):
        out = []
        for k in sorted(obj, key=str):
            out.extend(flatten(obj[k], f"{prefix}[{k!r}]"))
        return out
    return [(prefix, obj)]


def _structure(obj: Any) -> Any:
    if isinstance(obj, (tuple, list)):
        return [_structure(x) for x in obj]
    if isinstance(obj, dict):
        return {k: _structure(v) for k, v in sorted(obj.items(), key=lambda kv: str(kv[0]))}
    return type(obj).__name__ if not _is_tensor(obj) else "Tensor"


def _is_tensor(x: Any) -> bool:
    import torch

    return isinstance(x, torch.Tensor)


def _compare_tensor(name: str, got, exp, tol_for: Callable[[str], Tolerance]) -> Comparison:
    import torch

    if type(got) is not torch.Tensor:
        return Comparison(False, f"{name}: a {type(got).__module__}.{type(got).__name__}, not a plain torch.Tensor "
                                 "(tensor subclasses are not accepted: they can compute lazily inside the checker)")
    if tuple(got.shape) != tuple(exp.shape):
        return Comparison(False, f"{name}: shape {tuple(got.shape)}, expected {tuple(exp.shape)}")
    if got.dtype != exp.dtype:
        return Comparison(False, f"{name}: dtype {str(got.dtype).replace('torch.', '')}, expected "
                                 f"{str(exp.dtype).replace('torch.', '')}")
    if not (exp.is_floating_point() or exp.is_complex()):
        return _compare_exact(name, got, exp)
    return _compare_close(name, got, exp, tol_for(str(exp.dtype)))


# Elements compared at a time: bounds the float64 temporaries to a few hundred MB, so outputs of many GB compare
# on the GPU or the host without running out of memory.
_CHUNK = 1 << 25


def _chunks(got, exp):
    """Matching flat pieces of ``got`` and ``exp``, each ``got`` piece moved to ``exp``'s device."""
    g = got.detach().reshape(-1)
    e = exp.detach().reshape(-1)
    for start in range(0, e.numel(), _CHUNK):
        yield start, g[start:start + _CHUNK].to(e.device), e[start:start + _CHUNK]


def unravel(flat: int, shape) -> list[int]:
    """The position in a tensor of ``shape`` of its element ``flat`` (row-major, as ``reshape(-1)`` numbers them)."""
    idx = []
    for size in reversed(shape):
        idx.append(flat % size)
        flat //= size
    return list(reversed(idx))


def _compare_exact(name: str, got, exp) -> Comparison:
    import torch

    n = exp.numel()
    bad, max_abs, worst = 0, 0.0, []
    for start, g, e in _chunks(got, exp):
        diff = g != e
        k = int(diff.sum())
        if k and len(worst) < _WORST:
            for flat in diff.nonzero().flatten()[:_WORST - len(worst)].tolist():
                worst.append({"index": unravel(start + flat, exp.shape), "got": g[flat].item(),
                              "expected": e[flat].item()})
        bad += k
        if g.numel():
            max_abs = max(max_abs, float((g.to(torch.float64) - e.to(torch.float64)).abs().max()))
    return Comparison(bad == 0, "" if bad == 0 else f"{name}: {bad} of {n} elements differ (exact match required)",
                      max_abs_err=max_abs, rel_err=None, mismatched=bad, total=n, worst=worst)


def _compare_close(name: str, got, exp, tol: Tolerance, *, norm: bool = True) -> Comparison:
    import torch

    n = exp.numel()
    bad = nan_bad = 0
    max_abs = 0.0
    ref_sq = err_sq = 0.0
    candidates: list[tuple[float, int, float, float]] = []    # (excess, flat index, got, expected)
    for start, g, e in _chunks(got, exp):
        g64, e64 = g.to(torch.float64), e.to(torch.float64)
        gnan, enan = torch.isnan(g64), torch.isnan(e64)
        diff = (g64 - e64).abs()
        diff = torch.where(gnan & enan, torch.zeros_like(diff), diff)
        allowed = tol.atol + tol.rtol * e64.abs()
        bad_mask = (diff > allowed) | (gnan & ~enan) | (torch.isinf(g64) & (g64 != e64))
        k = int(bad_mask.sum())
        bad += k
        nan_bad += int((gnan & ~enan).sum())
        finite = ~(gnan | enan)
        if bool(finite.any()):
            max_abs = max(max_abs, float(diff[finite].max()))
        zero = torch.zeros_like(e64)
        ref_sq += float(torch.where(finite, e64, zero).square().sum())
        err_sq += float(torch.where(finite, g64 - e64, zero).square().sum())
        if k:
            excess = torch.where(bad_mask, (diff - allowed).nan_to_num(float("inf")), torch.full_like(diff, -1.0))
            top = torch.topk(excess, min(_WORST, k))
            for val, flat in zip(top.values.tolist(), top.indices.tolist()):
                candidates.append((val, start + flat, float(g64[flat]), float(e64[flat])))
        del g64, e64, gnan, enan, diff, allowed, bad_mask, finite, zero
    ref_norm, err_norm = ref_sq ** 0.5, err_sq ** 0.5
    rel = err_norm / ref_norm if ref_norm > 0 else (0.0 if err_norm == 0 else float("inf"))
    rel_bound = REL_NORM_FACTOR * max(tol.atol, tol.rtol)
    candidates.sort(key=lambda c: (-c[0], c[1]))
    worst = [{"index": unravel(flat, exp.shape), "got": g, "expected": e} for _, flat, g, e in candidates[:_WORST]]
    msgs = []
    if bad:
        msgs.append(f"{name}: {bad} of {n} elements outside atol={tol.atol:g}, rtol={tol.rtol:g}"
                    + (f" ({nan_bad} NaN)" if nan_bad else "") + f"; max abs error {max_abs:.3g}")
    if norm and rel > rel_bound:
        msgs.append(f"{name}: relative norm error {rel:.3g} above {rel_bound:.3g}")
    return Comparison(not msgs, "; ".join(msgs), max_abs_err=max_abs, rel_err=rel, mismatched=bad, total=n,
                      worst=worst)


def compare_elements(name: str, got, exp, flat_index: list[int], shape: tuple[int, ...], tol: Tolerance) -> Comparison:
    """Compare elements taken from an output (1-D ``got`` and ``exp``, the elements at ``flat_index`` of a tensor
    of ``shape``): the element-wise test of ``compare_outputs`` only, since a norm over a few elements says
    nothing of the whole. Every element a full comparison passes passes here too."""
    if exp.is_floating_point():
        cmp = _compare_close(name, got, exp, tol, norm=False)
        cmp.rel_err = None
    else:
        cmp = _compare_exact(name, got, exp)
    cmp.message = cmp.message.replace(" elements ", " sampled elements ", 1)
    for w in cmp.worst:
        w["index"] = unravel(flat_index[w["index"][0]], shape)
    return cmp


def compare_outputs(got: Any, expected: Any, tol_for: Callable[[str], Tolerance]) -> Comparison:
    """Compare nested outputs leaf by leaf; the result aggregates the worst leaf."""
    if _structure(got) != _structure(expected):
        return Comparison(False, f"output structure {_summary(got)}, expected {_summary(expected)}")
    results = []
    for (name, g), (_, e) in zip(flatten(got), flatten(expected)):
        if _is_tensor(e):
            results.append(_compare_tensor(name, g, e, tol_for))
        elif isinstance(e, float) and isinstance(g, (int, float)):
            tol = tol_for("float64")
            ok = abs(g - e) <= tol.atol + tol.rtol * abs(e)
            results.append(Comparison(ok, "" if ok else f"{name}: {g!r}, expected {e!r}", max_abs_err=abs(g - e)))
        else:
            ok = g == e
            results.append(Comparison(bool(ok), "" if ok else f"{name}: {g!r}, expected {e!r}"))
    ok = all(r.ok for r in results)
    errs = [r.max_abs_err for r in results if r.max_abs_err is not None]
    rels = [r.rel_err for r in results if r.rel_err is not None]
    return Comparison(
        ok=ok,
        message="; ".join(r.message for r in results if r.message),
        max_abs_err=max(errs) if errs else None,
        rel_err=max(rels) if rels else None,
        mismatched=sum(r.mismatched for r in results),
        total=sum(r.total for r in results),
        worst=[w for r in results for w in r.worst][:_WORST],
    )


def _summary(obj: Any) -> str:
    if _is_tensor(obj):
        return f"Tensor{tuple(obj.shape)}"
    if isinstance(obj, (tuple, list)):
        inner = ", ".join(_summary(x) for x in obj[:4]) + (", ..." if len(obj) > 4 else "")
        return f"{type(obj).__name__}({inner})"
    if isinstance(obj, dict):
        return "dict(" + ", ".join(map(str, list(obj)[:4])) + ")"
    return type(obj).__name__
