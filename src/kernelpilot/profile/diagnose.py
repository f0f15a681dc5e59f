"""What limits a kernel launch, and what to do about it: a bottleneck class with the numbers that decide it,
and diagnoses, each with its evidence and one concrete suggestion, most important first.

Pure functions over ``KernelLaunch`` (and the arch data for the occupancy step). A diagnosis fires only on
metrics the profile holds; thresholds are named constants below.
"""

from __future__ import annotations

import math
from dataclasses import asdict
from typing import Any

from kernelpilot.arch.occupancy import nvidia_occupancy
from kernelpilot.arch.registry import ArchSpec
from kernelpilot.profile.model import AccessSpot, Finding, KernelLaunch, Profile
from kernelpilot.profile.ncu_mix import shares

__all__ = ["classify", "diagnose", "diagnose_profile"]

BUSY_PCT = 60.0            # a unit at this share of its peak or more is what bounds the kernel
TINY_US = 10.0             # shorter launches with every unit under IDLE_PCT are launch-bound
IDLE_PCT = 20.0
ACHIEVED_FRACTION = 0.6    # achieved occupancy below this share of theoretical is reported
LONG_SCOREBOARD_PCT = 40.0
EXCESS_SECTORS = 0.2       # share of global sectors that coalesced access would not need
BANK_CONFLICTS = 0.1       # extra shared-memory wavefronts per wavefront
DRAM_LOW = 0.7             # a DRAM-bound kernel below this share of peak bandwidth
TAIL_IDLE = 0.1            # the last partial wave leaves this share of the launch's SM time idle
HOTSPOT_PCT = 15.0         # one instruction or line holding this share of the warp samples (--source)
PIPE_BUSY_PCT = 60.0       # one execution pipe issuing at this share of its peak or more


def classify(k: KernelLaunch) -> tuple[str | None, dict[str, Any]]:
    """``launch``, ``latency``, ``memory`` or ``compute``, with the numbers that decided it (and, in
    ``docs``, the playbook passage for that class)."""
    bound, ev = _classify(k)
    if bound:
        ev["docs"] = [f"builtin/playbook.md#{bound}-bound"]
    return bound, ev


def _classify(k: KernelLaunch) -> tuple[str | None, dict[str, Any]]:
    sm, mem = k.throughput.get("sm_pct"), k.throughput.get("memory_pct")
    if sm is None or mem is None:
        return None, {}
    ev: dict[str, Any] = {"sm_pct": sm, "memory_pct": mem}
    if k.duration_us is not None:
        ev["duration_us"] = k.duration_us
    if k.waves_per_sm is not None:
        ev["waves_per_sm"] = k.waves_per_sm
    if k.duration_us is not None and k.duration_us < TINY_US and max(sm, mem) < IDLE_PCT:
        ev["rule"] = f"under {TINY_US:g} us with every unit under {IDLE_PCT:g}% of peak"
        return "launch", ev
    if max(sm, mem) < BUSY_PCT:
        ev["rule"] = f"neither compute nor memory reaches {BUSY_PCT:g}% of peak"
        return "latency", ev
    if mem >= sm:
        ev["rule"] = f"memory throughput {mem:g}% of peak, at least compute's {sm:g}%"
        return "memory", ev
    ev["rule"] = f"compute throughput {sm:g}% of peak, above memory's {mem:g}%"
    return "compute", ev


def _amd(k: KernelLaunch) -> bool:
    return k.occupancy.get("unit") == "waves_per_simd"


def _units(k: KernelLaunch) -> str:
    """What the GPU's compute units are called: SMs (NVIDIA) or CUs (AMD)."""
    return "CUs" if _amd(k) else "SMs"


def _under_one_wave(k: KernelLaunch) -> bool:
    """Whether every block of the grid is resident at once (waves per SM measured and below 1)."""
    return k.waves_per_sm is not None and k.waves_per_sm < 1


