"""AMD's rocprofv3 CSV output to the profile model: one ``KernelLaunch`` per kernel dispatch, with theoretical
occupancy and waves from the arch data, hardware counters where ``--pmc`` collected them, then diagnosed.

    rocprofv3 --kernel-trace --stats -f csv -d OUT -- ./app          # kernel_trace, kernel_stats, agent_info
    rocprofv3 --kernel-trace --pmc SQ_WAVES FETCH_SIZE WRITE_SIZE -f csv -d OUT -- ./app   # + counter_collection
    read_rocprof("OUT")  or  read_rocprof("OUT/host/1234_kernel_trace.csv")

A folder is searched (subfolders too) for one ``*kernel_trace.csv``; the files beside it with the same prefix
(``1234_counter_collection.csv``, ``1234_kernel_stats.csv``, ``1234_agent_info.csv``) are read when present.
Columns are matched case-insensitively (rocpd's CSV export spells some differently: ``Lds_Block_Size``).

Per dispatch:
  duration     End_Timestamp - Start_Timestamp (ns)
  grid         workgroups per dimension: Grid_Size_* are in work-items (the HSA dispatch packet's
               grid_size_x/y/z, which rocprofv3 copies), so grid = ceil(Grid_Size / Workgroup_Size)
  block        Workgroup_Size_X/Y/Z
  registers    registers_per_thread = VGPR_Count (architectural VGPRs); occupancy also takes
               Accum_VGPR_Count (AGPRs) and SGPR_Count
  LDS          Group_Segment_Size where the trace has it (older rocprofv3; by its name the dispatch's
               static + dynamic LDS, not confirmed), else LDS_Block_Size: the kernel symbol's static LDS rounded up to 512-byte blocks, so a
               kernel's dynamic LDS is not in it (a note says so)
  occupancy    ``amd_occupancy`` of those resources and the workgroup size, in waves per SIMD:
               {theoretical_pct, limiter, amd_limiter, limits, unit, active, max, blocks_per_sm, next_step}.
               ``limiter`` uses the model's common names so the diagnoses apply (vgpr -> registers,
               lds -> shared_memory, waves -> warps; sgpr stays sgpr); ``amd_limiter`` and ``limits`` keep
               LLVM's (vgpr, sgpr, lds, waves: waves per SIMD each allows); ``blocks_per_sm`` is workgroups
               per CU.
  waves        waves_per_sm = workgroups / (CUs x workgroups per CU); CUs from agent_info's Cu_Count, else
               the GPU's ``sm_count`` in the arch data
  counters     every Counter_Name of counter_collection.csv in ``metrics`` as rocprofv3 gives it (matched by
               Dispatch_Id, else Correlation_Id, and only where the kernel names agree); FETCH_SIZE and
               WRITE_SIZE are kilobytes (bytes / 1024), so dram_bytes = (FETCH_SIZE + WRITE_SIZE) x 1024 and
               dram_bandwidth_gbps = dram_bytes / duration
  device       agent_info's Product_Name (its Name is the ISA, gfx942), or ``gpu=`` (a product or ISA name)

rocprofv3 has no SM/memory throughput percentages, stall reasons or achieved occupancy here, so launches get
no bottleneck class and only the diagnoses whose metrics exist (underfill, tail, occupancy limits).
Written against rocprofv3's documented format; untested on live AMD output (no AMD GPU).
"""

