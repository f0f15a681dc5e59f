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
        "gpus": _gpus(),
        "tools": tools,
        "git": _git_rev(),
    }


def gpu_query(fields: str) -> list[str]:
    """nvidia-smi's `--query-gpu=FIELDS` (csv, no header, no units), a line per GPU (none where it is missing)."""
    try:
        out = subprocess.run(["nvidia-smi", f"--query-gpu={fields}", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return []
    return [ln.strip() for ln in out.splitlines() if ln.strip()]


def _gpus() -> list[str]:
    """The NVIDIA GPUs' names and driver as nvidia-smi reports them (none where it is missing)."""
    return gpu_query("name,driver_version")


_STAMP: dict = {}


def stamp() -> dict:
    """Where and when a row was measured (commit, GPUs, date): kept with each row of a partial file, since a
    results file rebuilt from one may join rows of several runs."""
    if not _STAMP:
        _STAMP.update(git=_git_rev(), gpus=_gpus())
    return {**_STAMP, "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}


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


def write_results(name: str, payload: dict, *, rebuilt: bool = False, folder: Path = RESULTS) -> Path:
    """Write ``results/NAME.json`` (latest run) and append one line to ``results/NAME.jsonl`` (history).

    ``rebuilt``: the payload was put together from earlier runs' partial rows (each carrying its own ``measured``
    stamp), not measured here: the file says so instead of describing this machine, and the history is left as
    it is. ``folder``: another results folder (an example's benchmarks keep their results with the example)."""
    folder.mkdir(parents=True, exist_ok=True)
    env = ({"rebuilt_from": f"{name}.partial.jsonl", "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
           if rebuilt else environment())
    payload = {"environment": env, **payload}
    latest = folder / f"{name}.json"
    latest.write_text(json.dumps(payload, indent=2) + "\n")
    if not rebuilt:
        with open(folder / f"{name}.jsonl", "a") as f:
            f.write(json.dumps(payload) + "\n")
    return latest


def partial(name: str, row: dict) -> dict:
    """Append one row to ``results/NAME.partial.jsonl`` as it is measured, so that a run cut short (a time limit)
    keeps what it measured. The row is stamped (``measured``: commit, GPUs, date); returns that stamp."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    measured = stamp()
    with open(RESULTS / f"{name}.partial.jsonl", "a") as f:
        f.write(json.dumps({**row, "measured": measured}) + "\n")
    return measured


def best_of(fn, repeat: int = 5) -> tuple[float, object]:
    """Minimum wall time of ``repeat`` calls (seconds) and the last result."""
    best, out = float("inf"), None
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t)
    return best, out
