"""The AMDGCN lane executor: a kernel's instructions run once in program order over symbolic lane values
(values.py), following the ISA manual's cross-lane semantics (GFX9, CDNA3):

- DPP (the ``_dpp`` forms): src0 read from another lane by the control (quad_perm, row_shl/shr/ror, wave_shl/shr/
  rol/ror, row_mirror, row_half_mirror, row_bcast:15/31); a lane whose row (row_mask) or bank (bank_mask) is off,
  or whose source lane is invalid without bound_ctrl, is not written and keeps its old value; with bound_ctrl
  (printed ``bound_ctrl:0`` by older LLVM, ``bound_ctrl:1`` by newer: the same bit) an invalid source reads 0.
- ``ds_swizzle_b32``: quad-perm mode within groups of 4, or bitmask mode (and, or, xor masks) within 32 lanes.
- ``ds_bpermute_b32`` (pull) and ``ds_permute_b32`` (push): the lane read from (or written to) is the address / 4,
  taken from an address the code computes from the lane id (v_mbcnt_lo/hi, v0 = the work-item id) and constants.
- ``v_readlane_b32`` / ``v_readfirstlane_b32`` (one lane's value for all), ``v_writelane_b32``.
Branches are not followed: reductions are straight-line code, and exec masks only choose which lanes store (every
lane's value is reported). Loops run once.
"""

from __future__ import annotations

import re

from kernelpilot.isa.lanes.values import (Data, Index, Value, broadcast, choose, combine, const, convert, exchange,
                                          index_op, seed)
from kernelpilot.isa.model import Instruction

__all__ = ["run_amd", "dpp_sources", "swizzle_sources", "parse_swizzle", "describe"]

_MASK = 0xFFFFFFFF
_LOADS = ("global_load", "buffer_load", "flat_load", "ds_read", "ds_load", "scratch_load")
_STORES = ("global_store", "buffer_store", "flat_store", "ds_write", "ds_store", "scratch_store")
_INDEX_OPS = {
    "and_b32": lambda a, b: a & b, "or_b32": lambda a, b: a | b, "xor_b32": lambda a, b: a ^ b,
    "add_u32": lambda a, b: a + b, "add_nc_u32": lambda a, b: a + b, "add_co_u32": lambda a, b: a + b,
    "add_i32": lambda a, b: a + b, "sub_u32": lambda a, b: a - b, "sub_co_u32": lambda a, b: a - b,
    "sub_i32": lambda a, b: a - b, "subrev_u32": lambda a, b: b - a, "subrev_co_u32": lambda a, b: b - a,
    "lshlrev_b32": lambda a, b: b << (a & 31), "lshrrev_b32": lambda a, b: b >> (a & 31),
    "ashrrev_i32": lambda a, b: b >> (a & 31), "lshl_b32": lambda a, b: a << (b & 31),
    "lshr_b32": lambda a, b: a >> (b & 31), "mul_lo_u32": lambda a, b: a * b, "mul_u32_u24": lambda a, b: a * b,
    "mul_i32": lambda a, b: a * b, "mul_i32_i24": lambda a, b: a * b, "min_u32": min, "max_u32": max,
    "min_i32": min, "max_i32": max,
    "lshl_add_u32": lambda a, b, c: (a << (b & 31)) + c, "lshl_or_b32": lambda a, b, c: (a << (b & 31)) | c,
    "add3_u32": lambda a, b, c: a + b + c, "and_or_b32": lambda a, b, c: (a & b) | c,
    "xor3_b32": lambda a, b, c: a ^ b ^ c, "or3_b32": lambda a, b, c: a | b | c,
    "bfe_u32": lambda a, b, c: (a >> (b & 31)) & ((1 << (c & 31)) - 1), "add_lshl_u32": lambda a, b, c: (a + b) << (c & 31),
}
_SELECTS = ("v_cndmask_b32", "s_cselect_b32")


