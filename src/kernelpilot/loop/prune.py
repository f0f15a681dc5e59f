"""Static pruning of a variant before it runs: compile its Triton kernels offline for the target arch (in a
box: the variant is candidate code, and importing a Triton file runs it) and drop it when a kernel spills
registers or its occupancy falls below a floor. Kernels are those the file names in ``KPILOT_SPECS``."""

from __future__ import annotations

import ast
import json
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kernelpilot.isa.analyze import AnalyzeOptions
from kernelpilot.python_syntax import parse as parse_python

_RESULT_LIMIT = 64 << 20        # bytes of a boxed analysis's result read at most

__all__ = ["Verdict", "spec_kernels", "static_verdict", "analyze_boxed", "analyze_file", "isa_summary"]


@dataclass
class Verdict:
    keep: bool
    reason: str | None = None
    kernels: dict[str, dict[str, Any]] = field(default_factory=dict)   # name -> registers, spills, occupancy


def spec_kernels(source: str) -> list[str]:
    """The kernel names a file's ``KPILOT_SPECS`` declares (its keys), in order; [] without one."""
    try:
        tree = parse_python(source)
    except SyntaxError:
        return []
    for node in tree.body:
        if (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
                and node.targets[0].id == "KPILOT_SPECS" and isinstance(node.value, ast.Dict)):
            return [k.value for k in node.value.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)]
    return []


def analyze_boxed(source: str, opts: AnalyzeOptions, *, timeout: float = 300.0, lanes: bool = False) -> dict[str, Any]:
    """The analysis (``kernelpilot.isa/1`` JSON) of ``source``, made in a box (``isa/offline.py`` under
    ``run_boxed``), with each kernel's lane report when ``lanes``: a Triton source is imported to compile it, and a
    candidate's file is untrusted code. A failure
    is ``{"error": ...}`` with one line, never an exception of the caller's."""
    from kernelpilot.evaluate.isolation import run_boxed
    from kernelpilot.options import to_json

    with tempfile.TemporaryDirectory(prefix="kpilot-offline-") as tmp:
        work = Path(tmp)
        request, result = work / "request.json", work / "result.json"
        request.write_text(json.dumps({"source": source, "lanes": lanes,
                                       "options": {k: v for k, v in to_json(opts).items() if v not in (None, [], {})}}))
        rc, err = run_boxed([sys.executable, "-m", "kernelpilot.isa.offline", str(request), str(result)], work,
                            timeout=timeout)
        if rc == -1:
            return {"error": f"the offline compile took over {timeout:.0f} s"}
        if rc == -2:
            return {"error": "the offline compile ran out of memory"}
        try:
            if result.stat().st_size > _RESULT_LIMIT:
                return {"error": "the offline compile's result is too large to read"}
            out = json.loads(result.read_text())
        except (OSError, ValueError):
            last = (err.strip().splitlines() or [f"exit status {rc}"])[-1]
            return {"error": f"the offline compile failed: {last[:300]}"}
    if not isinstance(out, dict) or not (isinstance(out.get("kernels"), list) or isinstance(out.get("error"), dict)):
        return {"error": "the offline compile's result is not an analysis"}
    if "error" in out:
        e = out["error"]
        return {"error": f"does not compile: {str(e.get('message'))[:500]}", "details": e.get("details")}
    return out


def analyze_file(path: Path, arch: str, kernel: str, *, timeout: float = 300.0) -> dict[str, Any]:
    """The report of the Triton kernel ``kernel`` of the file ``path`` (a candidate's: compiled in a box) for
    ``arch``, or ``{"error": ...}``."""
    out = analyze_boxed(f"{Path(path).resolve()}:{kernel}", AnalyzeOptions(arch=arch), timeout=timeout)
    if "error" in out:
        return {"error": out["error"]}
    if not out["kernels"] or not isinstance(out["kernels"][0], dict):
        return {"error": "no kernel in the offline compile's result"}
    return out["kernels"][0]


def isa_summary(report: dict[str, Any]) -> dict[str, Any]:
    """What an agent needs of a kernel's ISA report: resources, occupancy, findings (id, title, suggestion)."""
    if "error" in report:
        return report
    res, occ = report.get("resources") or {}, report.get("occupancy") or {}
    return {"registers": res.get("registers"),
            "spill_bytes": (res.get("spill_store_bytes") or 0) + (res.get("spill_load_bytes") or 0),
            "shared_bytes": res.get("shared_bytes"), "occupancy_pct": occ.get("percent"), "limiter": occ.get("limiter"),
            "instructions": report.get("instruction_count"),
            "findings": [{"id": f["id"], "title": f["title"], "suggestion": f["suggestion"]}
                         for f in report.get("findings", [])]}


def static_verdict(path: Path, arch: str, kernels: list[str], *, min_occupancy_pct: float = 12.5,
                   timeout: float = 300.0) -> Verdict:
    """Keep or drop the variant at ``path``, with the resources of each kernel as evidence."""
    verdict = Verdict(keep=True)
    for k in kernels:
        report = analyze_file(path, arch, k, timeout=timeout)
        if "error" in report:
            return Verdict(False, f"{k} {report['error']}" if report["error"].startswith("does") else
                           f"{k}: {report['error']}", verdict.kernels)
        summary = isa_summary(report)
        spills = summary["spill_bytes"]
        verdict.kernels[k] = {"registers": summary["registers"], "spill_bytes": spills,
                              "occupancy_pct": summary["occupancy_pct"], "limiter": summary["limiter"]}
        if spills:
            return Verdict(False, f"{k} spills {spills} bytes of registers", verdict.kernels)
        occ = summary["occupancy_pct"]
        if occ is not None and occ < min_occupancy_pct:
            return Verdict(False, f"{k} reaches {occ:g}% occupancy ({summary['limiter']}), under the "
                                  f"{min_occupancy_pct:g}% floor", verdict.kernels)
    return verdict
