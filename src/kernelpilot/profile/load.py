"""Profiles from files and from runs: an ``.ncu-rep`` (through ncu, or NVIDIA's report reader where ncu is
absent), ncu's raw-page CSV (with the details page beside it for the rule messages), or a command profiled
now. Each ends diagnosed (diagnose.py)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kernelpilot.arch.registry import ArchSpec, GPUSpec, resolve
from kernelpilot.errors import InputFormatError, KernelpilotError, ToolNotFoundError, UsageError
from kernelpilot.options import Options, param
from kernelpilot.profile.diagnose import diagnose_profile
from kernelpilot.profile.model import Profile
from kernelpilot.profile.ncu_csv import read_raw_csv
from kernelpilot.profile.ncu_details import read_rules
from kernelpilot.profile.ncu_metrics import launch_from_ncu, used_metric
from kernelpilot.profile.rocprof import is_rocprof, read_rocprof
from kernelpilot.profile.torch_timing import python_script

__all__ = ["ProfileOptions", "from_ncu_pages", "load_profile", "run_profile", "run_torch_profile", "device_specs"]


@dataclass(frozen=True, kw_only=True)
class ProfileOptions(Options):
    """How a command is profiled (declared once for the Python API, the CLI and the tools: ``options.py``)."""

    tool: str = param("The profiler: ncu (Nsight Compute), rocprofv3 (AMD GPUs; untested on live hardware), or "
                      "torch (kernel times from the PyTorch profiler for Python commands; no counters needed).",
                      "ncu", choices=("ncu", "rocprofv3", "torch"))
    kernel: str | None = param("Only kernels whose name matches this regular expression.", short="-k")
    launch_count: int | None = param("Profile at most this many launches.", short="-n", minimum=1)
    full: bool = param("Collect every ncu section (ncu --set full); slower.", False)
    source: bool = param("Hotspots: each launch's hottest SASS instructions, and source lines where the code has "
                         "line info (-lineinfo), from ncu's warp samples; and the instructions (lines) whose "
                         "accesses are uncoalesced or bank-conflicted.", False)
    out: Path = param("The folder to keep the report in.", Path("."), path=True)
    name: str = param("The report's file name (NAME.ncu-rep).", "profile")
    pmc: tuple[str, ...] = param("With tool rocprofv3: a hardware counter to collect, e.g. FETCH_SIZE.")
    bytes_per_launch: float | None = param("Bytes each profiled launch moves, for bandwidth without counters.",
                                           flag="--bytes", minimum=0)
    timeout: float = param("Seconds the profiled command may take.", 3600.0, minimum=1)
    from_start: bool = True             # False: only the range the program marks (cudaProfilerStart/Stop)


def device_specs(device_name: str | None, override: str | None = None) -> tuple[GPUSpec | None, ArchSpec | None]:
    """The product and arch behind the device a report names (or ``override``: a product or ISA name)."""
    from kernelpilot.evaluate.roofline import gpu_from_device_name

    if override:
        arch, gpu = resolve(override)
        return gpu, arch
    gpu = gpu_from_device_name(device_name)
    if gpu is None:
        return None, None
    return gpu, resolve(gpu.key)[0]


def from_ncu_pages(raw_csv: str, details: str | None, *, source: str, gpu: str | None = None,
                   report: str | None = None, all_metrics: bool = False, hotspots_from: Path | None = None,
                   opcodes_from: Path | None = None) -> Profile:
    """A diagnosed profile from ncu's raw page (CSV) and, when given, its details page (rule messages).
    ``all_metrics``: keep every metric of the report in each launch's ``metrics`` (else those used).
    ``hotspots_from``: the .ncu-rep whose warp samples give each launch's hotspots; ``opcodes_from`` (or
    ``hotspots_from``): the .ncu-rep whose per-opcode counts give each launch's instruction mix."""
    raws = read_raw_csv(raw_csv, source, keep=None if all_metrics else used_metric)
    return from_raw_launches(raws, read_rules(details) if details else None, source=source, gpu=gpu,
                             report=report, rules_from="the details page", hotspots_from=hotspots_from,
                             opcodes_from=opcodes_from)