# Column names, as rocprofv3 (ROCm/rocprofiler-sdk) writes them:
#   kernel trace (<pid>_kernel_trace.csv), source/lib/rocprofiler-sdk-tool/generateCSV.cpp:
#     "Kind","Agent_Id","Queue_Id","Stream_Id","Thread_Id","Dispatch_Id","Kernel_Id","Kernel_Name",
#     "Correlation_Id","Start_Timestamp","End_Timestamp","LDS_Block_Size","Scratch_Size","VGPR_Count",
#     "Accum_VGPR_Count","SGPR_Count","Workgroup_Size_X","Workgroup_Size_Y","Workgroup_Size_Z",
#     "Grid_Size_X","Grid_Size_Y","Grid_Size_Z"
#   older layout, source/docs/data/kernel_trace.csv (the docs' sample): the same up to End_Timestamp, then
#     "Private_Segment_Size","Group_Segment_Size", Workgroup_Size_*, Grid_Size_*, no register counts
#   kernel stats (<pid>_kernel_stats.csv), generateCSV.cpp get_stats_output_file:
#     "Name","Calls","TotalDurationNs","AverageNs","Percentage","MinNs","MaxNs","StdDev"
#   counter collection (<pid>_counter_collection.csv, one row per dispatch and counter), generateCSV.cpp and
#   source/docs/data/counter_collection.csv:
#     "Correlation_Id","Dispatch_Id","Agent_Id","Queue_Id","Process_Id","Thread_Id","Grid_Size","Kernel_Id",
#     "Kernel_Name","Workgroup_Size","LDS_Block_Size","Scratch_Size","VGPR_Count","Accum_VGPR_Count",
#     "SGPR_Count","Counter_Name","Counter_Value","Start_Timestamp","End_Timestamp"
#     (Grid_Size and Workgroup_Size there are x*y*z products)
#   agent info (<pid>_agent_info.csv), generateCSV.cpp: "Node_Id","Logical_Node_Id","Agent_Type" (CPU/GPU), ...
#     "Cu_Count", ..., "Name" (the ISA, gfx942), "Vendor_Name","Product_Name","Model_Name" (53 columns)
# Units and meanings:
#   LDS_Block_Size = (kernel symbol group_segment_size + 511) & ~511: generateCSV.cpp with
#     lds_block_size = 128 * 4 in the tool's sources; the symbol's size is HSA's static group segment size.
#   VGPR_Count / Accum_VGPR_Count / SGPR_Count: source/lib/rocprofiler-sdk/code_object/code_object.cpp. On
#     gfx90a and gfx94x VGPR_Count = (ACCUM_OFFSET + 1) * 4 and Accum_VGPR_Count = the granulated unified
#     count minus that, so the two add up to the unified file's allocation, as amd_occupancy expects;
#     SGPR_Count is granulated (a multiple of 16).
#   FETCH_SIZE / WRITE_SIZE: source/share/rocprofiler-sdk/derived_counters.xml, "The total kilobytes fetched
#     from (written to) the video memory", expressions (bytes)/1024.
#   Start_Timestamp / End_Timestamp: nanoseconds (docs' kernel_trace.csv sample and the stats' *Ns columns).

from __future__ import annotations

import csv
import io
import math
import re
from dataclasses import dataclass
from math import ceil
from pathlib import Path
from typing import Any

from kernelpilot.arch.occupancy import amd_occupancy
from kernelpilot.arch.registry import ArchSpec, GPUSpec, resolve
from kernelpilot.errors import InputFormatError, KernelpilotError, UnknownArchError, UsageError
from kernelpilot.profile.diagnose import diagnose_profile
from kernelpilot.profile.model import KernelLaunch, Profile
from kernelpilot.profile.ncu_metrics import short_name

__all__ = [
    "RocprofFiles",
    "RocprofDevice",
    "TRACE_REQUIRED",
    "find_rocprof_files",
    "is_rocprof",
    "read_csv",
    "read_counters",
    "read_agents",
    "pick_agent",
    "rocprof_device",
    "workgroups_per_cu",
    "launch_occupancy",
    "launch_from_row",
    "read_rocprof",
]

TRACE_SUFFIX = "kernel_trace.csv"
TRACE_REQUIRED = ("Dispatch_Id", "Kernel_Name", "Start_Timestamp", "End_Timestamp",
                  "Workgroup_Size_X", "Workgroup_Size_Y", "Workgroup_Size_Z",
                  "Grid_Size_X", "Grid_Size_Y", "Grid_Size_Z")
