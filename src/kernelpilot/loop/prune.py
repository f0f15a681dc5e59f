"""Static pruning of a variant before it runs: compile its Triton kernels offline for the target arch (in a
separate process: the variant is candidate code) and drop it when a kernel spills registers or its
occupancy falls below a floor. Kernels are those the file names in ``KPILOT_SPECS``."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["Verdict", "spec_kernels", "static_verdict"]


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


def static_verdict(path: Path, arch: str, kernels: list[str], *, min_occupancy_pct: float = 12.5,
                   timeout: float = 300.0) -> Verdict:
    """Keep or drop the variant at ``path``, with the resources of each kernel as evidence."""
    verdict = Verdict(keep=True)
    src = str(Path(__file__).resolve().parents[2])
    env = {**os.environ, "PYTHONPATH": src + (os.pathsep + os.environ["PYTHONPATH"] if os.environ.get("PYTHONPATH") else "")}
    for k in kernels:
        cmd = [sys.executable, "-m", "kernelpilot", "isa", "analyze", f"{path}:{k}", "--arch", arch, "--json"]
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
        except subprocess.TimeoutExpired:
            return Verdict(False, f"{k}: the offline compile took over {timeout:.0f} s", verdict.kernels)
        if p.returncode != 0:
            line = next((l for l in p.stderr.splitlines() if l.startswith("error:")), p.stderr.strip()[-300:])
            return Verdict(False, f"{k} does not compile: {line.removeprefix('error: ')}", verdict.kernels)
        report = json.loads(p.stdout)["kernels"][0]
        res, occ = report.get("resources") or {}, report.get("occupancy") or {}
        spills = (res.get("spill_store_bytes") or 0) + (res.get("spill_load_bytes") or 0)
        verdict.kernels[k] = {"registers": res.get("registers"), "spill_bytes": spills,
                              "occupancy_pct": occ.get("percent"), "limiter": occ.get("limiter")}
        if spills:
            return Verdict(False, f"{k} spills {spills} bytes of registers", verdict.kernels)
        if occ.get("percent") is not None and occ["percent"] < min_occupancy_pct:
            return Verdict(False, f"{k} reaches {occ['percent']:g}% occupancy ({occ.get('limiter')}), under the "
                                  f"{min_occupancy_pct:g}% floor", verdict.kernels)
    return verdict
