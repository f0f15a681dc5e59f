"""The profile tools: ``profile`` (run a command, or a candidate on a problem, under a profiler; or read a
report) and ``profile_diff`` (what changed between two profiles)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kernelpilot.options import OptionError, Options, param
from kernelpilot.profile.load import ProfileOptions
from kernelpilot.tools.registry import ToolArgumentError, ToolContext, register
from kernelpilot.tools.shapes import array_of, shape

__all__ = ["ProfileRequest", "ProfileDiffRequest", "Profiled"]


@dataclass(frozen=True, kw_only=True)
class ProfileRequest(ProfileOptions):
    """What to profile (a command, a candidate on a problem, or a report to read) and how."""

    command: tuple[str, ...] = param("The program and its arguments (on the command line, after `--`).",
                                     argument=True)
    problem: Path | None = param("With candidate: profile this candidate on one case of this problem (no command "
                                 "needed).", path=True)
    candidate: Path | None = param("With problem: the candidate file.", short="-c", path=True)
    case: str | None = param("With problem: the case to run (default: the first benchmark case).")
    report: Path | None = param("Read this report instead of running: .ncu-rep, ncu's raw page as CSV, or "
                                "rocprofv3's CSV folder.", flag="--import", path=True)
    details: Path | None = param("With a CSV report: ncu's details page (text), for its rule messages.", path=True)
    gpu: str | None = param("The GPU to take peaks and limits from, when the report's device is not known.")
    metrics: bool = param("Every raw metric of each launch in the result.", False)
    target: str | None = param("With problem and candidate: where to run, a target's name (`kpilot target "
                               "list`); default: here.", short="-t")

    def check(self) -> None:
        if (self.problem is None) != (self.candidate is None):
            raise OptionError("problem", "and candidate go together.")
        given = [w for w, on in (("a command", self.command), ("a problem and a candidate", self.problem),
                                 ("a report", self.report)) if on]
        if len(given) != 1:
            raise OptionError("arguments", "give exactly one of command (to run), problem and candidate, or report "
                                           "(to read)" + (f"; got {' and '.join(given)}." if given else "."))
        if self.target not in (None, "local") and self.problem is None:
            raise OptionError("target", "runs a candidate on a problem there: give problem and candidate.")


@dataclass
class Profiled:
    """A profile, and whether its JSON carries every raw metric."""

    profile: Any
    metrics: bool = False

    def to_json(self) -> dict[str, Any]:
        return self.profile.to_json(metrics=self.metrics)


@register("profile", """Profile a program's GPU kernels (Nsight Compute on NVIDIA, rocprofv3 on AMD, or the
    PyTorch profiler without counters), or a candidate on one case of a problem, or read an existing report, and
    diagnose each launch: duration, grid, waves per SM, occupancy (theoretical, achieved, limiter), throughput,
    DRAM bandwidth against the peak, warp stalls, a bottleneck class, and diagnoses such as launch underfill or
    uncoalesced access, each with evidence and one suggestion. Needs a GPU unless a report is given.""",
          ProfileRequest,
          shape("kernelpilot.profile/1", tool="string", source="string", report={"type": ["string", "null"]},
                kernels=array_of(), totals=array_of(), notes=array_of("string")))
def profile(opts: ProfileRequest, ctx: ToolContext) -> Profiled:
    """A confined caller (an MCP client, a model) runs no command of its choosing, and the candidate it
    profiles runs in the box a check's worker gets, under the profiler, with no credentials in its environment."""
    from kernelpilot.profile.load import load_profile, run_profile

    if ctx.confined and opts.command:
        raise ToolArgumentError("profile.command: tools run no command of the caller's choosing; profile a "
                                "candidate on a problem (problem and candidate) or read a report (report).")
    if opts.report is not None:
        return Profiled(load_profile(opts.report, details=opts.details, gpu=opts.gpu, all_metrics=opts.metrics,
                                     hotspots=opts.source), opts.metrics)
    if opts.target not in (None, "local"):
        from kernelpilot.targets.dispatch import run_remote

        return run_remote(opts.target, "profile", opts, ctx.on_event)
    command = list(opts.command)
    if opts.problem is not None:
        from kernelpilot.evaluate.drive import command as drive_command

        command = drive_command(str(opts.problem), str(opts.candidate), case=opts.case)
        opts = opts.replace(from_start=False)
    env = None
    if ctx.confined:
        from kernelpilot.evaluate.isolation import boxed_command

        command, env = boxed_command(command, opts.out / f"{opts.name}.box")
    return Profiled(run_profile(command, opts, gpu=opts.gpu, all_metrics=opts.metrics, env=env), opts.metrics)


@dataclass(frozen=True, kw_only=True)
class ProfileDiffRequest(Options):
    a: Path = param("The profile before: JSON from `kpilot profile --json`, or a report.", argument=True,
                    path=True, required=True)
    b: Path = param("The profile after.", argument=True, path=True, required=True)


@register("profile_diff", """Compare two profiles of the same program (before and after a change): total
    kernel time and speedup, and per kernel launch its duration, bottleneck class and the diagnoses resolved or
    new.""", ProfileDiffRequest,
          shape("kernelpilot.profile-diff/1", a="string", b="string", kernels=array_of(),
                only_in_a=array_of("string"), only_in_b=array_of("string"), optional=("speedup", "total_us"),
                total_us="object", speedup={"type": ["number", "null"]}))
def profile_diff(opts: ProfileDiffRequest, ctx: ToolContext) -> dict[str, Any]:
    from kernelpilot.profile.diff import diff_profiles, load_either

    return diff_profiles(load_either(opts.a), load_either(opts.b))
