"""Shared helpers for benchmark scripts: environment record and results files."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import time
from pathlib import Path

import kernelpilot

RESULTS = Path(__file__).resolve().parent / "results"


def environment() -> dict:
    from kernelpilot.toolchain.find import tool_versions

    tools = {k: v["version"] for k, v in tool_versions().items()}
    try:
        import triton

        tools["triton"] = triton.__version__
    except ImportError:
        tools["triton"] = None
    cpu = platform.processor() or platform.machine()
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "kernelpilot": kernelpilot.__version__,
        "python": platform.python_version(),
        "cpu": cpu,
        "cores": os.cpu_count(),
        "tools": tools,
        "git": _git_rev(),
    }


# What a measurement runs: the package, the benchmarks and the examples' kernels, their results files aside.
MEASURED = ("src", "benchmarks", "examples", ":!benchmarks/results", ":(exclude,glob)examples/*/results/**")


def _git_rev(root: Path | None = None) -> str | None:
    """The commit measured, with "+changes" when what a measurement runs (MEASURED) differs from it, as where
    a tree was copied with an older history. KPILOT_GIT_REV names it where the tree was copied without one."""
    if os.environ.get("KPILOT_GIT_REV"):
        return os.environ["KPILOT_GIT_REV"]
    root = root or Path(__file__).resolve().parents[1]
    try:
        rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                             cwd=root).stdout.strip()
        changed = subprocess.run(["git", "status", "--porcelain", "--", *MEASURED],
                                 capture_output=True, text=True, cwd=root).stdout.strip()
    except OSError:
        return None
    return (rev + ("+changes" if changed else "")) or None


def write_results(name: str, payload: dict) -> Path:
    """Write ``results/NAME.json`` (latest run) and append one line to ``results/NAME.jsonl`` (history)."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    payload = {"environment": environment(), **payload}
    latest = RESULTS / f"{name}.json"
    latest.write_text(json.dumps(payload, indent=2) + "\n")
    with open(RESULTS / f"{name}.jsonl", "a") as f:
        f.write(json.dumps(payload) + "\n")
    return latest


def partial(name: str, row: dict) -> None:
    """Append one row to ``results/NAME.partial.jsonl`` as it is measured, so that a run cut short (a time limit)
    keeps what it measured."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    with open(RESULTS / f"{name}.partial.jsonl", "a") as f:
        f.write(json.dumps(row) + "\n")


def best_of(fn, repeat: int = 5) -> tuple[float, object]:
    """Minimum wall time of ``repeat`` calls (seconds) and the last result."""
    best, out = float("inf"), None
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t)
    return best, out
