"""Theoretical occupancy: how many warps (NVIDIA) or waves (AMD) of a kernel fit at once, and what limits them.

NVIDIA follows the CUDA occupancy calculator (``cuda_occupancy.h``, the rules behind
``cudaOccupancyMaxActiveBlocksPerMultiprocessor`` and Nsight Compute's Occupancy section); AMD follows the
LLVM AMDGPU backend (``GCNSubtarget::computeOccupancy``), whose number the compiler prints as
``; Occupancy: N``. Both are pure functions of an ``ArchSpec`` and a kernel's resources.

Limiter ties. Each limit is a count (blocks per SM for NVIDIA, waves per SIMD for AMD); the limiter is the
resource whose limit equals the achieved count, preferring, on a tie, the order
``registers, shared_memory, warps, blocks`` (NVIDIA) and ``vgpr, sgpr, lds, waves`` (AMD). When occupancy is
full the limiter is ``warps``/``waves`` (the SM's slots are all used: nothing else binds). A resource the
kernel does not use (0 registers, 0 SGPRs, 0 LDS) is never named as the limiter.
"""

from __future__ import annotations

from math import ceil
from typing import Literal

from kernelpilot.arch.registry import ArchSpec
from kernelpilot.arch.model import Occupancy

__all__ = [
    "nvidia_occupancy",
    "amd_occupancy",
    "amd_compiler_occupancy",
    "nvidia_register_block_limit",
    "nvidia_shared_block_limit",
    "nvidia_driver_carveout",
    "amd_vgpr_wave_limit",
    "amd_sgpr_wave_limit",
    "SGPR_RULES",
]

_NV_ORDER = ("registers", "shared_memory", "warps", "blocks")
_AMD_ORDER = ("vgpr", "sgpr", "lds", "waves")


def _n(count: int, noun: str) -> str:
    return f"{count} {noun}" + ("" if count == 1 else "s")


