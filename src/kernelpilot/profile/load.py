"""Profiles from files and from runs: an ``.ncu-rep`` (through ncu), ncu's raw-page CSV (with the details
page beside it for the rule messages), or a command profiled now. Each ends diagnosed (diagnose.py)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from kernelpilot.arch.registry import ArchSpec, GPUSpec, resolve
from kernelpilot.errors import InputFormatError, KernelpilotError
from kernelpilot.profile.diagnose import diagnose_profile
from kernelpilot.profile.model import Profile
from kernelpilot.profile.ncu_csv import read_raw_csv
from kernelpilot.profile.ncu_details import read_rules
from kernelpilot.profile.ncu_metrics import launch_from_ncu, used_metric

__all__ = ["ProfileOptions", "from_ncu_pages", "load_profile", "run_profile", "device_specs"]


@dataclass
class ProfileOptions:
    full: bool = False
    kernel: str | None = None           # regex on kernel names
    launch_count: int | None = None
    source: bool = False                # per-line hotspots (needs line info: -lineinfo)
    out_dir: Path = Path(".")           # where the .ncu-rep is kept
    name: str = "profile"
    timeout: float = 3600.0


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
                   report: str | None = None, all_metrics: bool = False) -> Profile:
    """A diagnosed profile from ncu's raw page (CSV) and, when given, its details page (rule messages).
    ``all_metrics``: keep every metric of the report in each launch's ``metrics`` (else those used)."""
    raws = read_raw_csv(raw_csv, source, keep=None if all_metrics else used_metric)
    device = next((r.text.get("device__attribute_display_name") for r in raws
                   if r.text.get("device__attribute_display_name")), None)
    gspec, aspec = device_specs(device, gpu)
    prof = Profile(tool="ncu", kernels=[launch_from_ncu(r, i, gspec) for i, r in enumerate(raws)], source=source,
                   report=report)
    if device and gspec is None:
        prof.notes.append(f"{device} is not in kernelpilot's arch data: no peak bandwidth or occupancy step "
                          "(pass --gpu NAME)")
    if details:
        rules = read_rules(details)
        if len(rules) == len(prof.kernels):
            for k, rs in zip(prof.kernels, rules):
                k.tool_rules = rs
        elif rules:
            prof.notes.append(f"the details page lists {len(rules)} launches and the raw page {len(prof.kernels)}: "
                              "rule messages left out")
    return diagnose_profile(prof, aspec)


def load_profile(path: str | Path, *, details: str | Path | None = None, gpu: str | None = None,
                 all_metrics: bool = False) -> Profile:
    """A profile from an ``.ncu-rep`` (read through ncu) or an ncu raw-page CSV (``details``: the details page
    as text, for the rule messages)."""
    from kernelpilot.toolchain.ncu import export_pages

    p = Path(path)
    if not p.is_file():
        raise KernelpilotError(f"{p}: no such file.")
    if p.suffix == ".ncu-rep":
        raw, det = export_pages(p)
        return from_ncu_pages(raw, det, source=str(p), gpu=gpu, report=str(p), all_metrics=all_metrics)
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
                all_metrics: bool = False) -> Profile:
    """Profile ``command`` under ncu now; the report is kept in ``opts.out_dir``."""
    from kernelpilot.toolchain.ncu import export_pages, profile_command

    opts.out_dir.mkdir(parents=True, exist_ok=True)
    run = profile_command(command, opts.out_dir / f"{opts.name}.ncu-rep", full=opts.full, kernel=opts.kernel,
                          launch_count=opts.launch_count, source=opts.source, timeout=opts.timeout)
    raw, det = export_pages(run.report)
    prof = from_ncu_pages(raw, det, source=" ".join(command), gpu=gpu, report=str(run.report),
                          all_metrics=all_metrics)
    if run.app_exit_code:
        prof.notes.append(f"the profiled command exited with status {run.app_exit_code}")
    return prof
