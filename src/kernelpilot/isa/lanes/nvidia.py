"""The SASS lane executor: a kernel's instructions run once in program order over symbolic lane values
(values.py), following PTX's shfl.sync semantics for SHFL (a lane whose computed source lies outside its segment
or beyond the clamp reads its own value), REDUX (one value for the warp from all 32 lanes), and VOTE/MATCH (masks,
not data). ``S2R SR_LANEID`` and ``SR_TID.X`` give the lane id (a 1-D block whose size is a multiple of 32).
Branches are not followed; loops run once.
"""

from __future__ import annotations

import re
from dataclasses import replace

from kernelpilot.isa.lanes.values import Data, Index, Value, combine, const, convert, exchange, index_op, new_origin, seed
from kernelpilot.isa.model import Instruction

__all__ = ["run_nvidia", "shfl_sources"]

WARP = 32
_LOADS = ("LDG", "LDS", "LD", "LDL", "LDSM")
_STORES = ("STG", "STS", "ST", "STL")
_CONVERSIONS = ("F2I", "I2F", "I2FP", "F2F", "F2IP", "F2FP", "FRND")
_INDEX_OPS = {
    "IADD3": lambda *a: sum(a), "SHF.L.U32": lambda a, b, c=0: a << (b & 31),
    "SHF.R.U32.HI": lambda a, b, c: c >> (b & 31), "IMAD.MOV.U32": lambda a, b, c: c, "MOV": lambda a: a,
    "IMAD": lambda a, b, c: a * b + c, "LEA": lambda a, b, c: (a << (c & 31)) + b,
}


def shfl_sources(mode: str, b: list[int | None], c: int) -> list[int | None]:
    """For each lane, the lane a SHFL in ``mode`` (BFLY, UP, DOWN, IDX) reads with lane operand ``b`` (per lane)
    and ``c`` (clamp in bits 4:0, segment mask in bits 12:8), as PTX defines shfl.sync."""
    out: list[int | None] = []
    clamp, segmask = c & 0x1F, (c >> 8) & 0x1F
    for lane in range(WARP):
        bval = b[lane]
        if bval is None:
            out.append(None)
            continue
        bval &= 0x1F
        max_lane = (lane & segmask) | (clamp & ~segmask)
        min_lane = lane & segmask
        if mode == "UP":
            j, ok = lane - bval, lane - bval >= max_lane
        elif mode == "DOWN":
            j, ok = lane + bval, lane + bval <= max_lane
        elif mode == "BFLY":
            j, ok = lane ^ bval, (lane ^ bval) <= max_lane
        else:
            j = min_lane | (bval & ~segmask)
            ok = j <= max_lane
        out.append(j if ok else lane)
    return out


def _clean(text: str) -> str:
    return re.sub(r"\.(reuse|64|128|U32|F32|H0|H1)$", "", text.strip().strip("-|!~"))


class _State:
    def __init__(self) -> None:
        self.regs: dict[str, Value] = {}
        self.sinks: list[tuple[Instruction, Data, int | None]] = []
        self.notes: list[str] = []

    def read(self, text: str) -> Value:
        t = _clean(text)
        if t in ("RZ", "URZ"):
            return const(WARP, 0)
        if re.fullmatch(r"U?R\d+", t):
            return self.regs.get(t)
        try:
            return const(WARP, int(t, 0) & 0xFFFFFFFF)
        except ValueError:
            return None

    def write(self, text: str, value: Value) -> None:
        """Set the register ``text`` names (and, for a 64-bit result ``Rn.64``, the register after it)."""
        t = _clean(text)
        if re.fullmatch(r"U?R\d+", t):
            prefix, n = t[:len(t) - len(t.lstrip("UR"))], int(t.lstrip("UR"))
            for k in range(2 if text.strip().endswith(".64") else 1):
                self.regs[f"{prefix}{n + k}"] = value if k == 0 else (value if isinstance(value, Data) else None)


def _step(st: _State, ins: Instruction) -> None:
    op, ops = ins.opcode, [o.strip() for o in ins.operands.split(",")] if ins.operands else []
    head = op.split(".")[0]
    if head in _LOADS and ops:
        width = next((int(p) // 32 for p in op.split(".")[1:] if p in ("64", "128")), 1)
        for k in range(width):              # each 32-bit register of a wide load: a value of the lane's own
            st.write(f"R{int(_clean(ops[0]).lstrip('UR')) + k}" if _clean(ops[0]).startswith("R") else ops[0],
                     seed(WARP))
        return
    if head in _STORES and len(ops) >= 2:
        v = st.read(ops[-1])
        if isinstance(v, Data) and v.exchanges:
            st.sinks.append((ins, v, None))
        return
    if head == "S2R" and len(ops) == 2:
        lane_id = ops[1] in ("SR_LANEID", "SR_TID.X")
        st.write(ops[0], Index(tuple(range(WARP))) if lane_id else None)
        return
    if head == "SHFL" and len(ops) == 5:          # SHFL.MODE Pout, Rd, Ra, b, c
        mode = op.split(".")[1]
        src, bv, cv = st.read(ops[2]), st.read(ops[3]), st.read(ops[4])
        if not isinstance(bv, Index) or not isinstance(cv, Index) or cv.values[0] is None:
            st.notes.append(f"{ins.where()}: {op}'s lanes depend on values not computed from the lane id")
            st.write(ops[1], None)
            return
        sources = shfl_sources(mode, list(bv.values), cv.values[0])
        label = f"{op} {ops[3]}" + ("" if cv.values[0] == 0x1F or mode == "UP" else f" c={ops[4]}")
        st.write(ops[1], exchange(src, sources, WARP, label))
        return
    if head == "REDUX" and len(ops) == 2:         # REDUX.OP URd, Ra: every lane's value combined, one for all
        src = st.read(ops[1])
        if isinstance(src, Data):
            total = tuple(sum(src.lanes[l][s] for l in range(WARP)) for s in range(WARP))
            st.write(ops[0], replace(src, lanes=(total,) * WARP, ops=src.ops | {op}, origin=new_origin(),
                                     exchanges=src.exchanges + (op,)))
        else:
            st.write(ops[0], None)
        return
    if head in ("VOTE", "VOTEU", "MATCH", "ISETP", "FSETP", "PLOP3", "BRA", "EXIT", "BAR", "WARPSYNC", "NOP"):
        if head in ("VOTE", "VOTEU", "MATCH") and ops:
            st.write(ops[0], None)
        return
    if not ops:
        return
    dst, srcs = ops[0], [s for s in ops[1:] if not re.fullmatch(r"!?P[T0-6]", _clean(s))]
    values = [st.read(s) for s in srcs]
    if head in _CONVERSIONS:
        st.write(dst, convert(values[0] if values else None, op))
        return
    if head == "MOV" or op == "IMAD.MOV.U32":
        v = values[-1] if values else None
        st.write(dst, v)
        return
    if any(isinstance(v, Data) for v in values):
        st.write(dst, combine(values, op, WARP, select=head in ("SEL", "FSEL")))
        return
    st.write(dst, index_op(_INDEX_OPS.get(op) or _INDEX_OPS.get(head), values, WARP))


def run_nvidia(instructions: list[Instruction]) -> tuple[list[tuple[Instruction, Data, int | None]], list[str]]:
    st = _State()
    for ins in instructions:
        try:
            _step(st, ins)
        except Exception as e:  # noqa: BLE001 - hostile or damaged code: one instruction not followed, noted
            st.notes.append(f"{ins.where()}: {ins.opcode} {ins.operands}: not followed ({e})")
    return st.sinks, st.notes
