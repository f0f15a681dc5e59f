"""A static stall estimate: what the compiler already decided about issue stalls and waits.

SASS (Volta and later): each instruction's control word carries the stall count the scheduler waits
before issuing the next instruction, and a wait mask of scoreboards (variable-latency results: memory,
MUFU, ...) it must wait on. Summing stall counts gives the fixed-latency issue cost; instructions with a
wait mask are where the warp may sit for memory. AMDGCN: `s_nop N` idles N+1 cycles; `s_waitcnt` blocks
until counters drain, `vmcnt(0)` waits for every outstanding vector memory access.
Neither is a runtime measurement: memory latency is not modelled (profile for that).
"""

from __future__ import annotations

import re

from kernelpilot.isa.model import Instruction, Loop, StallEstimate

__all__ = ["stall_cycles", "estimate_stalls"]

_NOP_RE = re.compile(r"^\s*(0x[0-9a-fA-F]+|\d+)")


def stall_cycles(ins: Instruction, vendor: str) -> int:
    """Issue cycles one instruction costs statically: SASS stall count, AMD s_nop N+1, else 0."""
    if vendor == "nvidia":
        return ins.control.stall if ins.control is not None else 0
    if ins.opcode == "s_nop":
        m = _NOP_RE.match(ins.operands)
        return (int(m.group(1), 0) + 1) if m else 1
    return 0


def _trailing_padding(instructions: list[Instruction], vendor: str) -> int:
    """Index after the last real instruction (drop the NOP/self-branch padding after the final exit)."""
    n = len(instructions)
    if vendor != "nvidia":
        return n
    for i in range(n - 1, -1, -1):
        if instructions[i].base == "EXIT":
            return i + 1
    return n


def estimate_stalls(instructions: list[Instruction], vendor: str, loops: list[Loop], *, top: int = 8) -> StallEstimate:
    end = _trailing_padding(instructions, vendor)
    body = instructions[:end]
    in_loop = [False] * len(instructions)
    for lp in loops:
        for i in range(lp.start, lp.end + 1):
            in_loop[i] = True
    costs = [(stall_cycles(ins, vendor), ins) for ins in body]
    if vendor == "nvidia":
        has_control = any(ins.control is not None for ins in body)
        waits = sum(1 for ins in body if ins.control is not None and ins.control.wait_mask)
        yields = sum(1 for ins in body if ins.control is not None and ins.control.yield_)
        full = sum(1 for ins in body if ins.base == "DEPBAR" and re.search(r",\s*0x0\b|,\s*0\b", ins.operands))
        nops = sum(1 for ins in body if ins.base == "NOP")
        est = StallEstimate(
            method="SASS control words: encoded stall cycles per instruction, scoreboard waits",
            total_cycles=sum(c for c, _ in costs) if has_control else None,
            barrier_waits=waits,
            full_memory_waits=full,
            nops=nops,
            nop_cycles=sum(c for c, ins in costs if ins.base == "NOP"),
            yields=yields,
            in_loops_cycles=sum(c for c, ins in costs if in_loop[ins.index]) if has_control else None,
        )
    else:
        waits = [ins for ins in body if ins.opcode.startswith("s_waitcnt")]
        nops = [c for c, ins in costs if ins.opcode == "s_nop"]
        est = StallEstimate(
            method="AMDGCN s_nop cycles and s_waitcnt counts (memory latency not modelled)",
            total_cycles=sum(nops),
            barrier_waits=len(waits),
            full_memory_waits=sum(1 for ins in waits if "vmcnt(0)" in ins.operands.replace(" ", "")),
            nops=len(nops),
            nop_cycles=sum(nops),
            yields=0,
            in_loops_cycles=sum(c for c, ins in costs if ins.opcode == "s_nop" and in_loop[ins.index]),
        )
    ranked = sorted((x for x in costs if x[0] > 0), key=lambda x: (-x[0] * (4 if in_loop[x[1].index] else 1), x[1].index))
    est.top = [
        {"at": ins.where(), "opcode": ins.opcode, "cycles": c, "in_loop": in_loop[ins.index],
         **({"line": ins.line} if ins.line is not None else {})}
        for c, ins in ranked[:top]
    ]
    return est
