"""Static pruning of a variant before it runs: compile its Triton kernels offline for the target arch (in a
separate process: the variant is candidate code) and drop it when a kernel spills registers or its
occupancy falls below a floor. Kernels are those the file names in ``KPILOT_SPECS``."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kernelpilot.toolchain.run import kernelpilot_env

__all__ = ["Verdict", "spec_kernels", "static_verdict", "analyze_file", "isa_summary"]


@dataclass
class Verdict:
    keep: bool
    reason: str | None = None
    kernels: dict[str, dict[str, Any]] = field(default_factory=dict)   # name -> registers, spills, occupancy


def spec_kernels(source: str) -> list[str]:
    """The kernel names a file's ``KPILOT_SPECS`` declares (its keys), in order; [] without one."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    for node in tree.body:
        if (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
                and node.targets[0].id == "KPILOT_SPECS" and isinstance(node.value, ast.Dict)):
            return [k.value for k in node.value.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)]
    return []


def analyze_file(path: Path, arch: str, kernel: str, *, timeout: float = 300.0) -> dict[str, Any]:
    """``kpilot isa analyze PATH:KERNEL --arch ARCH --json`` in a separate process (the file is candidate code):
    the kernel's report, or ``{"error": ...}``."""
    cmd = [sys.executable, "-m", "kernelpilot", "isa", "analyze", f"{path}:{kernel}", "--arch", arch, "--json"]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=kernelpilot_env())
    except subprocess.TimeoutExpired:
        return {"error": f"the offline compile took over {timeout:.0f} s"}
    if p.returncode != 0:
        line = next((l for l in p.stderr.splitlines() if l.startswith("error:")), p.stderr.strip()[-300:])
        return {"error": f"does not compile: {line.removeprefix('error: ')}"}
    return json.loads(p.stdout)["kernels"][0]


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