def _underfill(k: KernelLaunch) -> tuple[float, Finding] | None:
    waves, blocks, sms = k.waves_per_sm, k.blocks, k.sm_count
    if not _under_one_wave(k) or blocks is None or not sms:
        return None
    per_sm = k.occupancy.get("blocks_per_sm")
    full = f"{sms * per_sm:,}" if per_sm else f"{sms}+"
    few = blocks < sms
    units = _units(k)
    title = f"{blocks:,} blocks on {sms} {units}, {waves:g} waves per {units[:-1]}"
    if few:
        title += f": {sms - blocks} {units} get no block"
    return 100.0 * (1 - waves), Finding(
        id="launch.underfill", severity="high" if few or waves < 0.5 else "medium", title=title,
        evidence={"blocks": blocks, "sm_count": sms, "waves_per_sm": waves, "blocks_per_sm_possible": per_sm,
                  "threads_per_block": k.threads_per_block},
        suggestion=f"split the work over more blocks ({full} fill one wave at this occupancy; several waves hide "
                   f"latency better) or use a persistent grid of {full} blocks that loops over the work; while "
                   f"every block is resident at once the slowest warp ends the launch, so a slow path that a few "
                   f"warps take (a fallback on rare inputs) costs the whole launch")


def _tail(k: KernelLaunch) -> tuple[float, Finding] | None:
    waves = k.waves_per_sm
    if waves is None or waves < 1 or waves > 8:
        return None
    whole = math.ceil(waves - 1e-9)
    part = waves - math.floor(waves)
    if part <= 0 or part > 0.5:
        return None
    idle = (1 - part) / whole
    if idle < TAIL_IDLE:
        return None
    per_sm = k.occupancy.get("blocks_per_sm")
    wave_blocks = f"{k.sm_count * per_sm:,}" if k.sm_count and per_sm else "one wave of"
    return 30.0 + 50 * idle, Finding(
        id="launch.tail", severity="medium" if idle >= 0.2 else "low",
        title=f"{waves:g} waves: the last wave keeps {100 * part:.0f}% of the GPU busy, about {100 * idle:.0f}% "
              f"of the launch's SM time idle",
        evidence={"waves_per_sm": waves, "blocks": k.blocks, "blocks_per_wave": per_sm and k.sm_count and
                  per_sm * k.sm_count, "idle_share": round(idle, 3)},
        suggestion=f"make the grid a whole number of waves ({wave_blocks} blocks each), e.g. by changing the "
                   "work per block, or use a persistent grid")


def _achieved(k: KernelLaunch) -> tuple[float, Finding] | None:
    th, ach = k.occupancy.get("theoretical_pct"), k.occupancy.get("achieved_pct")
    if th is None or ach is None or th <= 0 or _under_one_wave(k):
        return None
    if ach >= ACHIEVED_FRACTION * th:
        return None
    return 40.0 + 20 * (1 - ach / th), Finding(
        id="occupancy.achieved-low", severity="medium",
        title=f"achieved occupancy {ach:g}% of a theoretical {th:g}%",
        evidence={"achieved_pct": ach, "theoretical_pct": th, "waves_per_sm": k.waves_per_sm},
        suggestion="warps finish unevenly: balance the work per block (no block much longer than the rest), "
                   "avoid a partial last wave, and check that blocks do not wait at barriers for a few warps")


def _limit(k: KernelLaunch, spec: ArchSpec | None) -> tuple[float, Finding] | None:
    limiter, th = k.occupancy.get("limiter"), k.occupancy.get("theoretical_pct")
    if limiter not in ("registers", "shared_memory") or th is None or th >= 100:
        return None
    if _under_one_wave(k):
        return None     # every block of the grid is resident at once: a higher limit would add no warps
    if k.bound == "compute" or (k.bound == "memory" and (k.throughput.get("dram_pct") or 0) >= 80):
        return None     # busy compute units or DRAM near its peak: more resident warps would not help
    ev: dict[str, Any] = {"theoretical_pct": th, "limiter": limiter, "limits": k.occupancy.get("limits"),
                          "registers_per_thread": k.registers_per_thread,
                          "shared_bytes_per_block": k.shared_bytes_per_block, "threads_per_block": k.threads_per_block}
    step = None
    if spec is not None and not _amd(k) and k.registers_per_thread and k.threads_per_block:
        try:
            occ = nvidia_occupancy(spec, registers=k.registers_per_thread, shared_bytes=k.shared_bytes_per_block or 0,
                                   block_size=k.threads_per_block)
            step = occ.next_step
            ev["calculated_pct"] = occ.percent
        except Exception:
            step = None
    if _amd(k):
        step = k.occupancy.get("next_step")
        what = (f"{k.registers_per_thread} VGPRs per lane" if limiter == "registers"
                else f"{k.shared_bytes_per_block:,} bytes of LDS per workgroup")
    else:
        what = (f"{k.registers_per_thread} registers per thread" if limiter == "registers"
                else f"{k.shared_bytes_per_block:,} bytes of shared memory per block")
    if step:
        suggestion = f"{step}"
    elif limiter == "registers":
        suggestion = ("use fewer VGPRs (__launch_bounds__, amdgpu_waves_per_eu, smaller tiles per lane)" if _amd(k)
                      else "use fewer registers per thread (__launch_bounds__, -maxrregcount, smaller tiles per thread)")
    else:
        suggestion = "use less shared memory per block (smaller tiles, fewer pipeline stages)"
    suggestion += ("; the kernel waits on latency, so more resident warps should hide more of it"
                   if k.bound in ("latency", "memory", "launch") else
                   "; more resident warps hide latency better (no throughput was measured to show the kernel waits)")
    return 70.0 + (100 - th) / 10, Finding(
        id=f"occupancy.{'registers' if limiter == 'registers' else 'shared'}", severity="high" if th <= 25 else "medium",
        title=f"occupancy limited to {th:g}% by {what}", evidence=ev, suggestion=suggestion)