def _split(operands: str) -> tuple[list[str], list[str]]:
    """The operands (split at top-level commas) and the trailing modifiers (``row_shr:1``, ``offset:...``)."""
    parts, depth, cur = [], 0, ""
    for ch in operands:
        if ch in "([":
            depth += 1
        elif ch in ")]":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(cur.strip())
            cur = ""
        else:
            cur += ch
    if cur.strip():
        parts.append(cur.strip())
    mods: list[str] = []
    if parts:
        last = parts[-1].split()
        parts[-1:] = last[:1]
        mods = last[1:]
    return parts, mods


def _int(text: str) -> int | None:
    try:
        return int(text, 0) & _MASK
    except ValueError:
        return None


def _base(opcode: str) -> str:
    return re.sub(r"_(e32|e64|dpp|sdwa|e64_dpp)$", "", opcode)


def dpp_sources(ctrl: str, width: int) -> list[int | None]:
    """For each lane, the lane DPP control ``ctrl`` reads from (None: no valid source)."""
    out: list[int | None] = []
    name, _, arg = ctrl.partition(":")
    for l in range(width):
        row, pos = l - l % 16, l % 16
        src: int | None
        if name == "quad_perm":
            sel = [int(x) for x in arg.strip("[]").split(",")]
            src = (l & ~3) + sel[l & 3]
        elif name in ("row_shl", "row_shr"):
            n = int(arg, 0)
            p = pos + n if name == "row_shl" else pos - n
            src = row + p if 0 <= p < 16 else None
        elif name == "row_ror":
            src = row + (pos - int(arg, 0)) % 16
        elif name in ("wave_shl", "wave_shr"):
            p = l + 1 if name == "wave_shl" else l - 1
            src = p if 0 <= p < width else None
        elif name == "wave_rol":
            src = (l + 1) % width
        elif name == "wave_ror":
            src = (l - 1) % width
        elif name == "row_mirror":
            src = row + 15 - pos
        elif name == "row_half_mirror":
            src = l - l % 8 + 7 - l % 8
        elif name == "row_bcast":
            n = int(arg, 0)
            if n == 15:
                src = row - 16 + 15 if row >= 16 else None
            else:                                        # row_bcast:31: lane 31 into rows 2 and 3
                src = 31 if row >= 32 else None
        elif name == "row_share":                        # GFX10+: lane arg of the row
            src = row + int(arg, 0)
        elif name == "row_xmask":
            src = row + (pos ^ int(arg, 0))
        else:
            raise ValueError(f"unknown DPP control {ctrl}")
        out.append(src)
    return out


def describe(sources: list[int | None]) -> str:
    """A lane map in words: "xor 16", "shift 1", "from lane 63", or the lanes read."""
    lanes = list(range(len(sources)))
    for k in (1, 2, 4, 8, 16, 32):
        if all(s == l ^ k for l, s in zip(lanes, sources)):
            return f"xor {k}"
    if len(set(sources)) == 1:
        return f"from lane {sources[0]}"
    known = [(l, s) for l, s in zip(lanes, sources) if s is not None]
    if known and all(s - l == known[0][1] - known[0][0] for l, s in known):
        return f"shift {known[0][1] - known[0][0]}"
    return "lanes " + ",".join("-" if s is None else str(s) for s in sources)


def parse_swizzle(text: str) -> int | None:
    """A ds_swizzle offset, raw (``offset:0x401f``) or LLVM's symbolic ``swizzle(MODE,...)``, as the 16-bit
    offset the ISA manual describes."""
    text = text.removeprefix("offset:")
    raw = _int(text)
    if raw is not None:
        return raw
    m = re.fullmatch(r"swizzle\((\w+)((?:,[^,)]+)*)\)", text.replace(" ", ""))
    if not m:
        return None
    mode, args = m.group(1), [a.strip('"') for a in m.group(2).split(",")[1:]]
    if mode == "QUAD_PERM":
        a = [int(x, 0) for x in args]
        return 0x8000 | a[0] | a[1] << 2 | a[2] << 4 | a[3] << 6
    and_m, or_m, xor_m = 0x1F, 0, 0
    if mode == "BITMASK_PERM":
        and_m = or_m = xor_m = 0
        for bit, ch in zip(range(4, -1, -1), args[0]):
            if ch == "1":
                or_m |= 1 << bit
            elif ch == "p":
                and_m |= 1 << bit
            elif ch == "i":
                and_m |= 1 << bit
                xor_m |= 1 << bit
    elif mode == "SWAP":
        xor_m = int(args[0], 0)
    elif mode == "REVERSE":
        xor_m = int(args[0], 0) - 1
    elif mode == "BROADCAST":
        and_m, or_m = 0x1F & ~(int(args[0], 0) - 1), int(args[1], 0)
    else:
        return None
    return and_m | or_m << 5 | xor_m << 10


