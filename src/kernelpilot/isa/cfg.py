"""Control flow: loops from back edges.

Loops are natural loops approximated by the address range of each back edge (target..branch): compilers
lay loop bodies out contiguously, so the range is the loop for the code nvcc, clang and Triton emit.
Back edges to the same header are merged; nesting depth is the number of loop ranges containing a range.
"""

from __future__ import annotations

from collections import Counter

from kernelpilot.isa.families import classify, is_branch
from kernelpilot.isa.model import Instruction, Loop

__all__ = ["back_edges", "find_loops", "loop_depths"]


def _ends_block(ins: Instruction, vendor: str) -> bool:
    if is_branch(ins, vendor):
        return True
    if vendor == "nvidia":
        return ins.base in ("EXIT", "RET") and not ins.predicate
    return ins.opcode in ("s_endpgm", "s_setpc_b64")


def back_edges(instructions: list[Instruction], vendor: str) -> list[tuple[int, int]]:
    """(header index, branch index) for each branch that jumps backwards.

    A branch to itself right after an exit is the padding trap compilers put at a kernel's end, not a loop."""
    edges = []
    for ins in instructions:
        t = ins.target
        if t is None or t > ins.index or not is_branch(ins, vendor):
            continue
        if t == ins.index:
            prev = instructions[ins.index - 1] if ins.index > 0 else None
            if prev is None or _ends_block(prev, vendor) or prev.base in ("EXIT", "RET"):
                continue
        edges.append((t, ins.index))
    return edges


def find_loops(instructions: list[Instruction], vendor: str, *, stall_of=None,
               families: list[tuple[str, ...]] | None = None) -> list[Loop]:
    """Loops as instruction ranges with their own opcode and family counts, outermost first.

    ``families`` (each instruction's, by index) saves classifying again when the caller has them."""
    spans: dict[int, int] = {}
    for header, br in back_edges(instructions, vendor):
        spans[header] = max(spans.get(header, header), br)
    ranges = sorted(spans.items(), key=lambda r: (r[0], -r[1]))
    loops = []
    for start, end in ranges:
        depth = sum(1 for s, e in ranges if s <= start and end <= e)
        body = instructions[start : end + 1]
        fam: Counter[str] = Counter()
        ops: Counter[str] = Counter()
        stall = 0 if stall_of is not None else None
        for ins in body:
            ops[ins.opcode] += 1
            fam.update(set(families[ins.index] if families is not None else classify(ins, vendor)))
            if stall_of is not None:
                stall += stall_of(ins)
        loops.append(
            Loop(
                start=start,
                end=end,
                depth=depth,
                start_address=body[0].address,
                end_address=body[-1].address,
                instruction_count=len(body),
                families=dict(sorted(fam.items())),
                opcodes=dict(ops.most_common()),
                stall_cycles=stall,
            )
        )
    return loops


def loop_depths(n: int, loops: list[Loop]) -> list[int]:
    """Nesting depth of every instruction index (0 outside any loop)."""
    depth = [0] * n
    for lp in loops:
        for i in range(lp.start, lp.end + 1):
            depth[i] += 1
    return depth
