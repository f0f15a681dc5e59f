"""Kernel times without hardware counters: a Python program run under the PyTorch profiler (CUPTI activity
tracing, which needs no counter permission), each GPU kernel launch with its duration, grid, block and the
registers and shared memory the trace reports. The fallback of `kpilot profile` when ncu may not read the
counters, and `kpilot profile --tool torch`.

    python -m kernelpilot.profile.torch_timing TRACE.json SCRIPT.py [ARGS ...]

runs SCRIPT under the profiler (as ``python SCRIPT ARGS`` would) and writes the Chrome trace to TRACE.json;
``launches_from_trace`` reads it back.
"""

from __future__ import annotations

import json
import re
import runpy
import sys
from pathlib import Path
from typing import Any

from kernelpilot.arch.occupancy import nvidia_occupancy
from kernelpilot.arch.registry import ArchSpec, GPUSpec
from kernelpilot.profile.model import KernelLaunch, Profile
from kernelpilot.profile.ncu_metrics import short_name

__all__ = ["launches_from_trace", "profile_from_trace", "python_script", "trace_device", "main"]


def trace_device(trace_path: Path) -> str | None:
    """The GPU's name as the trace's device properties give it."""
    trace = json.loads(Path(trace_path).read_text())
    props = (trace.get("deviceProperties") or [{}]) if isinstance(trace, dict) else [{}]
    return props[0].get("name")


def python_script(command: list[str]) -> tuple[str, list[str]] | None:
    """``(script, args)`` when ``command`` runs a Python file (``python x.py ...`` or ``x.py ...``), else None."""
    if not command:
        return None
    first = Path(command[0]).name
    if re.fullmatch(r"python(\d+(\.\d+)?)?", first) and len(command) > 1 and not command[1].startswith("-"):
        return command[1], list(command[2:])
    if command[0].endswith(".py"):
        return command[0], list(command[1:])
    return None


def _dims(v: Any) -> tuple[int, int, int] | None:
    if isinstance(v, (list, tuple)) and len(v) == 3:
        return (int(v[0]), int(v[1]), int(v[2]))
    return None


def launches_from_trace(trace: dict[str, Any] | list[Any], kernel: str | None = None) -> list[KernelLaunch]:
    """Every GPU kernel in a PyTorch profiler (Kineto) Chrome trace, in start order."""
    events = trace.get("traceEvents", []) if isinstance(trace, dict) else trace
    rx = re.compile(kernel) if kernel else None
    kernels = sorted((e for e in events if e.get("cat") == "kernel"), key=lambda e: e.get("ts", 0))
    out = []
    for e in kernels:
        name = e.get("name", "")
        if rx is not None and not rx.search(name):
            continue
        a = e.get("args") or {}
        k = KernelLaunch(name=short_name(name), id=len(out), full_name=name, duration_us=round(float(e.get("dur", 0)), 3))
        k.grid, k.block = _dims(a.get("grid")), _dims(a.get("block"))
        if a.get("registers per thread") is not None:
            k.registers_per_thread = int(a["registers per thread"])
        if a.get("shared memory") is not None:
            k.shared_bytes_per_block = int(a["shared memory"])
        if a.get("est. achieved occupancy %") is not None:
            k.occupancy["estimated_pct"] = float(a["est. achieved occupancy %"])
        out.append(k)
    return out


def _theoretical(k: KernelLaunch, arch: ArchSpec) -> None:
    """Occupancy and waves from the launch's registers, shared memory and block (the calculator, as ncu's
    theoretical occupancy)."""
    if not (k.registers_per_thread and k.threads_per_block and k.blocks):
        return
    try:
        occ = nvidia_occupancy(arch, registers=k.registers_per_thread, shared_bytes=k.shared_bytes_per_block or 0,
                               block_size=k.threads_per_block)
    except Exception:
        return
    per_sm = min(occ.limits.values()) if occ.limits else None
    k.occupancy.update(theoretical_pct=occ.percent, limiter=occ.limiter, limits=dict(occ.limits),
                       blocks_per_sm=per_sm)
    if per_sm and k.sm_count:
        k.waves_per_sm = round(k.blocks / (k.sm_count * per_sm), 2)


def profile_from_trace(trace_path: Path, *, source: str, kernel: str | None = None, gpu: GPUSpec | None = None,
                       arch: ArchSpec | None = None, bytes_per_launch: float | None = None) -> Profile:
    """A profile of kernel times from a trace, with theoretical occupancy and waves from the arch data; with
    ``bytes_per_launch`` (declared), each launch's bandwidth."""
    trace = json.loads(Path(trace_path).read_text())
    launches = launches_from_trace(trace, kernel)
    props = (trace.get("deviceProperties") or [{}])[0] if isinstance(trace, dict) else {}
    for k in launches:
        k.device = props.get("name")
        k.sm_count = props.get("numSms")
        if gpu is not None:
            k.device = k.device or gpu.name
            k.sm_count = k.sm_count or (gpu.sm_count if "sm_count" in gpu.facts else None)
            if "memory_bandwidth_tbps" in gpu.facts:
                k.peak_bandwidth_gbps = round(gpu.memory_bandwidth_tbps * 1000, 1)
        if arch is not None and arch.vendor == "nvidia":
            _theoretical(k, arch)
        if bytes_per_launch and k.duration_us:
            k.dram_bytes = bytes_per_launch
            k.dram_bandwidth_gbps = round(bytes_per_launch / (k.duration_us * 1e-6) / 1e9, 2)
    prof = Profile(tool="torch-profiler", kernels=launches, source=source, report=str(trace_path))
    prof.notes.append("kernel times from the PyTorch profiler (no hardware counters): no throughput, stalls or "
                      "achieved occupancy" + (", bandwidth from the declared bytes" if bytes_per_launch else ""))
    return prof


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) < 2:
        print("usage: python -m kernelpilot.profile.torch_timing TRACE.json SCRIPT.py [ARGS ...]", file=sys.stderr)
        return 2
    trace, script, rest = Path(args[0]), args[1], args[2:]
    import torch

    if not torch.cuda.is_available():
        print("no CUDA GPU here: there are no kernels to time", file=sys.stderr)
        return 3

    sys.argv = [script, *rest]
    sys.path.insert(0, str(Path(script).resolve().parent))
    status = 0
    with torch.autograd.profiler.profile(use_cpu=False, use_device="cuda", use_kineto=True) as prof:
        try:
            runpy.run_path(script, run_name="__main__")
        except SystemExit as e:
            status = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        torch.cuda.synchronize()
    prof.export_chrome_trace(str(trace))
    return status


if __name__ == "__main__":
    sys.exit(main())