def _long_scoreboard(k: KernelLaunch) -> tuple[float, Finding] | None:
    top = next((s for s in k.stalls if s.reason == "long_scoreboard"), None)
    if top is None or top.pct < LONG_SCOREBOARD_PCT:
        return None
    return 50.0 + top.pct / 10, Finding(
        id="stall.long-scoreboard", severity="high" if top.pct >= 60 else "medium",
        title=f"warps spend {top.pct:g}% of their cycles waiting on global or local memory (long scoreboard)",
        evidence={"long_scoreboard_pct": top.pct, "top_stalls": [(s.reason, s.pct) for s in k.stalls[:3]],
                  "achieved_occupancy_pct": k.occupancy.get("achieved_pct")},
        suggestion="keep more bytes in flight per warp: wider loads (128-bit), several independent loads per "
                   "thread before their first use, "
                   + ("more warps (the grid is under one wave, every block resident: split the work over more "
                      "blocks or threads)" if _under_one_wave(k) else
                      "more resident warps")
                   + "; stage reused data through shared memory (cp.async or TMA)")


def _access_at(spots: list[AccessSpot], ev: dict[str, Any]) -> str:
    """With --source: the instructions the excess comes from, into the evidence (the three with most), and the
    title's words for the first ("; 95% of it at f.cu:16 (LDG.E ...)")."""
    if not spots:
        return ""
    ev["at"] = [asdict(s) for s in spots[:3]]
    top = spots[0]
    return f"; {top.share_pct:g}% of it at {top.line or top.where} ({top.sass})"


def _uncoalesced(k: KernelLaunch) -> tuple[float, Finding] | None:
    m = k.metrics
    excess = m.get("derived__memory_l2_theoretical_sectors_global_excessive")
    sectors = sum(m.get(f"l1tex__t_sectors_pipe_lsu_mem_global_op_{op}.sum") or 0 for op in ("ld", "st"))
    if excess is None or sectors <= 0 or excess / sectors < EXCESS_SECTORS:
        return None
    share = excess / sectors
    ev: dict[str, Any] = {"excessive_sectors": int(excess), "global_sectors": int(sectors),
                          "excess_share": round(share, 3)}
    for op in ("ld", "st"):
        req = m.get(f"l1tex__t_requests_pipe_lsu_mem_global_op_{op}.sum")
        sec = m.get(f"l1tex__t_sectors_pipe_lsu_mem_global_op_{op}.sum")
        if req and sec is not None:
            ev[f"sectors_per_request_{op}"] = round(sec / req, 2)
    at = _access_at(k.uncoalesced_at, ev)
    return 80.0 + 10 * share, Finding(
        id="memory.uncoalesced", severity="high" if share >= 0.5 else "medium",
        title=f"{100 * share:.0f}% of global-memory sectors moved are not needed by coalesced access{at}",
        evidence=ev,
        suggestion="make neighbouring threads of a warp access neighbouring addresses (index the fastest-varying "
                   "dimension by threadIdx.x, or transpose through shared memory), so each request uses whole "
                   "32-byte sectors")


