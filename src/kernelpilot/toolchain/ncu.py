"""Run Nsight Compute: profile a command into a report, and read a report back as the raw page (CSV) and
the details page (rule messages). Failures become one typed error each: ncu missing, no permission to read
the GPU's counters, the profiled command failing, no kernel profiled."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from kernelpilot.errors import KernelpilotError, ToolError
from kernelpilot.toolchain.find import find_tool
from kernelpilot.toolchain.run import run_tool

__all__ = ["DEFAULT_SECTIONS", "NcuRun", "CounterPermissionError", "profile_command", "export_pages"]

# The focused default: what decides the next step, at a fraction of --set full's replay passes.
DEFAULT_SECTIONS = ("SpeedOfLight", "LaunchStats", "Occupancy", "WarpStateStats", "MemoryWorkloadAnalysis",
                    "MemoryWorkloadAnalysis_Tables", "ComputeWorkloadAnalysis", "SchedulerStats", "SourceCounters")


class CounterPermissionError(KernelpilotError):
    """ncu ran but may not read the GPU's performance counters (ERR_NVGPUCTRPERM, or no driver access)."""


@dataclass
class NcuRun:
    report: Path
    command: list[str]
    stdout: str
    app_exit_code: int | None       # the profiled program's exit status as ncu reported it (None: 0)


_PERMISSION = re.compile(r"ERR_NVGPUCTRPERM|permission to access NVIDIA GPU Performance Counters", re.IGNORECASE)
_APP_ERROR = re.compile(r"==ERROR== The application returned an error code \((\d+)\)")
_NO_KERNELS = re.compile(r"==WARNING== No kernels were profiled")


def profile_command(command: list[str], report: Path, *, full: bool = False, kernel: str | None = None,
                    launch_count: int | None = None, source: bool = False, clock_control: str = "none",
                    from_start: bool = True, timeout: float = 3600.0, env: dict[str, str] | None = None) -> NcuRun:
    """Profile ``command`` into ``report`` (``.ncu-rep`` added by ncu). Raises ToolNotFoundError,
    CounterPermissionError, or ToolError (the command failed, or nothing was profiled)."""
    if not command:
        raise KernelpilotError("no command to profile: put it after `--`, e.g. `kpilot profile -- ./app`.")
    ncu = find_tool("ncu")
    base = str(report)[: -len(".ncu-rep")] if str(report).endswith(".ncu-rep") else str(report)
    cmd: list[str] = [str(ncu), "--clock-control", clock_control, "--export", base, "--force-overwrite"]
    if full:
        cmd += ["--set", "full"]
    else:
        for s in DEFAULT_SECTIONS:
            cmd += ["--section", s]
    if source:
        cmd += ["--import-source", "yes"]
    if kernel:
        cmd += ["--kernel-name", f"regex:{kernel}"]
    if launch_count:
        cmd += ["--launch-count", str(launch_count)]
    if not from_start:
        cmd += ["--profile-from-start", "off"]     # the program marks its range (cudaProfilerStart/Stop)
    cmd += list(command)
    res = run_tool(cmd, tool="ncu", timeout=timeout, check=False, env=env)
    text = res.stdout + "\n" + res.stderr
    if _PERMISSION.search(text):
        line = next((l.strip() for l in text.splitlines() if _PERMISSION.search(l)), "ERR_NVGPUCTRPERM")
        raise CounterPermissionError(f"ncu may not read the GPU's performance counters: {line}",
                                     hint="Run as root, or set NVreg_RestrictProfilingToAdminUsers=0 for the "
                                          "nvidia driver; kernels can still be timed without counters.")
    report_path = Path(base + ".ncu-rep")
    app = _APP_ERROR.search(text)
    if _NO_KERNELS.search(text) or not report_path.exists():
        why = f"the command exited with {app.group(1)}" if app else "no kernel matched" if kernel else "it launched no GPU kernel"
        raise ToolError("ncu", cmd, res.returncode, _tail(text),
                        message=f"ncu profiled no kernel ({why}).")
    return NcuRun(report_path, cmd, text, int(app.group(1)) if app else None)


def export_pages(report: Path, *, timeout: float = 600.0) -> tuple[str, str]:
    """The raw page as CSV and the details page (its section tables and rule messages) of an ``.ncu-rep``."""
    ncu = find_tool("ncu")
    raw = run_tool([ncu, "--import", report, "--csv", "--page", "raw"], tool="ncu", timeout=timeout)
    details = run_tool([ncu, "--import", report, "--page", "details"], tool="ncu", timeout=timeout)
    return raw.stdout, details.stdout


def _tail(text: str, n: int = 15) -> str:
    lines = [l for l in text.splitlines() if l.strip()]
    return "\n".join(lines[-n:])