COUNTERS_REQUIRED = ("Counter_Name", "Counter_Value")
STATS_REQUIRED = ("Name", "Calls")
# Numeric trace columns kept in each launch's ``metrics`` under these names, where the trace has them.
_TRACE_METRICS = ("VGPR_Count", "Accum_VGPR_Count", "SGPR_Count", "LDS_Block_Size", "Group_Segment_Size",
                  "Scratch_Size", "Private_Segment_Size")
# amd_occupancy's limiter names to the model's (diagnose.py's rules look for registers and shared_memory).
_COMMON_LIMITER = {"vgpr": "registers", "lds": "shared_memory", "waves": "warps", "sgpr": "sgpr"}
_KB = 1024                     # FETCH_SIZE / WRITE_SIZE: bytes / 1024
_NOT_CSV_SUFFIXES = (".json", ".pftrace", ".otf2", ".db", ".rocpd")


@dataclass(frozen=True)
class RocprofFiles:
    """One rocprofv3 run's CSV files: the kernel trace and, where present, the files beside it."""

    trace: Path
    stats: Path | None = None
    counters: Path | None = None
    agents: Path | None = None


@dataclass(frozen=True)
class RocprofDevice:
    """The GPU a dispatch ran on, as far as the files and the arch data tell."""

    name: str | None
    gpu: GPUSpec | None
    arch: ArchSpec | None
    cus: int | None


# ------------------------------------------------------------------------------------------------ files


def _sibling(trace: Path, stem: str) -> Path | None:
    """``<prefix><stem>`` beside ``<prefix>kernel_trace.csv``; else the one ``*<stem>`` there, if only one."""
    if trace.name.lower().endswith(TRACE_SUFFIX):
        f = trace.with_name(trace.name[: -len(TRACE_SUFFIX)] + stem)
        if f.is_file():
            return f
    found = sorted(trace.parent.glob(f"*{stem}"))
    return found[0] if len(found) == 1 else None


def find_rocprof_files(path: str | Path) -> RocprofFiles:
    """The kernel trace in ``path`` (a folder, searched with its subfolders, or the trace CSV itself) and the
    stats, counter and agent files beside it."""
    p = Path(path)
    if not p.exists():
        raise KernelpilotError(f"{p}: no such file or folder.")
    if p.is_dir():
        traces = sorted(f for f in p.rglob(f"*{TRACE_SUFFIX}") if f.is_file())
        if not traces:
            raise InputFormatError(str(p), f"no *_{TRACE_SUFFIX} in this folder or below.",
                                   hint="Run rocprofv3 with --kernel-trace -f csv (with --pmc too, for counters).")
        if len(traces) > 1:
            names = ", ".join(str(t.relative_to(p)) for t in traces[:4]) + (", ..." if len(traces) > 4 else "")
            raise InputFormatError(str(p), f"{len(traces)} kernel traces ({names}); give one of them.")
        trace = traces[0]
    else:
        trace = p
    return RocprofFiles(trace=trace, stats=_sibling(trace, "kernel_stats.csv"),
                        counters=_sibling(trace, "counter_collection.csv"), agents=_sibling(trace, "agent_info.csv"))


def is_rocprof(path: str | Path) -> bool:
    """Whether ``path`` looks like rocprofv3 output: a folder holding a kernel trace, or a kernel trace CSV."""
    p = Path(path)
    if p.is_dir():
        return any(f.is_file() for f in p.rglob(f"*{TRACE_SUFFIX}"))
    if not p.is_file():
        return False
    if p.name.lower().endswith(TRACE_SUFFIX):
        return True
    with p.open(errors="replace") as f:
        head = f.readline().lower()
    return "kernel_name" in head and "start_timestamp" in head and "counter_name" not in head