def from_ncu_report(path: Path, *, gpu: str | None = None, all_metrics: bool = False,
                    hotspots: bool = False) -> Profile:
    """A diagnosed profile from an ``.ncu-rep`` read with NVIDIA's ``ncu_report`` module (no ncu needed)."""
    from kernelpilot.profile.ncu_rep import launches_from_report, rules_from_report
    from kernelpilot.profile.ncu_source import load_ncu_report

    report = load_ncu_report(path)     # once, for the metrics, the rule results and the warp samples
    raws = launches_from_report(report, keep=None if all_metrics else used_metric)
    # The reader takes an empty, cut-short or corrupted file without complaint: no launches, or launches with
    # neither a name nor a single metric.
    if not raws:
        raise InputFormatError(str(path), "no kernel launches in it: an empty report, or one cut short or "
                                          "corrupted (Nsight Compute writes at least one launch per report).")
    unread = [r.info.get("ID", "?") for r in raws if not r.metrics and not r.info.get("Kernel Name")]
    if unread:
        which = f"launch {unread[0]} has" if len(unread) == 1 else f"launches {', '.join(unread[:5])} have"
        raise InputFormatError(str(path), f"{which} no name and no metrics: the report is cut short or corrupted.")
    return from_raw_launches(raws, rules_from_report(report), source=str(path), gpu=gpu, report=str(path),
                             rules_from="the report's rule results", hotspots_from=report if hotspots else None,
                             opcodes_from=report)


def from_raw_launches(raws: list, rules: list | None, *, source: str, gpu: str | None, report: str | None,
                      rules_from: str, hotspots_from: Any = None, opcodes_from: Any = None) -> Profile:
    """``hotspots_from``: the report (loaded, or its path) whose warp samples give the hotspots;
    ``opcodes_from``: the report whose per-opcode counts give the instruction mix (the same report, where both
    are given; without ``opcodes_from`` the hotspots' report gives it)."""
    device = next((r.text.get("device__attribute_display_name") for r in raws
                   if r.text.get("device__attribute_display_name")), None)
    gspec, aspec = device_specs(device, gpu)
    prof = Profile(tool="ncu", kernels=[launch_from_ncu(r, i, gspec) for i, r in enumerate(raws)], source=source,
                   report=report)
    if device and gspec is None:
        prof.notes.append(f"{device} is not in kernelpilot's arch data: no peak bandwidth or occupancy step "
                          "(pass --gpu NAME)")
    for i, r in enumerate(raws):
        if r.dropped:                  # said, so that a missing time is not taken for a measurement
            prof.notes.append(f"launch {i} ({r.info.get('Kernel Name') or '?'}): {len(r.dropped)} metric(s) with an "
                              f"infinite value left out: {', '.join(r.dropped[:5])}")
    if rules:
        if len(rules) == len(prof.kernels):
            for k, rs in zip(prof.kernels, rules):
                k.tool_rules = rs
        else:
            prof.notes.append(f"{rules_from} lists {len(rules)} launches and the metrics {len(prof.kernels)}: "
                              "rule messages left out")
    report_of = opcodes_from if opcodes_from is not None else hotspots_from   # one report for both
    if isinstance(report_of, (str, Path)):
        report_of = _loaded(report_of)
    if hotspots_from is not None:
        attach_hotspots(prof, report_of)
    if report_of is not None:
        attach_opcodes(prof, report_of)
    return diagnose_profile(prof, aspec)


def _loaded(path: str | Path) -> Any:
    """The report loaded once with NVIDIA's reader; its path where that fails (each use then says why, and
    the hotspots, asked for, stop the profile)."""
    from kernelpilot.profile.ncu_source import load_ncu_report

    try:
        return load_ncu_report(Path(path))
    except KernelpilotError:
        return path


def attach_opcodes(prof: Profile, report: Any) -> Profile:
    """Each launch's instruction mix from the report (loaded, or its path), matched to the launches in order."""
    from kernelpilot.profile.ncu_mix import read_opcodes

    mixes = _per_launch(prof, lambda: read_opcodes(report), "instruction mix", optional=True)
    for k, mix in zip(prof.kernels, mixes or []):
        k.opcodes = mix
    return prof


