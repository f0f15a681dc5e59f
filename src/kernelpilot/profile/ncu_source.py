"""Hotspots from Nsight Compute's warp-state sampling (the SourceCounters section, in kpilot's default set):
for each kernel launch of an ``.ncu-rep``, the SASS instructions where sampled warps sat most often, with the
stall reasons they were sampled in, and, where the code was built with line info (-lineinfo), the same summed
per source line.

The report is read with NVIDIA's ``ncu_report`` module: the one in Nsight Compute's ``extras/python`` folder,
or the ``ncu-report`` package from PyPI (no GPU or ncu needed).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Callable

from kernelpilot.errors import KernelpilotError, ToolNotFoundError
from kernelpilot.profile.model import AccessSpot, Hotspot

__all__ = ["ReportReaderMissing", "actions", "load_ncu_report", "read_hotspots"]

_SAMPLES = "smsp__pcsamp_sample_count"
_STALL = "smsp__pcsamp_warps_issue_stalled_"
# per memory instruction: (excess, all) global-memory sectors and shared-memory wavefronts
_GLOBAL = ("derived__memory_l2_theoretical_sectors_global_excessive", "memory_l2_theoretical_sectors_global")
_SHARED = ("derived__memory_l1_wavefronts_shared_excessive", "memory_l1_wavefronts_shared")


class ReportReaderMissing(KernelpilotError):
    """Neither the ``ncu_report`` package nor an Nsight Compute installation to take it from."""


def load_ncu_report(path: Path) -> Any:
    """The report loaded with ``ncu_report`` (from PyPI, or from the installed Nsight Compute)."""
    try:
        import ncu_report  # type: ignore[import-not-found]
    except ImportError:
        ncu_report = _from_nsight_compute()
    try:
        return ncu_report.load_report(str(path))
    except Exception as e:  # the module raises several kinds for a file that is not a report
        raise KernelpilotError(f"{path}: Nsight Compute's report reader could not read it ({e}).") from None


def _from_nsight_compute() -> Any:
    from kernelpilot.toolchain.find import find_tool

    try:
        ncu = find_tool("ncu").resolve()
    except ToolNotFoundError:
        ncu = None
    # ncu's own folder, or (where ncu is the CUDA toolkit's bin/ncu wrapper script) the toolkit's
    # nsight-compute-VERSION folder; the standalone installs under /opt/nvidia/nsight-compute
    roots = [ncu.parent, *sorted(ncu.parent.parent.glob("nsight-compute*"), reverse=True)] if ncu else []
    roots += sorted(Path("/opt/nvidia/nsight-compute").glob("*"), reverse=True)
    for root in roots:
        extras = root / "extras" / "python"
        if (extras / "ncu_report.py").is_file():
            sys.path.insert(0, str(extras))
            import ncu_report  # type: ignore[import-not-found]

            return ncu_report
    raise ReportReaderMissing("reading an .ncu-rep needs NVIDIA's ncu_report module: `pip install ncu-report`, "
                              "or an Nsight Compute installation (its extras/python folder).")


def actions(report: Any) -> list[Any]:
    """Every kernel launch (ncu's "action") of a report, in order. ``report``: a loaded report, or its path."""
    if isinstance(report, (str, Path)):
        report = load_ncu_report(Path(report))
    out = []
    for r in range(report.num_ranges()):
        rng = report.range_by_idx(r)
        out += [rng.action_by_idx(i) for i in range(rng.num_actions())]
    return out


def _per_pc(action: Any, name: str) -> dict[int, int]:
    m = action.metric_by_name(name)
    if m is None or not m.has_correlation_ids():
        return {}
    ids = m.correlation_ids()
    return {int(ids.as_uint64(i)): int(m.as_uint64(i)) for i in range(m.num_instances()) if m.as_uint64(i)}


def _line_of(action: Any, pc: int) -> str | None:
    info = action.source_info(pc)
    if info is None:
        return None
    name, line = info.file_name(), info.line()
    return f"{Path(name).name}:{line}" if name and line else None


def _spots(samples: dict[str, int], stalls: dict[str, dict[str, int]], total: int, top: int,
           sass: Callable[[str], str] | None) -> list[Hotspot]:
    out = []
    for where, n in sorted(samples.items(), key=lambda kv: (-kv[1], kv[0]))[:top]:
        reasons = sorted(stalls.get(where, {}).items(), key=lambda kv: -kv[1])[:3]
        out.append(Hotspot(where=where, samples=n, share_pct=round(100 * n / total, 2),
                           stalls=[{"reason": r, "share_pct": round(100 * c / n, 1)} for r, c in reasons],
                           sass=sass(where) if sass else None))
    return out


def _sass(action: Any, pc: int) -> str:
    return " ".join(str(action.sass_by_pc(pc)).split())


def _access_spots(action: Any, names: tuple[str, str], base: int, top: int) -> list[AccessSpot]:
    """The instructions with accesses beyond a perfect pattern (names: the excess metric, the all metric),
    most excess first."""
    excess = _per_pc(action, names[0])
    whole = sum(excess.values())
    if not whole:
        return []
    moved = _per_pc(action, names[1])
    return [AccessSpot(where=f"0x{pc - base:04x}", excess=n, total=moved.get(pc, n),
                       share_pct=round(100 * n / whole, 2), line=_line_of(action, pc), sass=_sass(action, pc))
            for pc, n in sorted(excess.items(), key=lambda kv: (-kv[1], kv[0]))[:top]]


def _kernel_hotspots(action: Any, samples: dict[int, int], base: int,
                     top: int) -> tuple[list[Hotspot], list[Hotspot]]:
    """The hottest instructions and source lines of one launch's warp samples (per PC), offsets from ``base``."""
    total = sum(samples.values())
    if not total:
        return [], []
    by_pc: dict[int, dict[str, int]] = {}
    for name in action.metric_names():
        if name.startswith(_STALL) and not name.endswith("_not_issued"):
            for pc, n in _per_pc(action, name).items():
                by_pc.setdefault(pc, {})[name[len(_STALL):]] = n
    key = {pc: f"0x{pc - base:04x}" for pc in samples}
    pc_of = {where: pc for pc, where in key.items()}
    sass = lambda where: _sass(action, pc_of[where])  # noqa: E731  (the top ones only)
    instructions = _spots({key[pc]: n for pc, n in samples.items()}, {key[pc]: s for pc, s in by_pc.items()
                                                                     if pc in key}, total, top, sass)
    lines: dict[str, int] = {}
    line_stalls: dict[str, dict[str, int]] = {}
    for pc, n in samples.items():
        where = _line_of(action, pc)
        if where:
            lines[where] = lines.get(where, 0) + n
            for r, c in by_pc.get(pc, {}).items():
                line_stalls.setdefault(where, {})[r] = line_stalls.get(where, {}).get(r, 0) + c
    return instructions, _spots(lines, line_stalls, total, top, None)


def read_hotspots(report: Any, *, top: int = 10) -> list[dict[str, Any]]:
    """Per kernel launch of the report (loaded, or its path), in launch order: ``{"name", "samples",
    "instructions", "lines", "uncoalesced", "bank_conflicts"}``, the ``top`` hottest SASS instructions
    (``where``: offset from the kernel's first sampled instruction) and source lines (empty without line info),
    and the ``top`` instructions with global-memory sectors beyond coalesced access and with shared-memory
    wavefronts beyond conflict-free ones. A launch profiled without SourceCounters has none of these."""
    out = []
    for action in actions(report):
        samples = _per_pc(action, _SAMPLES)
        # offsets count from the first sampled instruction (the first executed one where nothing was sampled)
        base = min(samples or _per_pc(action, "inst_executed") or [0])
        instructions, lines = _kernel_hotspots(action, samples, base, top)
        out.append({"name": action.name(), "samples": sum(samples.values()), "instructions": instructions,
                    "lines": lines,
                    "uncoalesced": _access_spots(action, _GLOBAL, base, top),
                    "bank_conflicts": _access_spots(action, _SHARED, base, top)})
    return out