def swizzle_sources(offset: int, width: int) -> list[int | None]:
    out = []
    for l in range(width):
        if offset & 0x8000:
            out.append((l & ~3) + ((offset >> (2 * (l & 3))) & 3))
        else:
            and_m, or_m, xor_m = offset & 0x1F, (offset >> 5) & 0x1F, (offset >> 10) & 0x1F
            out.append((l & ~31) | (((l & 31 & and_m) | or_m) ^ xor_m))
    return out


def _regs(text: str) -> list[str]:
    """The 32-bit registers an operand names (``v5``, ``v[2:3]`` -> v2, v3; ``s[4:5]``)."""
    text = text.strip("-|")
    m = re.fullmatch(r"([vs])\[(\d+):(\d+)\]", text)
    if m:
        return [f"{m.group(1)}{i}" for i in range(int(m.group(2)), int(m.group(3)) + 1)]
    return [text] if re.fullmatch(r"[vs]\d+", text) else []


class _State:
    def __init__(self, width: int) -> None:
        self.width = width
        self.regs: dict[str, Value] = {"v0": Index(tuple(range(width)))}   # work-item id x: the lane in wave 0
        self.sinks: list[tuple[Instruction, Data, int | None]] = []
        self.notes: list[str] = []
        self.masks: dict[str, list[bool] | None] = {}   # vcc / s[a:b] -> the lanes a v_cmp set

    def read(self, text: str) -> Value:
        text = text.strip()
        neg = text.startswith("-")
        text = text.strip("-|")
        regs = _regs(text)
        if len(regs) == 1:
            return self.regs.get(regs[0])
        if regs:
            return None
        value = _int(text)
        if value is not None:
            return const(self.width, ((-value) & _MASK) if neg else value)
        return None

    def write(self, text: str, value: Value) -> None:
        regs = _regs(text)
        for r in regs:
            self.regs[r] = value if len(regs) == 1 else None