def _per_launch(prof: Profile, read: Any, what: str, *, optional: bool = False) -> list | None:
    """``read()``'s list of one item per launch of the report; None (and a note saying why) where NVIDIA's
    report reader is missing or the report's launches are not the profile's, and, for what was not asked for
    (``optional``), where the reader fails on the report."""
    from kernelpilot.profile.ncu_source import ReportReaderMissing

    try:
        got = read()
    except ReportReaderMissing as e:   # the rest of the profile stands without it
        prof.notes.append(f"no {what}: {e.message}")
        return None
    except KernelpilotError as e:
        if not optional:
            raise
        prof.notes.append(f"no {what}: {e.message}")
        return None
    if len(got) != len(prof.kernels):
        prof.notes.append(f"{what}: the report holds {len(got)} launches, the profile {len(prof.kernels)}; "
                          "none attached")
        return None
    return got


def attach_hotspots(prof: Profile, report: Any, *, top: int = 10) -> Profile:
    """Each launch's hottest SASS instructions (and source lines, with line info) from the warp samples
    (SourceCounters) of the report (loaded, or its path), and the instructions whose accesses are uncoalesced or
    bank-conflicted, matched to the profile's launches in order."""
    from kernelpilot.profile.ncu_source import read_hotspots

    spots = _per_launch(prof, lambda: read_hotspots(report, top=top), "hotspots")
    if spots is None:
        return prof
    for k, s in zip(prof.kernels, spots):
        k.hotspots, k.hot_lines = s["instructions"], s["lines"]
        k.uncoalesced_at, k.bank_conflicts_at = s["uncoalesced"], s["bank_conflicts"]
    if not any(s["samples"] for s in spots):
        prof.notes.append("hotspots: the report has no warp samples (profile with the SourceCounters section, "
                          "which kpilot's default set and --full include)")
    elif not any(s["lines"] for s in spots):
        prof.notes.append("hotspots per SASS instruction only: the code has no line info (build CUDA C++ with "
                          "-lineinfo; Triton keeps it unless TRITON_DISABLE_LINE_INFO=1)")
    return prof


def load_profile(path: str | Path, *, details: str | Path | None = None, gpu: str | None = None,
                 all_metrics: bool = False, hotspots: bool = False) -> Profile:
    """A profile from an ``.ncu-rep`` (read through ncu), an ncu raw-page CSV (``details``: the details page
    as text, for the rule messages), or rocprofv3's CSV output (its folder, or its kernel trace). ``hotspots``
    (an ``.ncu-rep`` only): each launch's hottest instructions and lines from its warp samples."""
    from kernelpilot.toolchain.ncu import export_pages

    p = Path(path)
    if p.is_dir() or (p.is_file() and is_rocprof(p)):
        return read_rocprof(p, gpu=gpu)
    if not p.is_file():
        raise KernelpilotError(f"{p}: no such file.")
    if hotspots and p.suffix != ".ncu-rep":
        raise UsageError(f"{p}: hotspots come from the warp samples in an .ncu-rep; import the report itself.")
    if p.suffix == ".ncu-rep":
        try:
            raw, det = export_pages(p)
        except ToolNotFoundError as e:    # no ncu here: NVIDIA's report reader, where installed
            from kernelpilot.profile.ncu_source import ReportReaderMissing

            try:
                return from_ncu_report(p, gpu=gpu, all_metrics=all_metrics, hotspots=hotspots)
            except ReportReaderMissing:
                raise KernelpilotError(f"{e.message.rstrip('.')}, or `pip install ncu-report` to read .ncu-rep "
                                       "files without it.", hint=e.hint) from None
        return from_ncu_pages(raw, det, source=str(p), gpu=gpu, report=str(p), all_metrics=all_metrics,
                              hotspots_from=p if hotspots else None, opcodes_from=p)
    data = p.read_bytes()[:4096]
    if b"\0" in data:
        raise InputFormatError(str(p), "not a profile: a binary file that is not an .ncu-rep (name Nsight Compute "
                                       "reports *.ncu-rep).")
    text = p.read_text(errors="replace")
    det_text = Path(details).read_text(errors="replace") if details else None
    if "Section:" in text and '"ID"' not in text:
        raise InputFormatError(str(p), "Nsight Compute's details page holds no raw metrics; import the report "
                                       "(.ncu-rep) or its raw page (`ncu --import R --csv --page raw`), and give "
                                       "this file as --details.")
    return from_ncu_pages(text, det_text, source=str(p), gpu=gpu, all_metrics=all_metrics)