def _bank_conflicts(k: KernelLaunch) -> tuple[float, Finding] | None:
    m = k.metrics
    waves = m.get("l1tex__data_pipe_lsu_wavefronts_mem_shared.sum")
    extra = m.get("derived__memory_l1_wavefronts_shared_excessive")
    if extra is None:
        extra = m.get("l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum")
    if not waves or extra is None or extra / waves < BANK_CONFLICTS:
        return None
    share = extra / waves
    ev: dict[str, Any] = {"extra_wavefronts": int(extra), "shared_wavefronts": int(waves), "share": round(share, 3)}
    at = _access_at(k.bank_conflicts_at, ev)
    return 70.0 + 10 * min(share, 1.0), Finding(
        id="memory.bank-conflicts", severity="high" if share >= 0.5 else "medium",
        title=f"shared-memory bank conflicts: {100 * share:.0f}% of shared-memory wavefronts are extra{at}",
        evidence=ev,
        suggestion="pad shared arrays (e.g. [32][33] instead of [32][32]) or swizzle the index so a warp's "
                   "threads hit 32 different banks")


def _dram_low(k: KernelLaunch) -> tuple[float, Finding] | None:
    dram, mem = k.throughput.get("dram_pct"), k.throughput.get("memory_pct")
    if k.bound != "memory" or dram is None or mem is None or dram < 0.8 * mem:
        return None     # not bound by DRAM (L1 or L2 bound instead)
    bw, peak = k.dram_bandwidth_gbps, k.peak_bandwidth_gbps
    if bw is None or not peak or bw >= DRAM_LOW * peak:
        return None
    return 45.0, Finding(
        id="memory.dram-bandwidth-low", severity="medium",
        title=f"memory-bound at {bw / 1000:.2f} TB/s, {100 * bw / peak:.0f}% of the {peak / 1000:g} TB/s peak",
        evidence={"dram_bandwidth_gbps": bw, "peak_bandwidth_gbps": peak, "dram_pct": dram,
                  "dram_bytes": k.dram_bytes},
        suggestion="raise the bytes in flight: 128-bit loads and stores, more independent accesses per thread, "
                   "enough resident warps; and move fewer bytes (fuse with neighbouring kernels, narrower dtypes)")


# What a hotspot's main stall reason asks for (reasons that say nothing to act on, such as not_selected, are
# left out: the warp was ready and another one issued).
_STALL_ADVICE = {
    "long_scoreboard": "it waits on a global or local load: issue that load earlier (load the next iteration's "
                       "data before working on this one's) or keep more independent loads in flight",
    "short_scoreboard": "it waits on shared memory or a special-function result (MUFU): fewer of those on the "
                        "critical path, or more independent work between them and their use",
    "math_pipe_throttle": "the pipe it needs is saturated: fewer instructions of that kind, or part of the work "
                          "moved to another pipe",
    "mio_throttle": "the shared-memory and special-instruction queue is full: wider accesses, fewer instructions",
    "lg_throttle": "the global and local memory queue is full: wider (vector) accesses, fewer instructions",
    "barrier": "warps wait at a barrier: even out the work between the warps of a block",
    "membar": "warps wait at a memory fence: fewer fences, or weaker ones",
    "wait": "a fixed-latency dependency: more independent instructions between producer and consumer",
    "branch_resolving": "branch targets being resolved: fewer divergent branches",
    "no_instructions": "instruction fetch misses: smaller code (less unrolling)",
    "imc_miss": "a miss in the constant cache (kernel parameters, constants): at a kernel's start every SM "
                "misses on its parameters, which only fewer launches avoid; later on, fewer distinct constants",
}


def _hotspot(k: KernelLaunch) -> tuple[float, Finding] | None:
    for spot in k.hot_lines or k.hotspots:
        if spot.share_pct < HOTSPOT_PCT:
            return None    # hottest first: the rest are cooler
        reason = spot.stalls[0]["reason"] if spot.stalls else None
        if reason in _STALL_ADVICE:
            where = f"{spot.where} {spot.sass}" if spot.sass else spot.where
            # after the structural causes (launch shape, occupancy, access pattern), before the stall it places
            return 60.0 + spot.share_pct / 10, Finding(
                id="stall.hotspot", severity="high" if spot.share_pct >= 30 else "medium",
                title=f"{spot.share_pct:g}% of the warp samples sit at {where} ({reason} "
                      f"{spot.stalls[0]['share_pct']:g}%)",
                evidence={"where": spot.where, "sass": spot.sass, "share_pct": spot.share_pct,
                          "stalls": spot.stalls},
                suggestion=_STALL_ADVICE[reason])
    return None


