"""Run rocprofv3 on a command: kernel trace and stats as CSV into a folder (ROCm's rocprofiler-sdk).
Untested on live AMD hardware (none is available); the output format is the documented one."""

from __future__ import annotations

from pathlib import Path

from kernelpilot.errors import KernelpilotError, ToolError
from kernelpilot.toolchain.find import find_tool
from kernelpilot.toolchain.run import run_tool

__all__ = ["trace_command"]


def trace_command(command: list[str], out_dir: Path, *, counters: list[str] | None = None,
                  timeout: float = 3600.0, env: dict[str, str] | None = None) -> Path:
    """``rocprofv3 --kernel-trace --stats [--pmc COUNTERS] -f csv -d OUT -- COMMAND``; returns OUT."""
    if not command:
        raise KernelpilotError("no command to profile: put it after `--`, e.g. `kpilot profile --tool rocprofv3 -- ./app`.")
    exe = find_tool("rocprofv3")
    out_dir.mkdir(parents=True, exist_ok=True)
    cmd: list[str] = [str(exe), "--kernel-trace", "--stats", "-f", "csv", "-d", str(out_dir)]
    if counters:
        cmd += ["--pmc", *counters]
    cmd += ["--", *command]
    res = run_tool(cmd, tool="rocprofv3", timeout=timeout, check=False, env=env)
    if not any(out_dir.rglob("*kernel_trace.csv")):
        text = "\n".join(l for l in (res.stdout + "\n" + res.stderr).splitlines() if l.strip())
        raise ToolError("rocprofv3", cmd, res.returncode, text[-3000:],
                        message=f"rocprofv3 wrote no kernel trace (exit {res.returncode}).")
    return out_dir