def read_csv(path: Path, what: str) -> list[dict[str, str]]:
    """The rows of a rocprofv3 CSV, keyed by lower-case column name (header only: no rows)."""
    data = path.read_bytes()
    if b"\0" in data[:4096] or path.suffix.lower() in _NOT_CSV_SUFFIXES:
        raise InputFormatError(str(path), f"not a CSV file; a rocprofv3 {what} is CSV.",
                               hint="Run rocprofv3 with -f csv.")
    try:
        reader = csv.reader(io.StringIO(data.decode("utf-8", errors="replace")))
        header = next(reader, None)
        if not header:
            return []
        if len(header) < 2 or header[0].lstrip().startswith(("{", "[")):
            raise InputFormatError(str(path), f"not a CSV file; a rocprofv3 {what} is CSV.",
                                   hint="Run rocprofv3 with -f csv.")
        keys = [h.strip().lower() for h in header]
        return [dict(zip(keys, (c.strip() for c in row))) for row in reader if any(c.strip() for c in row)]
    except csv.Error as e:
        raise InputFormatError(str(path), f"not a readable CSV file ({e}).") from None


def _require(path: Path, rows: list[dict[str, str]], columns: tuple[str, ...], what: str) -> None:
    missing = [c for c in columns if c.lower() not in rows[0]]
    if missing:
        hint = None
        if what == "kernel trace" and "counter_name" in rows[0]:
            hint = "This is a counter collection; give the kernel trace, or the folder holding both."
        raise InputFormatError(str(path), f"not a rocprofv3 {what}: missing columns {', '.join(missing)}.",
                               hint=hint)


def _num(path: Path, row: dict[str, str], column: str, line: int) -> float | None:
    """The number in ``column`` (None when the column is absent or empty); a non-number is an error."""
    text = row.get(column.lower())
    if text is None or text == "":
        return None
    try:
        v = float(text)
    except ValueError:
        raise InputFormatError(str(path), f"row {line}: {column} {text!r} is not a number.") from None
    if not math.isfinite(v):
        raise InputFormatError(str(path), f"row {line}: {column} {text!r} is not a finite number.")
    return v


def _int(path: Path, row: dict[str, str], column: str, line: int) -> int | None:
    v = _num(path, row, column, line)
    return None if v is None else int(v)


# -------------------------------------------------------------------------------------- counters, agents


def read_counters(path: Path) -> dict[tuple[str, int], tuple[str, dict[str, float]]]:
    """Counter values per dispatch from a long-format counter_collection.csv, keyed by ("dispatch_id", N)
    and ("correlation_id", N): (kernel name, {counter name: value}). A repeated row replaces the earlier."""
    rows = read_csv(path, "counter collection")
    if not rows:
        return {}
    _require(path, rows, COUNTERS_REQUIRED, "counter collection")
    keys = [k for k in ("dispatch_id", "correlation_id") if k in rows[0]]
    if not keys:
        raise InputFormatError(str(path), "not a rocprofv3 counter collection: missing columns Dispatch_Id, "
                                          "Correlation_Id.")
    out: dict[tuple[str, int], tuple[str, dict[str, float]]] = {}
    for line, row in enumerate(rows, start=2):
        value = _num(path, row, "Counter_Value", line)
        if value is None or not row.get("counter_name"):
            continue
        for key in keys:
            n = _int(path, row, key, line)
            if n is not None:
                out.setdefault((key, n), (row.get("kernel_name", ""), {}))[1][row["counter_name"]] = value
    return out


def read_agents(path: Path) -> list[dict[str, str]]:
    """The GPU agents of an agent_info.csv (rows whose Agent_Type is GPU), in file order."""
    rows = read_csv(path, "agent info")
    return [r for r in rows if r.get("agent_type", "").upper() == "GPU"]