def _round_up(x: int, unit: int) -> int:
    return -(-x // unit) * unit


def _require_vendor(spec: ArchSpec, vendor: str) -> None:
    if spec.vendor != vendor:
        raise ValueError(f"{spec.name} is a {spec.vendor} arch; this calculator is for {vendor}")


def _nonneg(**values: int) -> None:
    for k, v in values.items():
        if v < 0:
            raise ValueError(f"{k} must be >= 0, got {v}")


def _pick_limiter(limits: dict[str, int], achieved: int, full: bool, unused: set[str], order: tuple[str, ...],
                  full_name: str) -> str:
    if full:
        return full_name
    for name in order:
        if name not in unused and limits[name] == achieved:
            return name
    return full_name  # unreachable with consistent limits; keeps the type total


# --------------------------------------------------------------------------------------------- NVIDIA


def nvidia_register_block_limit(spec: ArchSpec, registers: int, warps_per_block: int) -> int | None:
    """Blocks per SM that the register file allows; None when the kernel uses no registers (no limit).

    cuda_occupancy.h (cudaOccMaxBlocksPerSMRegsLimit): registers are allocated per warp,
    ``regs_per_warp = roundup(registers * 32, 256)``; each of the 4 schedulers owns a quarter of the file, so
    ``warps_per_scheduler = floor(65536 / 4 / regs_per_warp)`` and
    ``blocks = floor(warps_per_scheduler * 4 / warps_per_block)``. A block whose warps, rounded up to a
    multiple of 4, need more than 64K registers cannot launch (0).
    """
    if registers == 0:
        return None
    per_warp = _round_up(registers * spec.warp_size, spec.register_alloc_unit)
    parts = spec.schedulers_per_sm
    if (per_warp * _round_up(warps_per_block, parts) > spec.max_registers_per_block
            or per_warp * warps_per_block > spec.max_registers_per_block):
        return 0
    warps_per_part = (spec.registers_per_sm // parts) // per_warp
    return warps_per_part * parts // warps_per_block


def _carveout_at_least(spec: ArchSpec, nbytes: int) -> int | None:
    for kb in spec.shared_carveouts_kb:
        if kb * 1024 >= nbytes:
            return kb * 1024
    return None


def nvidia_shared_block_limit(spec: ArchSpec, shared_per_block: int, config_bytes: int | None = None) -> int:
    """Blocks per SM that shared memory allows, for ``shared_per_block`` = static + dynamic bytes.

    cuda_occupancy.h (cudaOccMaxBlocksPerSMSmemLimit): each block allocates
    ``roundup(static + dynamic + 1 KB driver reserve, 128)`` bytes; a block over the opt-in maximum
    (plus the reserve) cannot launch (0). The SM's capacity is ``config_bytes`` (the carveout Nsight Compute
    reports as "Shared Memory Configuration Size") when given, else the largest carveout, as for
    ``cudaOccupancyMaxActiveBlocksPerMultiprocessor`` with the default carveout preference. A given carveout
    smaller than one block is raised to the smallest carveout that fits it, as the driver does.
    """
    reserve = spec.reserved_shared_per_block_bytes
    alloc = _round_up(shared_per_block + reserve, spec.shared_alloc_unit_bytes)
    if alloc > spec.shared_memory_per_block_optin_bytes + reserve:
        return 0
    capacity = spec.shared_memory_per_sm_bytes if config_bytes is None else config_bytes
    if capacity < alloc:
        capacity = _carveout_at_least(spec, alloc) or spec.shared_memory_per_sm_bytes
    return capacity // alloc


def nvidia_occupancy(
    spec: ArchSpec,
    *,
    registers: int,
    shared_bytes: int,
    block_size: int,
    dynamic_shared_bytes: int = 0,
    shared_config_bytes: int | Literal["driver"] | None = None,
) -> Occupancy:
    """Theoretical occupancy of one kernel launch on an NVIDIA SM, in warps per SM.

    ``registers`` per thread (ptxas ``Used N registers``), ``shared_bytes`` static shared memory per block,
    ``dynamic_shared_bytes`` the launch's dynamic shared memory, ``block_size`` threads per block (warps per
    block = ceil(block_size / 32)). ``shared_config_bytes`` pins the SM's shared-memory carveout: a size in
    bytes (Nsight Compute's "Shared Memory Configuration Size"), or "driver" for the carveout the driver is
    likely to pick (``nvidia_driver_carveout``), both only to reproduce Nsight Compute's "Block Limit Shared
    Mem"; by default the largest carveout, as ``cudaOccupancyMaxActiveBlocksPerMultiprocessor`` assumes. The
    occupancy itself does not depend on it (the driver never picks a carveout that lowers occupancy).

    Blocks per SM = min(limit_registers, limit_shared_memory, limit_warps = floor(max warps per SM / warps
    per block), limit_blocks = max blocks per SM); active warps = blocks x warps per block; percent = active /
    max warps per SM x 100. ``limits`` holds each resource's blocks per SM; a resource the kernel does not use
    (0 registers) reports the SM's block limit. Source: cuda_occupancy.h (CUDA occupancy calculator),
    checked against Nsight Compute on an H200 (tests/test_arch.py).
    """
    _require_vendor(spec, "nvidia")
    _nonneg(registers=registers, shared_bytes=shared_bytes, dynamic_shared_bytes=dynamic_shared_bytes)
    if not 1 <= block_size <= spec.max_threads_per_block:
        raise ValueError(f"block_size must be 1..{spec.max_threads_per_block} on {spec.name}, got {block_size}")
    if registers > spec.max_registers_per_thread:
        raise ValueError(f"{spec.name} allows at most {spec.max_registers_per_thread} registers per thread, "
                         f"got {registers}")
    carveouts = [kb * 1024 for kb in spec.shared_carveouts_kb]
    if shared_config_bytes is not None and shared_config_bytes != "driver" and shared_config_bytes not in carveouts:
        raise ValueError(f"shared_config_bytes must be 'driver' or one of {carveouts} on {spec.name}, "
                         f"got {shared_config_bytes!r}")

    wpb = ceil(block_size / spec.warp_size)
    shared = shared_bytes + dynamic_shared_bytes
    config = _driver_carveout(spec, registers, shared, wpb) if shared_config_bytes == "driver" else shared_config_bytes
    limits, unused = _nvidia_limits(spec, registers, shared, wpb, config)
    blocks = min(limits.values())
    active = blocks * wpb
    maximum = spec.max_warps_per_sm
    limiter = _pick_limiter(limits, blocks, active == maximum, unused, _NV_ORDER, "warps")
    return Occupancy(
        unit="warps_per_sm",
        active=active,
        max=maximum,
        percent=round(100.0 * active / maximum, 2),
        limiter=limiter,
        block_size=block_size,
        limits=limits,
        # Advice assumes the driver may take any carveout, as it does when a launch needs more.
        next_step=_nvidia_next_step(spec, limiter, limits, blocks, wpb, registers, shared, None),
    )


def _nvidia_limits(spec: ArchSpec, registers: int, shared: int, wpb: int,
                   config: int | None) -> tuple[dict[str, int], set[str]]:
    """Blocks per SM each resource allows, and the resources the kernel does not use."""
    reg_limit = nvidia_register_block_limit(spec, registers, wpb)
    limits = {
        "registers": spec.max_blocks_per_sm if reg_limit is None else reg_limit,
        "shared_memory": nvidia_shared_block_limit(spec, shared, config),
        "warps": spec.max_warps_per_sm // wpb,
        "blocks": spec.max_blocks_per_sm,
    }
    return limits, ({"registers"} if reg_limit is None else set())


def nvidia_driver_carveout(spec: ArchSpec, *, registers: int, shared_bytes: int, block_size: int,
                           dynamic_shared_bytes: int = 0) -> int:
    """The shared-memory carveout (bytes) the CUDA driver is likely to configure for a launch.

    Inferred, not documented: the smallest supported carveout that holds as many blocks as the other limits
    (registers, warps, blocks per SM) allow, and at least the arch's ``driver_min_carveout_kb`` where the data
    file has one (32 KB on sm_90). This reproduces "Shared Memory Configuration Size" of the H200 launches in
    tests/test_arch.py (32, 32, 32, 132 and 196 KB) and of every launch that uses shared memory in
    tests/fixtures/ncu_occupancy, but not of a 1024-thread block with no shared memory there, for which the
    driver chose 8 KB: for kernels without shared memory the choice is not modelled exactly. It never
    changes the occupancy, only ncu's "Block Limit Shared Mem" of a kernel that shared memory does not limit.
    """
    _require_vendor(spec, "nvidia")
    return _driver_carveout(spec, registers, shared_bytes + dynamic_shared_bytes, ceil(block_size / spec.warp_size))


def _driver_carveout(spec: ArchSpec, registers: int, shared: int, wpb: int) -> int:
    reg_limit = nvidia_register_block_limit(spec, registers, wpb)
    blocks = min(spec.max_warps_per_sm // wpb, spec.max_blocks_per_sm,
                 spec.max_blocks_per_sm if reg_limit is None else reg_limit)
    alloc = _round_up(shared + spec.reserved_shared_per_block_bytes, spec.shared_alloc_unit_bytes)
    floor = spec.facts["driver_min_carveout_kb"].value * 1024 if "driver_min_carveout_kb" in spec.facts else 0
    need = max(max(blocks, 1) * alloc, floor)
    return _carveout_at_least(spec, need) or spec.shared_memory_per_sm_bytes


def _nvidia_next_step(spec: ArchSpec, limiter: str, limits: dict[str, int], blocks: int, wpb: int,
                      registers: int, shared: int, config: int | None) -> str | None:
    """What would raise occupancy one step, found by search over the same rules (None when full)."""
    if blocks * wpb == spec.max_warps_per_sm:
        return None
    others = min(v for k, v in limits.items() if k != limiter)
    if others > blocks and limiter == "registers":
        for r in range(min(registers - 1, spec.max_registers_per_thread), 0, -1):
            got = nvidia_register_block_limit(spec, r, wpb) or 0
            if got > blocks:
                new = min(got, others)
                return (f"use {r} registers per thread or fewer to fit {_n(new, 'block')} ({new * wpb} warps) per SM"
                        f" (now {_n(blocks, 'block')}, {blocks * wpb} warps)")
    if others > blocks and limiter == "shared_memory":
        capacity = spec.shared_memory_per_sm_bytes if config is None else config
        fit = capacity // (blocks + 1) // spec.shared_alloc_unit_bytes * spec.shared_alloc_unit_bytes
        most = fit - spec.reserved_shared_per_block_bytes
        if most >= 0:
            new = min(nvidia_shared_block_limit(spec, most, config), others)
            return (f"use {most} bytes of shared memory per block (static + dynamic) or fewer to fit "
                    f"{_n(new, 'block')} ({new * wpb} warps) per SM (now {shared} bytes, {_n(blocks, 'block')})")
    tied = [k for k in _NV_ORDER if k != limiter and limits[k] == blocks]
    prefix = (f"{limiter} and {', '.join(tied)} both limit this launch to {blocks} blocks per SM, so changing "
              f"one alone gains nothing; " if tied else "")
    size, warps = _nvidia_better_block_size(spec, registers, shared, config, wpb)
    if size is not None:
        return (f"{prefix}a block of {size} threads would fit {warps} warps per SM "
                f"({100.0 * warps / spec.max_warps_per_sm:.4g}%, now {blocks * wpb})")
    return prefix.rstrip("; ") or None


def _nvidia_better_block_size(spec: ArchSpec, registers: int, shared: int, config: int | None,
                              wpb: int) -> tuple[int | None, int]:
    """The block size (a multiple of the warp size) closest to the current one that fits the most warps per
    SM with the same registers and shared memory, if that is more than now."""
    best: tuple[int, int, int] | None = None  # (-warps, distance, size)
    now = 0
    for w in range(1, spec.max_threads_per_block // spec.warp_size + 1):
        limits, _ = _nvidia_limits(spec, registers, shared, w, config)
        warps = min(limits.values()) * w
        if w == wpb:
            now = warps
        key = (-warps, abs(w - wpb), w * spec.warp_size)
        best = key if best is None or key < best else best
    if best is None or -best[0] <= now:
        return None, now
    return best[2], -best[0]


# ------------------------------------------------------------------------------------------------ AMD


def amd_vgpr_wave_limit(spec: ArchSpec, total_vgprs: int) -> int:
    """Waves per SIMD the unified VGPR file allows for ``total_vgprs`` (VGPRs + AGPRs as allocated).

    LLVM IsaInfo::getNumWavesPerEUWithNumVGPRs: below one granule, the maximum; else
    ``clamp(512 / roundup(total, 8), 1, 8)``.
    """
    granule = spec.vgpr_alloc_granule
    if total_vgprs < granule:
        return spec.max_waves_per_simd
    return min(max(spec.vgprs_per_simd_lane // _round_up(total_vgprs, granule), 1), spec.max_waves_per_simd)


SgprRule = Literal["table", "budget", "budget-notrap"]
SGPR_RULES: tuple[str, ...] = ("table", "budget", "budget-notrap")
_TRAP_SGPRS = 16  # LLVM TRAP_NUM_SGPRS: SGPRs the trap handler reserves per wave on amdhsa


def amd_sgpr_wave_limit(spec: ArchSpec, sgpr: int, rule: SgprRule = "table") -> int:
    """Waves per SIMD that ``sgpr`` SGPRs (the compiler's NumSgprs, VCC and friends included) allow.

    LLVM changed this rule, so ``rule`` picks the compiler generation to agree with:
      "table"          IsaInfo::getOccupancyWithNumSGPRs as LLVM had it for years (the released compilers
                       of ROCm and distributions we know of): <=80 -> 10, <=88 -> 9, <=100 -> 8, else 7.
      "budget"         LLVM main as of 2026: the inverse of getMaxNumSGPRs,
                       800 / (roundup(sgpr, 16) + 16 trap-handler SGPRs); amdhsa code (HIP, Triton)
                       reserves the trap SGPRs (llvm/test/CodeGen/AMDGPU/occupancy-levels.ll, GFX950TRAP).
      "budget-notrap"  the same without the trap reserve (non-amdhsa targets).
    Each is clamped to 1..max waves per SIMD (8 on CDNA).
    """
    if rule == "table":
        waves = 10 if sgpr <= 80 else 9 if sgpr <= 88 else 8 if sgpr <= 100 else 7
    elif rule in ("budget", "budget-notrap"):
        per_wave = _round_up(max(sgpr, 1), spec.sgpr_alloc_granule) + (_TRAP_SGPRS if rule == "budget" else 0)
        waves = max(spec.sgprs_per_simd // per_wave, 1)
    else:
        raise ValueError(f"sgpr_rule must be one of {SGPR_RULES}, got {rule!r}")
    return min(waves, spec.max_waves_per_simd)


def _amd_total_vgprs(spec: ArchSpec, vgpr: int, agpr: int, accum_offset: int | None) -> int:
    """Registers the unified file holds per lane. LLVM getTotalNumVGPRs(has90AInsts, AGPR, VGPR):
    ``alignTo(VGPR, 4) + AGPR`` when AGPRs are used (AGPRs start at ACCUM_OFFSET), else VGPR."""
    if agpr == 0:
        return vgpr
    start = _round_up(vgpr, spec.accum_offset_granule) if accum_offset is None else accum_offset
    return start + agpr


def _amd_max_workgroups(spec: ArchSpec, waves_per_wg: int) -> int:
    """LLVM IsaInfo::getMaxWorkGroupsPerCU: all wave slots for single-wave groups, else min(slots / N, 16)."""
    slots = spec.max_waves_per_simd * spec.simds_per_cu
    if waves_per_wg == 1:
        return slots
    return min(slots // waves_per_wg, spec.max_workgroups_per_cu)


def _waves_per_simd(spec: ArchSpec, workgroups: int, waves_per_wg: int) -> int:
    """Workgroups per CU to waves per SIMD the way LLVM counts them: ceil(waves per CU / 4), clamped 1..8."""
    return min(max(ceil(workgroups * waves_per_wg / spec.simds_per_cu), 1), spec.max_waves_per_simd)


def _validate_amd(spec: ArchSpec, vgpr: int, agpr: int, sgpr: int, lds_bytes: int, accum_offset: int | None,
                  sgpr_rule: str) -> int:
    _require_vendor(spec, "amd")
    if sgpr_rule not in SGPR_RULES:
        raise ValueError(f"sgpr_rule must be one of {SGPR_RULES}, got {sgpr_rule!r}")
    _nonneg(vgpr=vgpr, agpr=agpr, sgpr=sgpr, lds_bytes=lds_bytes)
    if vgpr > spec.max_arch_vgprs:
        raise ValueError(f"{spec.name} has {spec.max_arch_vgprs} architectural VGPRs per wave, got vgpr={vgpr}")
    if agpr > spec.max_agprs:
        raise ValueError(f"{spec.name} has {spec.max_agprs} AGPRs per wave, got agpr={agpr}")
    if accum_offset is not None and (accum_offset % spec.accum_offset_granule or accum_offset < vgpr):
        raise ValueError(f"accum_offset must be a multiple of {spec.accum_offset_granule} and >= vgpr, "
                         f"got {accum_offset}")
    if lds_bytes > spec.max_lds_per_workgroup_bytes:
        raise ValueError(f"{spec.name} allows at most {spec.max_lds_per_workgroup_bytes} bytes of LDS per workgroup, "
                         f"got {lds_bytes}")
    total = _amd_total_vgprs(spec, vgpr, agpr, accum_offset)
    if total > spec.max_vgprs_per_wave:
        raise ValueError(f"{spec.name} has {spec.max_vgprs_per_wave} VGPRs+AGPRs per wave, got {total}")
    return total


def amd_occupancy(
    spec: ArchSpec,
    *,
    vgpr: int,
    agpr: int = 0,
    sgpr: int = 0,
    lds_bytes: int = 0,
    block_size: int,
    accum_offset: int | None = None,
    sgpr_rule: SgprRule = "table",
) -> Occupancy:
    """Theoretical occupancy of one launch on a CDNA compute unit, in waves per SIMD (at most 8).

    ``vgpr``/``agpr``/``sgpr`` as the compiler reports them (``; NumVgprs``, ``; NumAgprs``, ``; NumSgprs``,
    or the code object's ``.vgpr_count``...), ``lds_bytes`` per workgroup (static + dynamic), ``block_size``
    threads per workgroup, ``accum_offset`` (``; AccumOffset``) where known.

    Limits, each in waves per SIMD (LLVM GCNSubtarget::computeOccupancy with the workgroup size fixed at
    ``block_size``):
      vgpr:  total = roundup(vgpr, 4) + agpr (or accum_offset + agpr; vgpr alone without AGPRs);
             clamp(512 / roundup(total, 8), 1, 8)                      (getNumWavesPerEUWithNumVGPRs)
      sgpr:  per ``sgpr_rule`` (see amd_sgpr_wave_limit): with the default "table" of released LLVMs it
             binds only above 100 SGPRs (7 waves)                      (getOccupancyWithNumSGPRs)
      lds:   workgroups = floor(LDS per CU / lds_bytes); ceil(workgroups x waves per workgroup / 4)
      waves: workgroups = 32 wave slots for 1-wave groups, else min(32 / waves per group, 16 barriers);
             ceil(workgroups x waves per workgroup / 4)                (getOccupancyWithWorkGroupSizes)
    Active = min of the four; LLVM rounds waves per CU up when spreading them over the 4 SIMDs, so a launch
    of 3 one-wave workgroups counts as 1 wave per SIMD, as the compiler's ``; Occupancy:`` does.
    """
    total = _validate_amd(spec, vgpr, agpr, sgpr, lds_bytes, accum_offset, sgpr_rule)
    if not 1 <= block_size <= spec.max_threads_per_block:
        raise ValueError(f"block_size must be 1..{spec.max_threads_per_block} on {spec.name}, got {block_size}")
    wpw = ceil(block_size / spec.warp_size)
    limits, unused = _amd_limits(spec, total, sgpr, lds_bytes, wpw, sgpr_rule)
    active = min(limits.values())
    maximum = spec.max_waves_per_simd
    limiter = _pick_limiter(limits, active, active == maximum, unused, _AMD_ORDER, "waves")
    return Occupancy(
        unit="waves_per_simd",
        active=active,
        max=maximum,
        percent=round(100.0 * active / maximum, 2),
        limiter=limiter,
        block_size=block_size,
        limits=limits,
        next_step=_amd_next_step(spec, limiter, limits, active, wpw, total, sgpr, lds_bytes, sgpr_rule),
    )


def _amd_limits(spec: ArchSpec, total: int, sgpr: int, lds_bytes: int, wpw: int,
                sgpr_rule: SgprRule) -> tuple[dict[str, int], set[str]]:
    """Waves per SIMD each resource allows, and the resources the kernel does not use."""
    wg_slots = _amd_max_workgroups(spec, wpw)
    limits = {
        "vgpr": amd_vgpr_wave_limit(spec, total),
        "sgpr": amd_sgpr_wave_limit(spec, sgpr, sgpr_rule) if sgpr else spec.max_waves_per_simd,
        "lds": (_waves_per_simd(spec, spec.lds_per_cu_bytes // lds_bytes, wpw) if lds_bytes
                else spec.max_waves_per_simd),
        "waves": _waves_per_simd(spec, wg_slots, wpw),
    }
    return limits, {k for k, used in (("sgpr", sgpr), ("lds", lds_bytes)) if not used}


def _amd_next_step(spec: ArchSpec, limiter: str, limits: dict[str, int], active: int, wpw: int, total: int,
                   sgpr: int, lds_bytes: int, sgpr_rule: SgprRule) -> str | None:
    """What would raise occupancy one step, found by search over the same rules (None when full)."""
    if active == spec.max_waves_per_simd:
        return None
    others = min(v for k, v in limits.items() if k != limiter)
    if others > active and limiter == "vgpr":
        most = spec.vgprs_per_simd_lane // (active + 1) // spec.vgpr_alloc_granule * spec.vgpr_alloc_granule
        new = min(amd_vgpr_wave_limit(spec, most), others)
        return (f"use {most} VGPRs in total (VGPRs + AGPRs) or fewer to reach {new} waves per SIMD "
                f"(now {total}, {active} waves)")
    if others > active and limiter == "sgpr":
        # The wave limit changes only below what a SIMD holds: an absurd count (a corrupted file) starts there.
        for fewer in range(min(sgpr - 1, spec.sgprs_per_simd), 0, -1):
            waves = amd_sgpr_wave_limit(spec, fewer, sgpr_rule)
            if waves > active:
                return (f"use {fewer} SGPRs or fewer (NumSgprs: VCC, flat_scratch and XNACK_MASK included) to "
                        f"reach {min(waves, others)} waves per SIMD (now {sgpr}, {active} waves)")
    if others > active and limiter == "lds":
        wg_lds = spec.lds_per_cu_bytes // lds_bytes
        for wgs in range(wg_lds + 1, _amd_max_workgroups(spec, wpw) + 1):
            waves = _waves_per_simd(spec, wgs, wpw)
            if waves > active:
                return (f"use {spec.lds_per_cu_bytes // wgs} bytes of LDS per workgroup or fewer to fit {wgs} "
                        f"workgroups per CU ({min(waves, others)} waves per SIMD; now {lds_bytes} bytes, "
                        f"{active} waves)")
    tied = [k for k in _AMD_ORDER if k != limiter and limits[k] == active]
    prefix = (f"{limiter} and {', '.join(tied)} both limit this kernel to {active} waves per SIMD, so changing "
              f"one alone gains nothing; " if tied else "")
    # Prefer the most waves, then groups that fill the CU's wave slots exactly (LLVM rounds partial fills
    # up), then the size nearest the current one.
    slots = spec.max_waves_per_simd * spec.simds_per_cu
    ranked = []
    for w in range(1, spec.max_threads_per_block // spec.warp_size + 1):
        limits_w, _ = _amd_limits(spec, total, sgpr, lds_bytes, w, sgpr_rule)
        waves = min(limits_w.values())
        exact = waves * spec.simds_per_cu == min(_amd_max_workgroups(spec, w) * w, slots)
        ranked.append((-waves, not exact, abs(w - wpw), w))
    neg_waves, _, _, best_w = min(ranked)
    best_size, best = (best_w, -neg_waves) if -neg_waves > active else (None, active)
    if best_size is not None:
        return (f"{prefix}a workgroup of {best_size * spec.warp_size} threads would reach {best} waves per SIMD "
                f"(now {active})")
    return prefix.rstrip("; ") or None


def amd_compiler_occupancy(
    spec: ArchSpec,
    *,
    vgpr: int,
    agpr: int = 0,
    sgpr: int = 0,
    lds_bytes: int = 0,
    flat_workgroup_size: tuple[int, int] = (1, 1024),
    accum_offset: int | None = None,
    sgpr_rule: SgprRule = "table",
) -> int:
    """The number the compiler prints as ``; Occupancy: N`` (waves per SIMD).

    Unlike ``amd_occupancy``, which takes the launch's exact workgroup size, LLVM only knows the kernel's
    ``amdgpu-flat-work-group-size`` range (HIP: ``1,N`` from ``__launch_bounds__(N)``, else ``1,1024``) and
    reports the best occupancy over that range: AMDGPUSubtarget::getOccupancyWithWorkGroupSizes(...).second,
    then the minimum with the SGPR and VGPR limits (GCNSubtarget::computeOccupancy).
    """
    total = _validate_amd(spec, vgpr, agpr, sgpr, lds_bytes, accum_offset, sgpr_rule)
    lo, hi = flat_workgroup_size
    if not 1 <= lo <= hi <= spec.max_threads_per_block:
        raise ValueError(f"flat_workgroup_size must satisfy 1 <= min <= max <= {spec.max_threads_per_block}, "
                         f"got {flat_workgroup_size}")
    wg = _llvm_workgroup_occupancy(spec, lds_bytes, lo, hi)[1]
    return min(wg, amd_sgpr_wave_limit(spec, max(sgpr, 1), sgpr_rule), amd_vgpr_wave_limit(spec, max(total, 1)))


def _llvm_workgroup_occupancy(spec: ArchSpec, lds_bytes: int, min_wg: int, max_wg: int) -> tuple[int, int]:
    """(min, max) waves per SIMD over workgroup sizes min_wg..max_wg, as
    AMDGPUSubtarget::getOccupancyWithWorkGroupSizes computes them (LDS granularity ignored, as there)."""
    max_wgs_lds = spec.lds_per_cu_bytes // max(lds_bytes, 1)
    if max_wgs_lds == 0:
        return 1, 1
    wave, eus, per_eu = spec.warp_size, spec.simds_per_cu, spec.max_waves_per_simd

    def props(size: int) -> tuple[int, int, int]:
        wpw = ceil(size / wave)
        wgs = min(_amd_max_workgroups(spec, wpw), max_wgs_lds)
        return wpw, wgs, wpw * wgs

    min_wpw, max_wgs, max_waves = props(min_wg)
    max_wpw, min_wgs, min_waves = props(max_wg)
    if min_waves >= max_waves:
        min_waves, max_waves = max_waves, min_waves
    else:
        slots = per_eu * eus
        # A smaller group than the maximum may reach the same group count with fewer waves.
        floor_waves = ceil(slots / (min_wgs + 1)) * min_wgs
        if min_waves > floor_waves:
            excess_per_wg = (min_waves - floor_waves) // min_wgs
            if excess_per_wg:
                min_waves -= min_wgs * min(excess_per_wg, max_wpw - min_wpw)
        # A larger group than the minimum may reach the same group count with more waves.
        leftover_per_wg = (slots - max_wgs * min_wpw) // max_wgs
        if leftover_per_wg:
            max_waves += max_wgs * min(leftover_per_wg, (max_wg - 1) // wave + 1 - min_wpw)
    return (min(max(min_waves // eus, 1), per_eu), min(max(ceil(max_waves / eus), 1), per_eu))
