"""Control flow: loops from back edges.

Loops are natural loops approximated by the address range of each back edge (target..branch): compilers
lay loop bodies out contiguously, so the range is the loop for the code nvcc, clang and Triton emit.
Back edges to the same header are merged; two ranges that cross (each holds part of the other, which compiled
loops do not) are merged into one; nesting depth is the number of loop ranges containing a range.

The ranges then nest, and one sweep finds everything in time linear in the instructions and loops: each
instruction is counted once, in its innermost loop, and a loop's counts are its own plus its inner loops'.
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
    nodes = _nest(sorted(spans.items(), key=lambda r: (r[0], -r[1])))
    if not nodes:
        return []
    # Each instruction in its innermost loop: a sweep with the loops open at each index on a stack.
    own_ops: list[Counter[str]] = [Counter() for _ in nodes]
    own_fam: list[Counter[str]] = [Counter() for _ in nodes]
    own_stall = [0] * len(nodes)
    stack: list[int] = []
    nxt = 0
    for ins in instructions[nodes[0][0]:]:
        i = ins.index
        while stack and nodes[stack[-1]][1] < i:
            stack.pop()
        while nxt < len(nodes) and nodes[nxt][0] == i:
            stack.append(nxt)
            nxt += 1
        if not stack:
            if nxt == len(nodes):
                break
            continue
        k = stack[-1]
        own_ops[k][ins.opcode] += 1
        own_fam[k].update(set(families[i] if families is not None else classify(ins, vendor)))
        if stall_of is not None:
            own_stall[k] += stall_of(ins)
    # Totals from the innermost out: a loop's parent comes before it in the (start, -end) order.
    for k in range(len(nodes) - 1, -1, -1):
        parent = nodes[k][3]
        if parent is not None:
            own_ops[parent].update(own_ops[k])
            own_fam[parent].update(own_fam[k])
            own_stall[parent] += own_stall[k]
    loops = []
    for k, (start, end, depth, _) in enumerate(nodes):
        loops.append(
            Loop(
                start=start,
                end=end,
                depth=depth,
                start_address=instructions[start].address,
                end_address=instructions[end].address,
                instruction_count=end - start + 1,
                families=dict(sorted(own_fam[k].items())),
                opcodes=dict(own_ops[k].most_common()),
                stall_cycles=own_stall[k] if stall_of is not None else None,
            )
        )
    return loops


def _nest(ranges: list[tuple[int, int]]) -> list[tuple[int, int, int, int | None]]:
    """``(start, end, depth, parent)`` of ``ranges`` (sorted by start, then longest first) made to nest: a range
    that crosses an open one (starts inside it, ends after it) extends it, and the open ranges around it as far as
    needed, instead of standing alone."""
    out: list[list] = []          # [start, end, depth, parent]
    stack: list[int] = []
    for start, end in ranges:
        while stack and out[stack[-1]][1] < start:
            stack.pop()
        if stack and end > out[stack[-1]][1]:
            for k in reversed(stack):
                if out[k][1] >= end:
                    break
                out[k][1] = end
            continue
        out.append([start, end, len(stack) + 1, stack[-1] if stack else None])
        stack.append(len(out) - 1)
    return [tuple(n) for n in out]


def loop_depths(n: int, loops: list[Loop]) -> list[int]:
    """Nesting depth of every instruction index (0 outside any loop)."""
    delta = [0] * (n + 1)
    for lp in loops:
        delta[lp.start] += 1
        delta[lp.end + 1] -= 1
    depth, level = [0] * n, 0
    for i in range(n):
        level += delta[i]
        depth[i] = level
    return depth