def pick_agent(agent_id: str | None, gpus: list[dict[str, str]]) -> dict[str, str] | None:
    """The agent_info row a trace's Agent_Id names: "Agent N" (logical node, else node id), "GPU N" (the Nth
    GPU) or a bare number; with one GPU agent, that one."""
    m = re.fullmatch(r"\s*(agent|gpu)?\s*(\d+)\s*", agent_id or "", re.IGNORECASE)
    if m:
        n = int(m.group(2))
        if (m.group(1) or "").lower() == "gpu":
            if n < len(gpus):
                return gpus[n]
        else:
            for key in ("logical_node_id", "node_id"):
                for g in gpus:
                    if g.get(key, "").isdigit() and int(g[key]) == n:
                        return g
    return gpus[0] if len(gpus) == 1 else None


def rocprof_device(agent: dict[str, str] | None, gpu: str | None = None) -> RocprofDevice:
    """Product, arch and CU count for an agent_info row (or none), ``gpu`` (a product or ISA name) first."""
    from kernelpilot.evaluate.roofline import gpu_from_device_name

    agent = agent or {}
    product, isa = agent.get("product_name") or None, agent.get("name") or None
    if gpu:
        arch, gspec = resolve(gpu)
    else:
        gspec = gpu_from_device_name(product)
        arch = resolve(gspec.key)[0] if gspec is not None else None
        if arch is None and isa:
            try:
                arch = resolve(isa)[0]
            except UnknownArchError:
                arch = None
    if arch is not None and arch.vendor != "amd":
        raise UsageError(f"{gpu or product or isa} is an {arch.vendor.upper()} GPU; rocprofv3 profiles AMD GPUs.")
    cus = int(agent["cu_count"]) if agent.get("cu_count", "").isdigit() and int(agent["cu_count"]) > 0 else None
    if cus is None and gspec is not None and "sm_count" in gspec.facts:
        cus = gspec.sm_count
    name = ((gspec.name if gpu and gspec is not None else None) or product or (gspec.name if gspec else None)
            or isa or (arch.target if gpu and arch is not None else None))
    return RocprofDevice(name=name, gpu=gspec, arch=arch, cus=cus)


# -------------------------------------------------------------------------------------------- occupancy