# What each NVIDIA pipe executes (Nsight Compute's pipeline names), and how to take load off it.
_PIPE_WORK = {
    "alu": ("the ALU pipe (integer and logic instructions other than IMAD and IMUL: adds, shifts, compares, "
            "selects, min/max)", "fewer of those instructions, or work moved to the FMA pipe: a product by 0 or "
                                 "1 (IMAD) where a select picks between a value and 0, IMAD for index arithmetic"),
    "fma": ("the FMA pipe (FP32 add, multiply and multiply-add; IMAD, IMUL)",
            "fewer multiply-adds: hoist loop-invariant math, strength-reduce index arithmetic, or FP16x2 and "
            "tensor cores for the math"),
    "xu": ("the XU pipe (special functions such as exp2, rcp, rsqrt, sin; int/float conversions)",
           "fewer special functions and conversions: take them only of the values kept, reuse them, or compute "
           "part of them with polynomials on the FMA pipe"),
    "lsu": ("the LSU pipe (loads, stores and atomics to L1TEX; shuffles; special-register reads)",
            "fewer memory and shuffle instructions: 128-bit accesses, REDUX for whole-warp reductions"),
    "adu": ("the ADU pipe (branch address divergence, constant loads, block barriers)",
            "fewer divergent branches and barriers"),
    "cbu": ("the CBU pipe (warp convergence, barriers and branches)", "fewer divergent regions and barriers"),
    "fp64": ("the FP64 pipe", "FP32 where the accuracy allows"),
}


def _pipe_busy(k: KernelLaunch) -> tuple[float, Finding] | None:
    if not k.pipes:
        return None
    name, pct = next(iter(k.pipes.items()))     # busiest first
    if pct < PIPE_BUSY_PCT:
        return None
    what, suggestion = _PIPE_WORK.get(name, (f"the {name} pipe", "fewer instructions of that kind, or part of "
                                                                  "the work moved to another pipe"))
    throttle = next((s.pct for s in k.stalls if s.reason == "math_pipe_throttle"), None)
    top = shares(k.opcodes)    # with the report: which instructions the launch executed most
    # in a compute-bound launch the busy pipe is what bounds it: ahead of the access pattern and occupancy
    return (85.0 if k.bound == "compute" else 50.0) + pct / 10, Finding(
        id="compute.pipe-busy", severity="high" if pct >= 80 else "medium",
        title=f"{what} issues at {pct:g}% of its peak" + (f"; warps wait on a busy pipe (math_pipe_throttle) "
                                                          f"{throttle:g}% of their cycles" if throttle else "")
              + ("; most executed: " + ", ".join(f"{op} {v:g}%" for op, v in list(top.items())[:3]) if top else ""),
        evidence={"pipe": name, "pct": pct, "pipes": dict(list(k.pipes.items())[:4]),
                  "math_pipe_throttle_pct": throttle, "top_opcodes_pct": top},
        suggestion=suggestion)


_RULES = (_underfill, _uncoalesced, _bank_conflicts, _long_scoreboard, _dram_low, _achieved, _tail, _hotspot,
          _pipe_busy)


def diagnose(k: KernelLaunch, spec: ArchSpec | None = None) -> KernelLaunch:
    """Set ``k.bound`` and ``k.diagnoses`` (most important first); returns ``k``."""
    k.bound, k.bound_evidence = classify(k)
    found = [r for r in (rule(k) for rule in _RULES) if r is not None]
    lim = _limit(k, spec)
    if lim is not None:
        found.append(lim)
    found.sort(key=lambda pf: -pf[0])
    k.diagnoses = [f for _, f in found]
    # whole-kernel estimates first, then those of a part ("Est. Local Speedup"), each largest first
    k.tool_rules.sort(key=lambda r: (r.local, -(r.est_speedup_pct or 0)))
    return k


def diagnose_profile(p: Profile, spec: ArchSpec | None = None) -> Profile:
    for k in p.kernels:
        diagnose(k, spec)
    return p