def _step(st: _State, ins: Instruction) -> None:
    op = ins.opcode
    base = _base(op)
    ops, mods = _split(ins.operands)
    w = st.width
    if base.startswith(_LOADS):
        if ops:
            for r in _regs(ops[0]):
                st.regs[r] = seed(w)
        return
    if base.startswith(_STORES):
        data_op = ops[0] if base.startswith("buffer_store") else (ops[1] if len(ops) > 1 else None)
        if data_op:
            for r in _regs(data_op):
                v = st.regs.get(r)
                if isinstance(v, Data) and v.exchanges:
                    st.sinks.append((ins, v, None))
        return
    if base in ("v_readlane_b32", "v_readfirstlane_b32"):
        src = st.read(ops[1])
        lane_v = st.read(ops[2]) if base == "v_readlane_b32" and len(ops) > 2 else const(w, 0)
        lane = lane_v.values[0] if isinstance(lane_v, Index) else None
        if isinstance(src, Data) and lane is not None:
            lane %= w
            st.sinks.append((ins, src, lane))
            st.write(ops[0], broadcast(src, lane, w, f"readlane {lane}"))
        elif isinstance(src, Index) and lane is not None:
            st.write(ops[0], const(w, src.values[lane % w]))
        else:
            st.write(ops[0], None)
        return
    if base == "v_writelane_b32":
        val, lane_v = st.read(ops[1]), st.read(ops[2])
        lane = lane_v.values[0] if isinstance(lane_v, Index) else None
        if lane is None:
            st.write(ops[0], None)
            return
        mask = [l == lane % w for l in range(w)]
        st.write(ops[0], choose(mask, val, st.read(ops[0]), w))
        return
    if base in ("v_mbcnt_lo_u32_b32", "v_mbcnt_hi_u32_b32"):
        mask, add = st.read(ops[1]), st.read(ops[2])
        if isinstance(mask, Index) and mask.values[0] == _MASK and isinstance(add, Index):
            below = [min(l, 32) if base.endswith("lo_u32_b32") else max(l - 32, 0) for l in range(w)]
            st.write(ops[0], Index(tuple(None if a is None else (b + a) & _MASK
                                         for b, a in zip(below, add.values))))
        else:
            st.write(ops[0], None)
        return
    if base == "ds_swizzle_b32":
        offset = next((parse_swizzle(m) for m in mods if m.startswith("offset:")), 0)
        if offset is None:
            st.notes.append(f"{ins.where()}: a ds_swizzle_b32 offset not understood ({' '.join(mods)})")
            st.write(ops[0], None)
            return
        src = st.read(ops[1])
        st.write(ops[0], exchange(src, swizzle_sources(offset, w), w,
                                  f"ds_swizzle {' '.join(mods).removeprefix('offset:')}"))
        return
    if base in ("ds_bpermute_b32", "ds_permute_b32"):
        addr, data = st.read(ops[1]), st.read(ops[2])
        offset = next((_int(m.removeprefix("offset:")) for m in mods if m.startswith("offset:")), 0) or 0
        if not isinstance(addr, Index) or None in addr.values:
            st.notes.append(f"{ins.where()}: {base}'s lanes come from an address not computed from the lane id")
            st.write(ops[0], None)
            return
        lanes = [((a + offset) >> 2) % w for a in addr.values]   # type: ignore[operator]
        if base == "ds_bpermute_b32":
            sources: list[int | None] = list(lanes)
        else:                                   # push: lane l's value to lane lanes[l]; lanes written by none read 0
            sources = [None] * w
            for l, to in enumerate(lanes):
                sources[to] = l
        st.write(ops[0], exchange(data, sources, w, f"{base.removeprefix('ds_')} {describe(sources)}"))
        return
    if not ops:
        return
    if base in _MASK_OPS and len(ops) >= 2:      # lane masks combined in scalar registers (vcc, s[a:b])
        fn, arity = _MASK_OPS[base]
        srcs = [st.masks.get(o) if o in st.masks else _const_mask(o, w) for o in ops[1:1 + arity]]
        st.masks[ops[0]] = (None if len(srcs) < arity or any(m is None for m in srcs) else
                            [fn(*(m[l] for m in srcs)) for l in range(w)])
        return
    if ops and (ops[0] == "vcc" or ops[0].startswith("s[")) and ops[0] in st.masks and not base.startswith("v_cmp_"):
        st.masks[ops[0]] = None                  # a mask register written by anything else: no longer known
    if base.startswith("v_cmp_"):                 # a per-lane condition, kept for v_cndmask_b32
        cond = _compare(base, [st.read(x) for x in ops[1:3]], w)
        st.masks[ops[0]] = cond
        return
    if base == "v_cndmask_b32" and len(ops) == 4:
        cond = st.masks.get(ops[3])
        a, b = st.read(ops[1]), st.read(ops[2])
        if cond is not None and not (isinstance(a, Data) and isinstance(b, Data)):
            st.write(ops[0], choose(cond, b, a, w))
            return
    if base.startswith("v_pk_") or base == "v_mov_b64":     # two 32-bit lanes' values side by side: each alone
        parts = [_regs(o) or [o] for o in ops]
        for k, d in enumerate(parts[0]):
            values = [st.read(p[k] if len(p) > 1 else p[0]) for p in parts[1:]]
            st.write(d, _compute(base.replace("v_pk_", "v_").replace("_b64", "_b32"), values, w))
        return
    dst, srcs = ops[0], ops[1:]
    if "_co_" in base and len(srcs) > 2 and (srcs[0] == "vcc" or srcs[0].startswith("s[")):
        srcs = srcs[1:]                          # the carry out is a second destination
    if base in ("v_addc_co_u32", "v_subb_co_u32"):
        srcs = srcs[:2]
    dpp = next((m for m in mods if re.match(r"(quad_perm|row_|wave_)", m)), None)
    values = [st.read(s) for s in srcs]
    if dpp:
        fields = dict(m.split(":", 1) for m in mods if ":" in m)
        row_mask, bank_mask = int(fields.get("row_mask", "0xf"), 0), int(fields.get("bank_mask", "0xf"), 0)
        zero = "bound_ctrl" in fields
        sources = dpp_sources(dpp, w)
        enabled = [bool(row_mask >> (l // 16) & 1) and bool(bank_mask >> ((l % 16) // 4) & 1) for l in range(w)]
        written = [enabled[l] and (sources[l] is not None or zero) for l in range(w)]
        moved = exchange(values[0] if values else None, sources, w, dpp)
        if base == "v_mov_b32":
            result = moved
        else:
            result = _compute(base, [moved, *values[1:]], w)
        st.write(dst, choose(written, result, st.read(dst), w))
        return
    st.write(dst, _compute(base, values, w))


# lane masks combined in scalar registers: the operation on one lane's bits, and how many sources it reads
_MASK_OPS = {"s_and_b64": (lambda a, b: a and b, 2), "s_or_b64": (lambda a, b: a or b, 2),
             "s_xor_b64": (lambda a, b: a != b, 2), "s_andn2_b64": (lambda a, b: a and not b, 2),
             "s_orn2_b64": (lambda a, b: a or not b, 2), "s_mov_b64": (lambda a: a, 1), "s_not_b64": (lambda a: not a, 1)}


def _const_mask(text: str, w: int) -> list[bool] | None:
    """A literal 64-bit lane mask (0, -1) as a per-lane list; None for anything else (exec, an unknown register)."""
    value = _int(text)
    if value is None:
        return None
    full = (1 << 64) - 1 if value == _MASK else value
    return [bool(full >> l & 1) for l in range(w)]


_COMPARE = {"lt": lambda a, b: a < b, "le": lambda a, b: a <= b, "gt": lambda a, b: a > b,
            "ge": lambda a, b: a >= b, "eq": lambda a, b: a == b, "ne": lambda a, b: a != b}


def _compare(base: str, values: list[Value], w: int) -> list[bool] | None:
    """A v_cmp's lane mask, where both sides are known lane-dependent integers."""
    m = re.fullmatch(r"v_cmp_(lt|le|gt|ge|eq|ne)_([iu])32", base)
    if not m or len(values) != 2 or not all(isinstance(v, Index) and None not in v.values for v in values):
        return None
    signed = m.group(2) == "i"

    def conv(x: int) -> int:
        return x - (1 << 32) if signed and x >= 1 << 31 else x

    a, b = values
    return [_COMPARE[m.group(1)](conv(a.values[l]), conv(b.values[l])) for l in range(w)]   # type: ignore


def _compute(base: str, values: list[Value], w: int) -> Value:
    if base in ("v_mov_b32", "s_mov_b32", "v_mov_b64", "s_mov_b64"):
        return values[0] if values else None
    if base.startswith(("v_cvt_", "s_cvt_")):
        return convert(values[0] if values else None, base)
    if any(isinstance(v, Data) for v in values):
        return combine(values, base, w, select=base in _SELECTS)
    return index_op(_INDEX_OPS.get(base.split("_", 1)[1] if "_" in base else base), values, w)


def run_amd(instructions: list[Instruction], width: int) -> tuple[list[tuple[Instruction, Data, int | None]], list[str]]:
    """The sinks (stores of values that crossed lanes, and readlanes of them: the instruction, the value and the
    lane read) and notes on what could not be followed."""
    st = _State(width)
    for ins in instructions:
        try:
            _step(st, ins)
        except Exception as e:  # noqa: BLE001 - hostile or damaged code: one instruction not followed, noted
            st.notes.append(f"{ins.where()}: {ins.opcode} {ins.operands}: not followed ({e})")
            if ins.operands:
                st.write(_split(ins.operands)[0][0], None)
    return st.sinks, st.notes
