"""From Nsight Compute metrics (one launch, base units) to a ``KernelLaunch``.

Metric names follow Nsight Compute 2023+ on Hopper (confirmed on the H200 fixtures); any that a report
lacks leave their field None, and no diagnosis fires without its metrics.
"""

from __future__ import annotations

import re

from kernelpilot.arch.registry import GPUSpec
from kernelpilot.profile.model import KernelLaunch, Stall
from kernelpilot.profile.ncu_csv import RawLaunch

__all__ = ["launch_from_ncu", "short_name", "STALL_PREFIX", "used_metric", "pipes"]

STALL_PREFIX = "smsp__average_warps_issue_stalled_"
_STALL_SUFFIX = "_per_issue_active.ratio"
_PIPE_PREFIX = "sm__inst_executed_pipe_"          # instructions issued to one pipe, as a share of its peak rate
_PIPE_SUFFIX = ".avg.pct_of_peak_sustained_active"
_LIMITS = {"launch__occupancy_limit_registers": "registers", "launch__occupancy_limit_shared_mem": "shared_memory",
           "launch__occupancy_limit_warps": "warps", "launch__occupancy_limit_blocks": "blocks",
           "launch__occupancy_limit_barriers": "barriers"}


# Every metric read here or in diagnose.py: a report's other columns are converted only when asked for.
_USED = {
    "gpu__time_duration.sum", "sm__throughput.avg.pct_of_peak_sustained_elapsed",
    "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed",
    "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed", "l1tex__throughput.avg.pct_of_peak_sustained_active",
    "lts__throughput.avg.pct_of_peak_sustained_elapsed", "dram__bytes_read.sum", "dram__bytes_write.sum",
    "dram__bytes.sum.per_second", "l1tex__t_sector_hit_rate.pct", "lts__t_sector_hit_rate.pct",
    "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed", "sm__maximum_warps_per_active_cycle_pct",
    "sm__warps_active.avg.pct_of_peak_sustained_active",
    "derived__memory_l2_theoretical_sectors_global_excessive", "derived__memory_l1_wavefronts_shared_excessive",
    "l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum", "l1tex__data_pipe_lsu_wavefronts_mem_shared.sum",
    "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum", "l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum",
    "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum", "l1tex__t_requests_pipe_lsu_mem_global_op_st.sum",
    "device__attribute_display_name",
}


def used_metric(name: str) -> bool:
    """Whether kernelpilot reads this metric (launch__* and stall reasons included)."""
    return (name in _USED or name.startswith("launch__") or (name.startswith(STALL_PREFIX) and name.endswith(_STALL_SUFFIX))
            or (name.startswith(_PIPE_PREFIX) and name.endswith(_PIPE_SUFFIX)))


def short_name(full: str) -> str:
    """``void ns::k<128>(float *, int)`` -> ``ns::k<128>``; a plain name is returned as it is."""
    depth = 0
    for i, ch in enumerate(full):
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth = max(0, depth - 1)
        elif ch == "(" and depth == 0 and i > 0:
            full = full[:i]
            break
    full = full.strip()
    return re.sub(r"^(?:void|static|__global__)\s+", "", full)


def _dims(text: str | None, metrics: dict[str, float], prefix: str) -> tuple[int, int, int] | None:
    if text:
        nums = [int(n) for n in re.findall(r"\d+", text.replace(",", ""))]
        if len(nums) == 3:
            return (nums[0], nums[1], nums[2])
    xs = [metrics.get(f"{prefix}_{a}") for a in "xyz"]
    if all(x is not None for x in xs):
        return (int(xs[0]), int(xs[1]), int(xs[2]))  # type: ignore[arg-type]
    return None


def _round(v: float | None, nd: int = 3) -> float | None:
    return None if v is None else round(v, nd)