def workgroups_per_cu(arch: ArchSpec, limits: dict[str, int], lds_bytes: int, block_size: int) -> int:
    """Workgroups one CU holds at once: the fewest that registers (waves per SIMD x SIMDs / waves per
    workgroup), LDS (LDS per CU / LDS per workgroup) and wave slots and barriers allow (LLVM
    getMaxWorkGroupsPerCU: all 32 slots for one-wave groups, else min(32 / waves, 16))."""
    wpw = ceil(block_size / arch.warp_size)
    slots = arch.max_waves_per_simd * arch.simds_per_cu
    by_slots = slots if wpw == 1 else min(slots // wpw, arch.max_workgroups_per_cu)
    by_regs = min(limits["vgpr"], limits["sgpr"]) * arch.simds_per_cu // wpw
    by_lds = arch.lds_per_cu_bytes // lds_bytes if lds_bytes else by_slots
    return min(by_slots, by_regs, by_lds)


def launch_occupancy(arch: ArchSpec, *, vgpr: int, agpr: int, sgpr: int, lds_bytes: int,
                     block_size: int) -> dict[str, Any]:
    """The occupancy dict of one AMD launch (see the module docstring). Raises ValueError for resources
    the arch cannot hold."""
    occ = amd_occupancy(arch, vgpr=vgpr, agpr=agpr, sgpr=sgpr, lds_bytes=lds_bytes, block_size=block_size)
    return {
        "theoretical_pct": occ.percent,
        "limiter": _COMMON_LIMITER.get(occ.limiter, occ.limiter),
        "amd_limiter": occ.limiter,
        "limits": dict(occ.limits),
        "unit": occ.unit,
        "active": occ.active,
        "max": occ.max,
        "blocks_per_sm": workgroups_per_cu(arch, occ.limits, lds_bytes, block_size),
        "next_step": occ.next_step,
    }


# ---------------------------------------------------------------------------------------------- launches


def _dims(path: Path, row: dict[str, str], prefix: str, line: int) -> tuple[int, int, int]:
    v = [_int(path, row, f"{prefix}_{a}", line) for a in "XYZ"]
    return (v[0] or 1, v[1] or 1, v[2] or 1)


def _sig(x: float) -> float:
    """Three significant digits: a tiny launch keeps a non-zero number of waves."""
    return float(f"{x:.3g}")


def launch_from_row(path: Path, row: dict[str, str], line: int, dev: RocprofDevice,
                    counters: dict[str, float] | None = None) -> KernelLaunch:
    """One dispatch of the kernel trace as a ``KernelLaunch`` (``counters``: its counter values)."""
    full = row.get("kernel_name", "")
    dispatch = _int(path, row, "Dispatch_Id", line)
    k = KernelLaunch(name=short_name(full) or f"kernel_{dispatch}", id=dispatch if dispatch is not None else line - 2,
                     full_name=full, device=dev.name, sm_count=dev.cus)
    start, end = _int(path, row, "Start_Timestamp", line), _int(path, row, "End_Timestamp", line)
    if start is not None and end is not None and end >= start:
        k.duration_us = round((end - start) / 1000, 3)
    k.block = _dims(path, row, "Workgroup_Size", line)
    items = _dims(path, row, "Grid_Size", line)
    k.grid = (ceil(items[0] / k.block[0]), ceil(items[1] / k.block[1]), ceil(items[2] / k.block[2]))
    for col in _TRACE_METRICS:
        v = _num(path, row, col, line)
        if v is not None:
            k.metrics[col] = v
    vgpr = _int(path, row, "VGPR_Count", line)
    k.registers_per_thread = vgpr
    lds = _int(path, row, "Group_Segment_Size", line)
    if lds is None:
        lds = _int(path, row, "LDS_Block_Size", line)
    k.shared_bytes_per_block = lds
    if dev.arch is not None and vgpr is not None and k.threads_per_block:
        try:
            k.occupancy = launch_occupancy(dev.arch, vgpr=vgpr, agpr=_int(path, row, "Accum_VGPR_Count", line) or 0,
                                           sgpr=_int(path, row, "SGPR_Count", line) or 0, lds_bytes=lds or 0,
                                           block_size=k.threads_per_block)
        except ValueError:
            k.occupancy = {}
    per_cu = k.occupancy.get("blocks_per_sm")
    if per_cu and dev.cus and k.blocks:
        k.waves_per_sm = _sig(k.blocks / (dev.cus * per_cu))
    if dev.gpu is not None and "memory_bandwidth_tbps" in dev.gpu.facts:
        k.peak_bandwidth_gbps = round(dev.gpu.memory_bandwidth_tbps * 1000, 1)
    if counters:
        k.metrics.update(counters)
        rd, wr = counters.get("FETCH_SIZE"), counters.get("WRITE_SIZE")
        if rd is not None or wr is not None:
            k.dram_bytes = ((rd or 0.0) + (wr or 0.0)) * _KB
            if k.duration_us:
                k.dram_bandwidth_gbps = round(k.dram_bytes / (k.duration_us * 1e-6) / 1e9, 2)
    return k


def _counters_for(row: dict[str, str], table: dict[tuple[str, int], tuple[str, dict[str, float]]],
                  ) -> tuple[dict[str, float] | None, bool]:
    """(counters, mismatch): the dispatch's counters, by Dispatch_Id first, then Correlation_Id; a row whose
    kernel name differs from the trace's is not used (mismatch True)."""
    for key in ("dispatch_id", "correlation_id"):
        text = row.get(key, "")
        try:
            hit = table.get((key, int(float(text))))
        except ValueError:
            hit = None
        if hit is not None:
            name, values = hit
            if name and name != row.get("kernel_name", ""):
                return None, True
            return values, False
    return None, False


def _stats_note(path: Path, launches: int) -> str | None:
    rows = read_csv(path, "kernel stats")
    if not rows:
        return None
    _require(path, rows, STATS_REQUIRED, "kernel stats")
    calls = sum(int(_num(path, r, "Calls", i) or 0) for i, r in enumerate(rows, start=2))
    if calls != launches:
        return f"{path.name} counts {calls} dispatches and the kernel trace {launches}"
    return None


def read_rocprof(path: str | Path, *, gpu: str | None = None) -> Profile:
    """A diagnosed profile from rocprofv3's CSV output: a folder (with its subfolders) holding one
    ``*_kernel_trace.csv``, or that file. ``gpu``: a product or ISA name, for output without agent_info.csv
    or to override it."""
    files = find_rocprof_files(path)
    rows = read_csv(files.trace, "kernel trace")
    if not rows:
        raise InputFormatError(str(files.trace), "the kernel trace holds no kernel dispatches.",
                               hint="Check that the program launched GPU kernels while rocprofv3 ran.")
    _require(files.trace, rows, TRACE_REQUIRED, "kernel trace")
    rows = [(i, r) for i, r in enumerate(rows, start=2) if r.get("kind", "KERNEL_DISPATCH") == "KERNEL_DISPATCH"]
    if not rows:
        raise InputFormatError(str(files.trace), "the kernel trace holds no kernel dispatches (Kind "
                                                 "KERNEL_DISPATCH).")

    gpus = read_agents(files.agents) if files.agents else []
    table = read_counters(files.counters) if files.counters else {}
    devices: dict[str, RocprofDevice] = {}
    launches: list[tuple[int, int, KernelLaunch]] = []
    missing = mismatched = 0
    for line, row in rows:
        agent_id = row.get("agent_id", "")
        if agent_id not in devices:
            devices[agent_id] = rocprof_device(pick_agent(agent_id, gpus), gpu)
        counters, mismatch = _counters_for(row, table) if table else (None, False)
        mismatched += mismatch
        missing += bool(table) and counters is None and not mismatch
        k = launch_from_row(files.trace, row, line, devices[agent_id], counters)
        launches.append((_int(files.trace, row, "Start_Timestamp", line) or 0, k.id, k))
    launches.sort(key=lambda t: (t[0], t[1]))
    prof = Profile(tool="rocprofv3", kernels=[k for _, _, k in launches], source=str(path))

    for dev in devices.values():
        if dev.arch is None:
            what = (f"{dev.name} is not in kernelpilot's arch data" if dev.name
                    else "no agent_info.csv names the GPU")
            prof.notes.append(f"{what}: no occupancy, waves per CU or peak bandwidth (pass --gpu NAME)")
            break
        if dev.gpu is None:
            lacking = "peak bandwidth" + ("" if dev.cus else ", CU count or waves per CU")
            prof.notes.append(f"{dev.name or dev.arch.name} names no GPU product in kernelpilot's arch data: no "
                              f"{lacking} (pass --gpu PRODUCT)")
            break
    if "group_segment_size" not in rows[0][1] and "lds_block_size" in rows[0][1]:
        prof.notes.append("LDS per workgroup is rocprofv3's LDS_Block_Size, the kernel's static LDS: dynamic LDS "
                          "is not in it, so occupancy may be overstated for kernels that allocate it at launch")
    if mismatched:
        prof.notes.append(f"{mismatched} dispatches' counter rows name another kernel (a different run?): "
                          "their counters are left out")
    if missing and files.counters:
        prof.notes.append(f"{missing} of {len(rows)} dispatches have no counters in {files.counters.name}")
    if files.stats:
        note = _stats_note(files.stats, len(rows))
        if note:
            prof.notes.append(note)
    first = next((d.arch for d in devices.values() if d.arch is not None), None)
    return diagnose_profile(prof, first)