def run_profile(command: list[str], opts: ProfileOptions, *, gpu: str | None = None,
                all_metrics: bool = False, env: dict[str, str] | None = None) -> Profile:
    """Profile ``command`` now, under ncu (the report kept in ``opts.out``); where ncu may not read the
    GPU's counters and the command is a Python program, its kernels are timed with the PyTorch profiler
    instead, and the profile says why in its notes. ``env``: the profiler's and the command's environment
    (default: this process's)."""
    from kernelpilot.toolchain.ncu import CounterPermissionError, export_pages, profile_command

    opts.out.mkdir(parents=True, exist_ok=True)
    if opts.tool == "torch":
        return run_torch_profile(command, opts, gpu=gpu, env=env)
    if opts.tool == "rocprofv3":
        from kernelpilot.toolchain.rocprof import trace_command

        out = trace_command(command, opts.out / opts.name, counters=list(opts.pmc) or None, timeout=opts.timeout,
                            env=env)
        prof = read_rocprof(out, gpu=gpu)
        prof.source = " ".join(command)
        return prof
    try:
        run = profile_command(command, opts.out / f"{opts.name}.ncu-rep", full=opts.full, kernel=opts.kernel,
                              launch_count=opts.launch_count, source=opts.source, from_start=opts.from_start,
                              timeout=opts.timeout, env=env)
    except CounterPermissionError as e:
        if python_script(command) is None:
            raise KernelpilotError(f"{e.message}; the fallback (kernel times from the PyTorch profiler) needs a "
                                   "Python command (python script.py ...).", hint=e.hint) from None
        prof = run_torch_profile(command, opts, gpu=gpu, env=env)
        prof.notes.insert(0, f"{e.message}: timed with the PyTorch profiler instead")
        return prof
    raw, det = export_pages(run.report)
    prof = from_ncu_pages(raw, det, source=" ".join(command), gpu=gpu, report=str(run.report),
                          all_metrics=all_metrics, hotspots_from=run.report if opts.source else None,
                          opcodes_from=run.report)
    if run.app_exit_code:
        prof.notes.append(f"the profiled command exited with status {run.app_exit_code}")
    return prof


def run_torch_profile(command: list[str], opts: ProfileOptions, *, gpu: str | None = None,
                      env: dict[str, str] | None = None) -> Profile:
    """Time every kernel of a Python command with the PyTorch profiler (no counters); the trace is kept."""
    import subprocess
    import sys

    from kernelpilot.profile.torch_timing import profile_from_trace, trace_device
    from kernelpilot.toolchain.run import kernelpilot_env

    found = python_script(command)
    if found is None:
        raise KernelpilotError("kernel timing without ncu needs a Python command (python script.py ...), not "
                               f"{command[0]!r}.")
    script, args = found
    if not Path(script).is_file():
        raise KernelpilotError(f"{script}: no such file.")
    opts.out.mkdir(parents=True, exist_ok=True)
    trace = opts.out / f"{opts.name}.trace.json"
    try:
        p = subprocess.run([sys.executable, "-m", "kernelpilot.profile.torch_timing", str(trace), script, *args],
                           capture_output=True, text=True, env=env or kernelpilot_env(), timeout=opts.timeout)
    except subprocess.TimeoutExpired:
        raise KernelpilotError(f"the command did not finish within {opts.timeout:.0f} s.") from None
    if not trace.exists():
        last = (p.stderr.strip().splitlines() or ["no output"])[-1]
        raise KernelpilotError(f"the command failed under the PyTorch profiler (exit {p.returncode}): {last}")
    gspec, aspec = device_specs(trace_device(trace), gpu)
    prof = profile_from_trace(trace, source=" ".join(command), kernel=opts.kernel, gpu=gspec, arch=aspec,
                              bytes_per_launch=opts.bytes_per_launch)
    if not prof.kernels:
        raise KernelpilotError("the command ran no GPU kernel" + (f" matching {opts.kernel!r}" if opts.kernel else "")
                               + " (under the PyTorch profiler).")
    if p.returncode:
        prof.notes.append(f"the profiled command exited with status {p.returncode}")
    return diagnose_profile(prof, aspec)