def launch_from_ncu(raw: RawLaunch, index: int, gpu: GPUSpec | None = None) -> KernelLaunch:
    m = raw.metrics
    full = raw.info.get("Kernel Name", "") or raw.text.get("launch__kernel_name", "")
    k = KernelLaunch(name=short_name(full) or f"kernel_{index}", id=int(_num(raw.info.get("ID")) or index),
                     full_name=full)
    k.device = raw.text.get("device__attribute_display_name") or (gpu.name if gpu else None)
    k.metrics = dict(m)
    k.duration_us = _round(m.get("gpu__time_duration.sum"))
    k.grid = _dims(raw.info.get("Grid Size"), m, "launch__grid_dim")
    k.block = _dims(raw.info.get("Block Size"), m, "launch__block_dim")
    if m.get("launch__registers_per_thread") is not None:
        k.registers_per_thread = int(m["launch__registers_per_thread"])
    static, dynamic = m.get("launch__shared_mem_per_block_static"), m.get("launch__shared_mem_per_block_dynamic")
    if static is not None or dynamic is not None:
        k.shared_bytes_per_block = int((static or 0) + (dynamic or 0))
    k.sm_count = int(m["launch__sm_count"]) if m.get("launch__sm_count") else None
    waves = m.get("launch__waves_per_multiprocessor")
    k.waves_per_sm = None if waves is None else round(waves, 2)   # as ncu prints it

    occ: dict = {}
    if m.get("sm__maximum_warps_per_active_cycle_pct") is not None:
        occ["theoretical_pct"] = _round(m["sm__maximum_warps_per_active_cycle_pct"], 2)
    if m.get("sm__warps_active.avg.pct_of_peak_sustained_active") is not None:
        occ["achieved_pct"] = _round(m["sm__warps_active.avg.pct_of_peak_sustained_active"], 2)
    limits = {name: int(m[key]) for key, name in _LIMITS.items() if m.get(key) is not None}
    if limits:
        low = min(limits.values())
        occ["limits"] = limits           # blocks per SM each resource allows
        occ["blocks_per_sm"] = low
        # warps and blocks bind only when nothing scarcer does; ties name the first in this order
        order = ["registers", "shared_memory", "barriers", "warps", "blocks"]
        occ["limiter"] = next(n for n in order if limits.get(n) == low)
    k.occupancy = occ

    tp: dict = {}
    for key, name in (("sm__throughput.avg.pct_of_peak_sustained_elapsed", "sm_pct"),
                      ("gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed", "memory_pct"),
                      ("gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed", "dram_pct"),
                      ("l1tex__throughput.avg.pct_of_peak_sustained_active", "l1_pct"),
                      ("lts__throughput.avg.pct_of_peak_sustained_elapsed", "l2_pct")):
        if m.get(key) is not None:
            tp[name] = _round(m[key], 2)
    k.throughput = tp

    rd, wr = m.get("dram__bytes_read.sum"), m.get("dram__bytes_write.sum")
    if rd is not None or wr is not None:
        k.dram_bytes = (rd or 0.0) + (wr or 0.0)
    if m.get("dram__bytes.sum.per_second") is not None:
        k.dram_bandwidth_gbps = _round(m["dram__bytes.sum.per_second"] / 1e9, 2)
    elif k.dram_bytes is not None and k.duration_us:
        k.dram_bandwidth_gbps = _round(k.dram_bytes / (k.duration_us * 1e-6) / 1e9, 2)
    if gpu is not None and "memory_bandwidth_tbps" in gpu.facts:
        k.peak_bandwidth_gbps = round(gpu.memory_bandwidth_tbps * 1000, 1)
    k.l1_hit_pct = _round(m.get("l1tex__t_sector_hit_rate.pct"), 2)
    k.l2_hit_pct = _round(m.get("lts__t_sector_hit_rate.pct"), 2)
    k.tensor_pipe_pct = _round(m.get("sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed"), 2)
    k.stalls = stalls(m)
    k.pipes = pipes(m)
    return k


def pipes(m: dict[str, float]) -> dict[str, float]:
    """Each pipe's issue rate as a share of its peak while the SM was active (percent), busiest first: the
    pipes themselves ("alu", "fma", "xu", "lsu", "adu", "tensor_op_hmma", ...), not their breakdowns by type
    (``fma_type_fp16``) or predicate (``cbu_pred_on_any``); pipes that issued nothing are left out."""
    out = {}
    for key, v in m.items():
        if key.startswith(_PIPE_PREFIX) and key.endswith(_PIPE_SUFFIX) and v:
            name = key[len(_PIPE_PREFIX):-len(_PIPE_SUFFIX)]
            if "_type_" not in name and "_pred_" not in name and round(v, 2) > 0:
                out[name] = round(v, 2)
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))


def stalls(m: dict[str, float]) -> list[Stall]:
    """Each warp state's share of the warps' cycles (ncu's per-issue ratios normalised), stalls only,
    largest first. ``selected`` (issuing) counts in the whole but is not a stall."""
    ratios = {key[len(STALL_PREFIX):-len(_STALL_SUFFIX)]: v for key, v in m.items()
              if key.startswith(STALL_PREFIX) and key.endswith(_STALL_SUFFIX) and v is not None}
    whole = sum(ratios.values())
    if whole <= 0:
        return []
    out = [Stall(r, round(100 * v / whole, 2)) for r, v in ratios.items() if r != "selected" and 100 * v / whole >= 0.01]
    return sorted(out, key=lambda s: -s.pct)


def _num(text: str | None) -> float | None:
    try:
        return float(str(text).replace(",", ""))
    except (TypeError, ValueError):
        return None
