"""Findings: rules over one analyzed kernel. Each names its evidence and one concrete suggestion,
and none fires without evidence in the input.

Rules are plain functions ``rule(ctx) -> list[Finding]`` registered in ``RULES``; ids are stable
(agents and the diff key on them).
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from dataclasses import dataclass
from typing import Callable

from kernelpilot.isa.model import AmdResources, Finding, Instruction, KernelISA, Loop, NvidiaResources, Occupancy

__all__ = ["Context", "RULES", "run_rules"]

_MAX_WHERE = 8


@dataclass
class Context:
    isa: KernelISA
    families: dict[str, int]
    loops: list[Loop]
    loop_depth: list[int]
    occupancy: Occupancy | None
    fams_of: list[tuple[str, ...]]   # families of each instruction, by index

    @property
    def vendor(self) -> str:
        return self.isa.vendor

    def where(self, idx: list[int]) -> list[str]:
        return [self.isa.instructions[i].where() for i in idx[:_MAX_WHERE]]

    def lines(self, idx: list[int]) -> list[int]:
        return sorted({self.isa.instructions[i].line for i in idx if self.isa.instructions[i].line is not None})[:_MAX_WHERE]

    def having(self, family: str) -> list[int]:
        return [i for i, f in enumerate(self.fams_of) if family in f]

    def in_loop(self, idx: list[int]) -> list[int]:
        return [i for i in idx if self.loop_depth[i] > 0]


def _evidence(ctx: Context, idx: list[int], **extra) -> dict:
    ev = dict(extra)
    ev["at"] = ctx.where(idx)
    lines = ctx.lines(idx)
    if lines:
        ev["source_lines"] = lines
    return ev


def _is_gfx9(arch: str) -> bool:
    return arch.startswith("gfx9")


# ------------------------------------------------------------------ AMD cross-lane


# The VALU operations a wave reduction combines with, as they follow the exchanged values.
_COMBINE = re.compile(r"^v_(add|max|min|mul)_(f32|f16|f64|u32|i32)(?:_e\d+)?$")
_SELECT = re.compile(r"^v_(cmp|cndmask)")
_COMBINE_WINDOW = 12


def _combining_op(ctx: Context, idx: list[int]) -> str | None:
    """What the code does with the values it exchanged: for each exchange, the first instruction after it that
    reads its destination register, counted when it is a combining VALU operation (``v_add_f32``) or a
    compare-and-select (``select``: an argmax); the most common, or None when neither is seen."""
    found: Counter[str] = Counter()
    ins = ctx.isa.instructions
    for i in idx:
        dest = ins[i].operands.split(",", 1)[0].strip()
        if not dest:
            continue
        reads = re.compile(rf"(?<![\w\[]){re.escape(dest)}(?![\w:])")
        for j in range(i + 1, min(i + 1 + _COMBINE_WINDOW, len(ins))):
            _, _, sources = ins[j].operands.partition(",")
            if not reads.search(sources):
                continue
            op = ins[j].opcode
            m = _COMBINE.match(op)
            if m:
                found[f"v_{m.group(1)}_{m.group(2)}"] += 1
            elif _SELECT.match(op):
                found["select"] += 1
            break
    return found.most_common(1)[0][0] if found else None


def rule_lds_crosslane(ctx: Context) -> list[Finding]:
    if ctx.vendor != "amd":
        return []
    idx = ctx.having("shared.crosslane")
    if not idx:
        return []
    by = {k: ctx.families.get(f"crosslane.{k}", 0) for k in ("ds_bpermute", "ds_permute", "ds_swizzle")}
    dpp = ctx.families.get("crosslane.dpp", 0)
    loop_idx = ctx.in_loop(idx)
    gfx9 = _is_gfx9(ctx.isa.arch)
    op = _combining_op(ctx, idx)
    if op == "select":
        how = ("move each neighbour's value and index with v_mov_b32_dpp and keep the better pair with "
               "v_cmp/v_cndmask, as the code does now")
    elif op is not None:
        how = f"apply {op} with a DPP modifier ({op}_dpp, or __builtin_amdgcn_update_dpp on int bits, then {op})"
    else:
        how = ("apply the combining operation with a DPP modifier (v_add_f32_dpp for a sum, v_max_f32_dpp for a "
               "maximum)")
    steps = ("quad_perm:[1,0,3,2], then quad_perm:[2,3,0,1] (every lane holds its quad's result); row_shr:4, then "
             "row_shr:8 (lane 15 of each row of 16 holds the row's); ")
    rows = ("row_bcast:15 with row_mask:0xa, then row_bcast:31 with row_mask:0xc (lane 63 holds the wave's), "
            if gfx9 else "then combine the rows with row_share or v_permlane (no row_bcast on this generation), ")
    return [
        Finding(
            id="amd.lds-crosslane",
            severity="high" if loop_idx or sum(by.values()) >= 4 else "medium",
            title=f"cross-lane exchange goes through the LDS crossbar ({', '.join(f'{k} x{v}' for k, v in by.items() if v)})",
            evidence=_evidence(ctx, idx, **{k: v for k, v in by.items() if v}, dpp=dpp, in_loops=len(loop_idx),
                               combines_with=op),
            suggestion=(
                f"Do the wave reduction with DPP instead of __shfl_xor/__shfl_down: {how}, one step each: "
                + steps + rows
                + "and read it with one v_readlane_b32 of lane 63. Each lane's value is counted once in that "
                "order (adding quad_perm and row_shr:1/2 as well would count lanes twice); DPP moves data inside "
                "the VALU with no LDS round trip."
            ),
        )
    ]


# ------------------------------------------------------------------ conversions on a cross-lane path

_AMD_REG = re.compile(r"\b([vs](?:\d+|\[\d+:\d+\]))\b")
_NV_REG = re.compile(r"\b(R\d+)\b")
_NV_CONVERT = ("F2I", "I2F", "F2F", "I2I", "F2IP", "I2FP")
_PATH_WINDOW = 12


def _is_conversion(ins: Instruction, vendor: str) -> bool:
    return ins.opcode.startswith("v_cvt_") if vendor == "amd" else ins.base in _NV_CONVERT


def _dest_and_sources(ins: Instruction, vendor: str) -> tuple[str | None, list[str]]:
    """The register an instruction writes (its first register operand) and those it reads (the others)."""
    regs = (_AMD_REG if vendor == "amd" else _NV_REG).findall(ins.operands)
    return (regs[0], regs[1:]) if regs else (None, [])


def _producer(ins: list[Instruction], i: int, reg: str, vendor: str) -> int | None:
    """The instruction before ``i`` (within the window) that last wrote ``reg``."""
    for j in range(i - 1, max(-1, i - 1 - _PATH_WINDOW), -1):
        if _dest_and_sources(ins[j], vendor)[0] == reg:
            return j
    return None


def _consumer(ins: list[Instruction], i: int, reg: str, vendor: str) -> int | None:
    """The first instruction after ``i`` (within the window) that reads ``reg``."""
    for j in range(i + 1, min(len(ins), i + 1 + _PATH_WINDOW)):
        dest, sources = _dest_and_sources(ins[j], vendor)
        if reg in sources or (dest == reg and ins[j].opcode.startswith(("global_store", "ST", "buffer_store"))):
            return j
        if dest == reg:
            return None
    return None


def rule_crosslane_conversion(ctx: Context) -> list[Finding]:
    """A value converted on its way into or out of a cross-lane exchange (a DPP move, a shuffle, a swizzle, a
    readlane): the usual trace of a float passed to an int-only builtin, whose fraction is then lost."""
    ins, vendor = ctx.isa.instructions, ctx.vendor
    hits: list[int] = []
    ops: Counter[str] = Counter()
    round_trips = 0
    for i in ctx.having("crosslane"):
        x = ins[i]
        if ctx.fams_of[i] and any(f.startswith("crosslane.vote") or f == "crosslane.match" for f in ctx.fams_of[i]):
            continue                      # votes and matches move predicates, not values
        dest, sources = _dest_and_sources(x, vendor)
        before = [j for r in sources[:1] if (j := _producer(ins, i, r, vendor)) is not None
                  and _is_conversion(ins[j], vendor)]
        after = _consumer(ins, i, dest, vendor) if dest else None
        after = after if after is not None and _is_conversion(ins[after], vendor) else None
        itself = _is_conversion(x, vendor)
        if not (before or after is not None or itself):
            continue
        round_trips += bool((before or itself) and (after is not None or itself))
        for j in [*before, i if itself else None, after]:
            if j is not None and j not in hits:
                hits.append(j)
                ops[ins[j].opcode] += 1
    if not hits:
        return []
    builtin = ("__builtin_amdgcn_update_dpp / __builtin_amdgcn_mov_dpp / __builtin_amdgcn_ds_swizzle / "
               "__builtin_amdgcn_ds_bpermute take ints: pass __float_as_int(v) and turn the result back with "
               "__int_as_float()" if vendor == "amd" else
               "a shuffle of an int variable holding a float value converts it: shuffle the float itself, or "
               "its bits (__float_as_int / __int_as_float)")
    return [Finding(
        id="crosslane.conversion",
        severity="high" if round_trips else "medium",
        title=f"values are converted on their way through a cross-lane exchange "
              f"({', '.join(f'{k} x{v}' for k, v in ops.most_common(4))})",
        evidence=_evidence(ctx, sorted(hits), conversions=dict(ops), round_trips=round_trips),
        suggestion=("A conversion next to the exchange changes the values it moves (a float sent as an int loses "
                    f"its fraction): {builtin}. If the conversion is meant (an index turned into a float on "
                    "purpose), nothing needs to change."),
    )]


_READLANE_LANE = re.compile(r",\s*(\d+)\s*$")


def rule_readlane_chain(ctx: Context) -> list[Finding]:
    if ctx.vendor != "amd":
        return []
    idx = ctx.having("crosslane.readlane")
    if len(idx) < 3:
        return []
    # Longest run of readlanes with no branch between them: a serial gather of lanes into SGPRs.
    chains: list[list[int]] = []
    cur: list[int] = []
    last = -10
    for i in idx:
        if cur and (i - last > 24 or any("control.branch" in ctx.fams_of[j] for j in range(last + 1, i))):
            chains.append(cur)
            cur = []
        cur.append(i)
        last = i
    if cur:
        chains.append(cur)
    longest = max(chains, key=len)
    if len(longest) < 3:
        return []
    lanes = []
    for i in longest:
        m = _READLANE_LANE.search(ctx.isa.instructions[i].operands)
        lanes.append(int(m.group(1)) if m else None)
    row_ends = [l for l in lanes if l is not None and l % 16 == 15]
    hint = (
        f"lanes {sorted(set(l for l in lanes if l is not None))} are row ends: "
        if row_ends else ""
    )
    return [
        Finding(
            id="amd.readlane-chain",
            severity="medium",
            title=f"{len(longest)} v_readlane_b32 in a row serialise the wave ({len(idx)} in the kernel)",
            evidence=_evidence(ctx, longest, readlanes_total=len(idx), chain_length=len(longest), lanes=lanes),
            suggestion=(
                hint
                + "broadcast across rows with DPP (row_bcast:15, then row_bcast:31 on GFX9) so the last lane holds "
                "the whole wave's result, then read it with a single v_readlane_b32 (lane 63) instead of one readlane per row."
            ),
        )
    ]


# ------------------------------------------------------------------ spills and local memory


def rule_spills(ctx: Context) -> list[Finding]:
    r = ctx.isa.resources
    if isinstance(r, NvidiaResources):
        st, ld = r.spill_store_bytes or 0, r.spill_load_bytes or 0
        if not (st or ld):
            return []
        idx = ctx.having("local.load") + ctx.having("local.store")
        return [
            Finding(
                id="nvidia.spills",
                severity="high",
                title=f"register spills: {st} bytes stored, {ld} bytes loaded per thread",
                evidence=_evidence(ctx, sorted(idx), spill_store_bytes=st, spill_load_bytes=ld,
                                   registers=r.registers, stack_bytes=r.stack_bytes,
                                   ldl=ctx.families.get("local.load", 0), stl=ctx.families.get("local.store", 0),
                                   in_loops=len(ctx.in_loop(idx))),
                suggestion=(
                    "Spills go to local memory (L1/L2, hundreds of cycles): shrink the live set (smaller per-thread tiles, "
                    "fewer unrolled accumulators), or raise the register cap (__launch_bounds__ with fewer min blocks, "
                    "or drop -maxrregcount) if occupancy allows."
                ),
            )
        ]
    if isinstance(r, AmdResources):
        vs, ss, scratch = r.vgpr_spill or 0, r.sgpr_spill or 0, r.scratch_bytes or 0
        idx = ctx.having("local.load") + ctx.having("local.store")
        if not (vs or ss):
            return []
        in_lanes = not vs and not scratch and not idx
        if in_lanes:
            # The compiler keeps spilled SGPRs in lanes of a VGPR (v_writelane / v_readlane): no memory traffic.
            suggestion = ("The SGPRs spill into VGPR lanes (v_writelane / v_readlane), not to scratch: an extra "
                          "instruction per spill and reload, and a VGPR held. Fewer uniform values live at once "
                          "(loop-invariant addresses and constants recomputed, fewer unrolled uniform branches) "
                          "removes them.")
        else:
            suggestion = ("Spills go to scratch memory: reduce live values (smaller tiles, fewer unrolled "
                          "accumulators), use AGPRs for accumulators on CDNA, or relax "
                          "__launch_bounds__/amdgpu_waves_per_eu so the compiler may use more VGPRs.")
        return [
            Finding(
                id="amd.spills",
                severity="high" if vs else "low" if in_lanes else "medium",
                title=f"register spills: {vs} VGPRs, {ss} SGPRs spilled; {scratch} bytes scratch per lane"
                      + (" (the SGPRs into VGPR lanes)" if in_lanes else ""),
                evidence=_evidence(ctx, sorted(idx), vgpr_spill=vs, sgpr_spill=ss, scratch_bytes=scratch,
                                   vgpr=r.vgpr, agpr=r.agpr, scratch_ops=len(idx)),
                suggestion=suggestion,
            )
        ]
    return []


def rule_local_memory(ctx: Context) -> list[Finding]:
    r = ctx.isa.resources
    if not isinstance(r, NvidiaResources):
        return []
    if r.spill_store_bytes or r.spill_load_bytes:
        return []  # reported as spills
    idx = sorted(ctx.having("local.load") + ctx.having("local.store"))
    if not idx and not (r.local_bytes or r.stack_bytes):
        return []
    if not idx:
        return []
    return [
        Finding(
            id="nvidia.local-memory",
            severity="medium",
            title=f"local memory without spills: {len(idx)} LDL/STL, {r.stack_bytes or 0} bytes stack frame",
            evidence=_evidence(ctx, idx, stack_bytes=r.stack_bytes, local_bytes=r.local_bytes,
                               ldl=ctx.families.get("local.load", 0), stl=ctx.families.get("local.store", 0)),
            suggestion=(
                "A per-thread array indexed with a runtime value lives in local memory: index it only with "
                "compile-time constants (fully unrolled loops), or move it to shared memory or registers explicitly."
            ),
        )
    ]


# ------------------------------------------------------------------ occupancy


_UNIT = {"warps_per_sm": "warps per SM", "waves_per_simd": "waves per SIMD"}


def rule_occupancy_limited(ctx: Context) -> list[Finding]:
    occ = ctx.occupancy
    if occ is None or occ.active >= occ.max:
        return []
    kind = {"registers": "registers", "vgpr": "registers", "sgpr": "registers",
            "shared_memory": "shared", "lds": "shared"}.get(occ.limiter)
    if kind is None:
        return []
    pct = occ.percent
    sev = "high" if pct < 25 else "medium" if pct < 50 else "low"
    r = ctx.isa.resources
    if isinstance(r, NvidiaResources):
        used = {"registers": r.registers, "shared_bytes": r.shared_bytes}
    else:
        used = {"vgpr": r.vgpr, "agpr": r.agpr, "sgpr": r.sgpr, "lds_bytes": r.lds_bytes}
    what = "registers" if kind == "registers" else ("shared memory" if ctx.vendor == "nvidia" else "LDS")
    return [
        Finding(
            id=f"occupancy.{kind}",
            severity=sev,
            title=f"occupancy limited by {what}: {occ.active}/{occ.max} {_UNIT[occ.unit]} ({pct:.0f}%)",
            evidence={"limiter": occ.limiter, "active": occ.active, "max": occ.max, "percent": round(pct, 1),
                      "block_size": occ.block_size, "limits": occ.limits,
                      **{k: v for k, v in used.items() if v is not None}},
            suggestion=(occ.next_step + "." if occ.next_step and not occ.next_step.endswith(".") else occ.next_step)
            or f"Reduce {what} per {'thread' if kind == 'registers' else 'block'} to fit more {'warps' if ctx.vendor == 'nvidia' else 'waves'}.",
        )
    ]


# ------------------------------------------------------------------ memory access width

_NV_ADDR = re.compile(r"\[(?P<base>[UR]*R\d+(?:\.64)?)(?:\+(?P<off>-?0x[0-9a-fA-F]+|-?\d+))?\]")
_AMD_OFF = re.compile(r"offset:(-?\d+|0x[0-9a-fA-F]+)")


def _global_address(ins: Instruction, vendor: str) -> tuple[str, int] | None:
    if vendor == "nvidia":
        m = _NV_ADDR.search(ins.operands)
        if not m:
            return None
        off = m.group("off")
        # uniform-register descriptor forms like desc[UR4][R2.64] keep the last bracket as the address
        ms = list(_NV_ADDR.finditer(ins.operands))
        m = ms[-1]
        off = m.group("off")
        return (m.group("base"), int(off, 0) if off else 0)
    parts = [p.strip() for p in ins.operands.split(",")]
    if len(parts) < 2:
        return None
    addr = parts[1].split()[0]
    if ins.opcode.startswith("buffer_"):
        addr = ",".join(parts[1:3])
    m = _AMD_OFF.search(ins.operands)
    return (addr, int(m.group(1), 0) if m else 0)


def rule_narrow_loads(ctx: Context) -> list[Finding]:
    """Global loads narrower than 128 bits at adjacent offsets from one base: one vector load would do."""
    narrow = [i for i in ctx.having("global.load") if any(
        f in ctx.fams_of[i] for f in ("global.load.b32", "global.load.b64"))]
    if not narrow:
        return []
    width_of = {i: (64 if "global.load.b64" in ctx.fams_of[i] else 32) for i in narrow}
    groups: dict[tuple, list[tuple[int, int]]] = defaultdict(list)
    for i in narrow:
        a = _global_address(ctx.isa.instructions[i], ctx.vendor)
        if a is None:
            continue
        groups[(a[0], width_of[i])].append((a[1], i))
    mergeable: list[int] = []
    runs = 0
    for (base, w), items in groups.items():
        step = w // 8
        offs = {o: i for o, i in items}
        seen = set()
        for o in sorted(offs):
            if o in seen:
                continue
            run = [o]
            while run[-1] + step in offs:
                run.append(run[-1] + step)
            seen.update(run)
            if len(run) * w >= 64 and len(run) >= 2:
                runs += 1
                mergeable.extend(offs[x] for x in run)
    wide = ctx.families.get("global.load.b128", 0)
    if mergeable:
        mergeable.sort()
        return [
            Finding(
                id="mem.narrow-global-loads",
                severity="medium" if ctx.in_loop(mergeable) else "low",
                title=f"{len(mergeable)} narrow global loads at adjacent offsets from one base ({runs} groups) could be vector loads",
                evidence=_evidence(ctx, mergeable, narrow_loads=len(narrow), mergeable=len(mergeable), groups=runs,
                                   b128_loads=wide, in_loops=len(ctx.in_loop(mergeable))),
                suggestion=(
                    "Load each group with one 128-bit access (float4/uint4 in CUDA and HIP, or a contiguous "
                    "tl.load block that Triton can vectorize): align the base to 16 bytes and tell the compiler "
                    "(__builtin_assume_aligned, tl.multiple_of) so it can widen the loads."
                ),
            )
        ]
    total = ctx.families.get("global.load", 0)
    loop_narrow = ctx.in_loop(narrow)
    if wide == 0 and ctx.families.get("global.load.b64", 0) == 0 and len(narrow) >= 2 and len(narrow) == total:
        return [
            Finding(
                id="mem.narrow-global-loads",
                severity="info",
                title=f"all {total} global loads are 32-bit or narrower; no vector loads",
                evidence=_evidence(ctx, narrow, narrow_loads=len(narrow), b128_loads=0, in_loops=len(loop_narrow)),
                suggestion=(
                    "Triton vectorizes a tl.load only when it can prove 16-byte alignment and contiguity: a mask "
                    "on a size not known to be a multiple of 16 (or an unaligned pointer) keeps it at 32 bits; "
                    "declare the size divisible (signature 'n:i32:16', tl.multiple_of) or pad the tensor."
                    if ".py:" in ctx.isa.source else
                    "If each thread reads contiguous elements, have it load 16 bytes at a time (float4/uint4 "
                    "from a 16-byte-aligned base): 4x fewer load instructions for the same bytes."
                ),
            )
        ]
    return []


# ------------------------------------------------------------------ tensor cores


def rule_hmma_on_hopper(ctx: Context) -> list[Finding]:
    if ctx.vendor != "nvidia" or not ctx.isa.arch.startswith("sm_90"):
        return []
    hmma = ctx.families.get("tensor.hmma", 0) + ctx.families.get("tensor.imma", 0)
    wg = ctx.families.get("tensor.hgmma", 0) + ctx.families.get("tensor.qgmma", 0) + ctx.families.get("tensor.igmma", 0)
    if not hmma or wg:
        return []
    idx = ctx.having("tensor.hmma") + ctx.having("tensor.imma")
    return [
        Finding(
            id="nvidia.hmma-on-hopper",
            severity="high",
            title=f"warp-level tensor-core MMA on Hopper: {hmma} HMMA/IMMA, no HGMMA (wgmma)",
            evidence=_evidence(ctx, sorted(idx), hmma=ctx.families.get("tensor.hmma", 0),
                               imma=ctx.families.get("tensor.imma", 0), hgmma=0, arch=ctx.isa.arch,
                               in_loops=len(ctx.in_loop(idx))),
            suggestion=(
                "On sm_90 the full tensor-core rate comes from warpgroup MMA (wgmma, SASS HGMMA) fed from shared "
                "memory, ideally by TMA: build for sm_90a and use wgmma.mma_async (CUTLASS 3.x / CuTe, or Triton "
                "tl.dot with num_warps >= 4 on sm_90a); mma.sync/wmma cannot reach Hopper's peak."
            ),
        )
    ]


# ------------------------------------------------------------------ waits in loops


def rule_full_wait_in_loop(ctx: Context) -> list[Finding]:
    if ctx.vendor == "amd":
        idx = ctx.in_loop(ctx.having("sync.wait.vmcnt0"))
        what = "s_waitcnt vmcnt(0)"
    else:
        idx = [i for i in ctx.in_loop(ctx.having("sync.depbar"))
               if re.search(r",\s*0x0\b|,\s*0\b", ctx.isa.instructions[i].operands)
               and ctx.isa.instructions[i].base == "DEPBAR"]
        what = "DEPBAR.LE SB0, 0x0 (wait for every cp.async group)"
    if not idx:
        return []
    loops = sorted({(lp.start_address if lp.start_address is not None else lp.start) for lp in ctx.loops
                    for i in idx if lp.start <= i <= lp.end})
    return [
        Finding(
            id="sync.full-wait-in-loop",
            severity="medium",
            title=f"{len(idx)} full memory waits inside loops ({what})",
            evidence=_evidence(ctx, idx, waits_in_loops=len(idx), loops=len(loops)),
            suggestion=(
                "Each iteration drains all outstanding loads before computing, so memory latency is not overlapped: "
                "issue the next iteration's loads before waiting (software pipelining / double buffering) and wait "
                "only for the oldest ones (vmcnt(N) with N > 0, cp.async.wait_group N, or num_stages > 1 in Triton)."
            ),
        )
    ]


RULES: list[Callable[[Context], list[Finding]]] = [
    rule_lds_crosslane,
    rule_readlane_chain,
    rule_spills,
    rule_local_memory,
    rule_occupancy_limited,
    rule_narrow_loads,
    rule_hmma_on_hopper,
    rule_full_wait_in_loop,
    rule_crosslane_conversion,
]

_SEV = {"high": 0, "medium": 1, "low": 2, "info": 3}


def run_rules(ctx: Context) -> list[Finding]:
    out: list[Finding] = []
    for rule in RULES:
        out.extend(rule(ctx))
    out.sort(key=lambda f: _SEV[f.severity])
    return out
