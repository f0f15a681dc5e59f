"""Loops from back edges (isa/cfg.py): the one-sweep counts equal counting every loop's body directly, ranges
that cross are merged, and a deeply nested kernel is read in time linear in its size."""

from __future__ import annotations

import random
from collections import Counter

from kernelpilot.isa.cfg import find_loops, loop_depths
from kernelpilot.isa.model import Instruction

OPS = ("v_add_f32", "v_mul_f32", "s_waitcnt", "global_load_dword", "ds_bpermute_b32", "v_mov_b32_dpp")


def _kernel(n: int, edges: list[tuple[int, int]], rng: random.Random) -> list[Instruction]:
    """``n`` instructions, with a backward branch at each ``(header, branch)``."""
    ins = [Instruction(index=i, opcode=rng.choice(OPS), address=4 * i) for i in range(n)]
    for header, br in edges:
        ins[br] = Instruction(index=br, opcode="s_cbranch_scc1", operands=".LBB0_1", address=4 * br, target=header)
    return ins


def _nested_edges(n: int, rng: random.Random) -> list[tuple[int, int]]:
    """Properly nested loops: random intervals of a random tree."""
    edges: list[tuple[int, int]] = []

    def split(lo: int, hi: int, depth: int) -> None:
        if hi - lo < 4 or depth > 6:
            return
        a = rng.randrange(lo, hi - 2)
        b = rng.randrange(a + 2, hi)
        if all(b != br for _, br in edges) and all(a != h for h, _ in edges):
            edges.append((a, b))
            split(a + 1, b - 1, depth + 1)
        split(b + 1, hi, depth)

    split(0, n - 1, 0)
    return edges


def _direct(ins: list[Instruction], loops) -> list[tuple]:
    """Every loop's counts by walking its whole body (the definition)."""
    out = []
    for lp in loops:
        body = ins[lp.start: lp.end + 1]
        depth = sum(1 for o in loops if o.start <= lp.start and lp.end <= o.end)
        out.append((lp.start, lp.end, depth, dict(Counter(i.opcode for i in body).most_common())))
    return out


def test_one_sweep_equals_counting_each_body():
    rng = random.Random(7)
    for _ in range(200):
        n = rng.randrange(8, 120)
        ins = _kernel(n, _nested_edges(n, rng), rng)
        loops = find_loops(ins, "amd")
        got = [(lp.start, lp.end, lp.depth, lp.opcodes) for lp in loops]
        assert [(s, e, d, dict(sorted(o.items()))) for s, e, d, o in got] == \
               [(s, e, d, dict(sorted(o.items()))) for s, e, d, o in _direct(ins, loops)]
        depth = loop_depths(n, loops)
        assert depth == [sum(1 for lp in loops if lp.start <= i <= lp.end) for i in range(n)]


def test_crossing_ranges_are_merged():
    rng = random.Random(1)
    ins = _kernel(40, [(2, 20), (10, 30), (12, 15)], rng)      # 10..30 crosses 2..20
    loops = find_loops(ins, "amd")
    assert [(lp.start, lp.end, lp.depth) for lp in loops] == [(2, 30, 1), (12, 15, 2)]
    assert loops[0].instruction_count == 29 and sum(loops[0].opcodes.values()) == 29


def test_deep_nesting_is_linear():
    # 8,000 loops, each inside the last: counting each body would touch 32 million instructions
    n = 16_000
    ins = _kernel(n, [(i, n - 1 - i) for i in range(8_000)], random.Random(3))
    loops = find_loops(ins, "amd")
    assert len(loops) == 8_000 and loops[-1].depth == 8_000 and loops[0].instruction_count == n
    assert max(loop_depths(n, loops)) == 8_000
