"""Opcode families: what each instruction is, in the terms a kernel engineer counts.

A family is a dotted name; an instruction belongs to a family and to each of its parents
(``global.load.b128`` also counts under ``global.load``). ``classify`` is called once per instruction,
so both vendor tables are plain dict lookups plus a few string tests.
"""

from __future__ import annotations

import re
from functools import lru_cache

from kernelpilot.isa.model import Instruction

__all__ = ["classify", "dpp_modifier", "is_branch"]

# ---------------------------------------------------------------- NVIDIA SASS

_NV_WIDTH = {"128": "b128", "64": "b64", "U8": "b8", "S8": "b8", "U16": "b16", "S16": "b16"}

_NV_BASE: dict[str, tuple[str, ...]] = {
    "LDS": ("shared.load",),
    "LDSM": ("shared.load", "shared.load.ldsm"),
    "STS": ("shared.store",),
    "STSM": ("shared.store", "shared.store.stsm"),
    "ATOMS": ("shared.atomic",),
    "LDL": ("local.load",),
    "STL": ("local.store",),
    "LDC": ("constant.load",),
    "ULDC": ("constant.load",),
    "LD": ("generic.load",),
    "ST": ("generic.store",),
    "ATOM": ("generic.atomic",),
    "ATOMG": ("global.atomic",),
    "RED": ("global.atomic",),
    "REDG": ("global.atomic",),
    "LDGSTS": ("async.cp_async",),
    "LDGDEPBAR": ("sync.depbar",),
    "DEPBAR": ("sync.depbar",),
    "UTMALDG": ("async.tma", "async.tma.load"),
    "UTMASTG": ("async.tma", "async.tma.store"),
    "UTMAPF": ("async.tma",),
    "UTMAREDG": ("async.tma",),
    "UBLKCP": ("async.tma", "async.bulk_copy"),
    "SYNCS": ("sync.mbarrier",),
    "HGMMA": ("tensor", "tensor.hgmma"),
    "QGMMA": ("tensor", "tensor.qgmma"),
    "IGMMA": ("tensor", "tensor.igmma"),
    "BGMMA": ("tensor", "tensor.bgmma"),
    "HMMA": ("tensor", "tensor.hmma"),
    "IMMA": ("tensor", "tensor.imma"),
    "DMMA": ("tensor", "tensor.dmma"),
    "BMMA": ("tensor", "tensor.bmma"),
    "UTCHMMA": ("tensor", "tensor.tcgen05"),
    "UTCQMMA": ("tensor", "tensor.tcgen05"),
    "UTCIMMA": ("tensor", "tensor.tcgen05"),
    "UTCBAR": ("sync.mbarrier",),
    "LDTM": ("tensor", "tensor.tmem_load"),
    "STTM": ("tensor", "tensor.tmem_store"),
    "WARPGROUP": ("sync.warpgroup",),
    "SHFL": ("crosslane", "crosslane.shfl"),
    "VOTE": ("crosslane", "crosslane.vote"),
    "VOTEU": ("crosslane", "crosslane.vote"),
    "REDUX": ("crosslane", "crosslane.redux"),
    "CREDUX": ("crosslane", "crosslane.redux"),
    "MATCH": ("crosslane", "crosslane.match"),
    "BAR": ("sync.barrier",),
    "MEMBAR": ("sync.membar",),
    "WARPSYNC": ("sync.warpsync",),
    "MUFU": ("transcendental",),
    "BRA": ("control.branch",),
    "BRX": ("control.branch",),
    "JMP": ("control.branch",),
    "JMX": ("control.branch",),
    "CALL": ("control.call",),
    "RET": ("control.return",),
    "EXIT": ("control.exit",),
    "BSSY": ("control.reconverge",),
    "BSYNC": ("control.reconverge",),
    "NOP": ("nop",),
    "FFMA": ("fp32",), "FADD": ("fp32",), "FMUL": ("fp32",), "FMNMX": ("fp32",), "FSETP": ("fp32",),
    "FSEL": ("fp32",), "FCHK": ("fp32",), "FSWZADD": ("fp32",),
    "HFMA2": ("fp16",), "HADD2": ("fp16",), "HMUL2": ("fp16",), "HMNMX2": ("fp16",), "HSETP2": ("fp16",),
    "DFMA": ("fp64",), "DADD": ("fp64",), "DMUL": ("fp64",), "DSETP": ("fp64",),
    "IMAD": ("int",), "IADD3": ("int",), "LOP3": ("int",), "SHF": ("int",), "LEA": ("int",),
    "ISETP": ("int",), "IMNMX": ("int",), "IABS": ("int",), "POPC": ("int",), "FLO": ("int",),
    "BREV": ("int",), "PRMT": ("int",), "SGXT": ("int",), "BMSK": ("int",), "VIADD": ("int",), "VIMNMX": ("int",),
    "IDP": ("int",), "IMUL": ("int",),
    "F2F": ("convert",), "F2I": ("convert",), "I2F": ("convert",), "F2FP": ("convert",), "I2FP": ("convert",),
    "F2IP": ("convert",), "FRND": ("convert",),
}


def _nv_classify(opcode: str) -> tuple[str, ...]:
    parts = opcode.split(".")
    base = parts[0]
    if base in ("LDG", "STG"):
        kind = "global.load" if base == "LDG" else "global.store"
        width = "b32"
        for p in parts[1:]:
            if p in _NV_WIDTH:
                width = _NV_WIDTH[p]
        return (kind, f"{kind}.{width}")
    if base in ("LDS", "STS", "LDL", "STL"):
        fam = _NV_BASE[base]
        width = "b32"
        for p in parts[1:]:
            if p in _NV_WIDTH:
                width = _NV_WIDTH[p]
        return fam + (f"{fam[0]}.{width}",)
    if base == "BAR" and len(parts) > 1 and parts[1] == "RED":
        return ("sync.barrier", "crosslane.redux")
    return _NV_BASE.get(base, ())


# ---------------------------------------------------------------- AMD GCN/CDNA

_DPP_RE = re.compile(
    r"\b(quad_perm|row_shl|row_shr|row_ror|row_half_mirror|row_mirror|row_bcast:(?:15|31)|row_bcast"
    r"|wave_shl|wave_shr|wave_rol|wave_ror|row_share|row_xmask|row_newbcast)\b"
)

_AMD_WIDTH = {
    "dword": "b32", "dwordx2": "b64", "dwordx3": "b96", "dwordx4": "b128",
    "ubyte": "b8", "sbyte": "b8", "ushort": "b16", "sshort": "b16", "short": "b16", "byte": "b8",
    "ubyte_d16": "b8", "sbyte_d16": "b8", "short_d16": "b16", "ubyte_d16_hi": "b8", "sbyte_d16_hi": "b8",
    "short_d16_hi": "b16", "byte_d16_hi": "b8",
    "b32": "b32", "b64": "b64", "b96": "b96", "b128": "b128", "u8": "b8", "i8": "b8", "u16": "b16", "i16": "b16",
    "format_x": "b32", "format_xy": "b64", "format_xyz": "b96", "format_xyzw": "b128",
}

_AMD_TRANSCENDENTAL = re.compile(r"^v_(exp|log|rcp|rsq|sqrt|sin|cos)(_legacy)?_(f16|f32|f64)|^v_rcp_iflag_f32|^v_exp_legacy|^v_log_legacy")


def dpp_modifier(operands: str) -> str | None:
    """The DPP control in an AMD operand string (``row_shr``, ``row_bcast:15``, ``quad_perm``...), or None."""
    m = _DPP_RE.search(operands)
    return m.group(1) if m else None


def _amd_mem(prefix: str, rest: str) -> tuple[str, ...]:
    # rest: what follows e.g. "global_" -> "load_dwordx4", "store_short", "atomic_add_f32"
    op, _, width = rest.partition("_")
    if op in ("load", "store"):
        w = _AMD_WIDTH.get(width)
        fam = f"{prefix}.{op}"
        return (fam, f"{fam}.{w}") if w else (fam,)
    if op == "atomic":
        return (f"{prefix}.atomic",)
    return ()


@lru_cache(maxsize=4096)
def _amd_classify(opcode: str) -> tuple[str, ...]:
    op = opcode.lower()
    for suffix in ("_e32", "_e64", "_sdwa"):
        if op.endswith(suffix):
            op = op[: -len(suffix)]
    fams: tuple[str, ...] = ()
    if op.startswith("v_"):
        fams = ("valu",)
        if op.startswith(("v_mfma", "v_smfmac")):
            return fams + ("tensor", "tensor.mfma")
        if op.startswith(("v_accvgpr_read", "v_accvgpr_write", "v_accvgpr_mov")):
            return fams + ("tensor.accvgpr",)
        if op == "v_readlane_b32":
            return fams + ("crosslane", "crosslane.readlane")
        if op == "v_writelane_b32":
            return fams + ("crosslane", "crosslane.writelane")
        if op == "v_readfirstlane_b32":
            return fams + ("crosslane", "crosslane.readfirstlane")
        if _AMD_TRANSCENDENTAL.match(op):
            return fams + ("transcendental",)
        return fams
    if op.startswith("global_"):
        return _amd_mem("global", op[7:])
    if op.startswith("buffer_"):
        return _amd_mem("global", op[7:]) + ("global.buffer",)
    if op.startswith("flat_"):
        return _amd_mem("generic", op[5:])
    if op.startswith("scratch_"):
        return _amd_mem("local", op[8:])
    if op.startswith("ds_"):
        if op.startswith("ds_bpermute"):
            return ("crosslane", "crosslane.ds_bpermute", "shared.crosslane")
        if op.startswith("ds_permute"):
            return ("crosslane", "crosslane.ds_permute", "shared.crosslane")
        if op.startswith("ds_swizzle"):
            return ("crosslane", "crosslane.ds_swizzle", "shared.crosslane")
        body = op[3:]
        if body.startswith(("read", "load")):
            w = _AMD_WIDTH.get(body.split("_", 1)[1] if "_" in body else "", None)
            if body.startswith(("read2", "load_2addr")):
                return ("shared.load", "shared.load.pair")
            return ("shared.load", f"shared.load.{w}") if w else ("shared.load",)
        if body.startswith(("write", "store")):
            w = _AMD_WIDTH.get(body.split("_", 1)[1] if "_" in body else "", None)
            if body.startswith(("write2", "store_2addr")):
                return ("shared.store", "shared.store.pair")
            return ("shared.store", f"shared.store.{w}") if w else ("shared.store",)
        return ("shared.atomic",)
    if op.startswith("s_"):
        if op.startswith(("s_load", "s_buffer_load")):
            return ("salu", "constant.load")
        if op == "s_waitcnt" or op.startswith("s_waitcnt_"):
            return ("sync.wait",)
        if op == "s_barrier":
            return ("sync.barrier",)
        if op == "s_nop":
            return ("nop",)
        if op == "s_sleep":
            return ("sync.sleep",)
        if op.startswith("s_cbranch") or op == "s_branch" or op.startswith(("s_setpc", "s_swappc")):
            return ("control.branch",)
        if op == "s_endpgm":
            return ("control.exit",)
        return ("salu",)
    return ()


def classify(ins: Instruction, vendor: str) -> tuple[str, ...]:
    """Families of one instruction (each family once; parents included)."""
    if vendor == "nvidia":
        return _nv_classify(ins.opcode)
    fams = _amd_classify(ins.opcode)
    if "_dpp" in ins.opcode or (ins.operands and ins.opcode.startswith("v_") and _DPP_RE.search(ins.operands)):
        mod = dpp_modifier(ins.operands)
        fams = fams + ("crosslane", "crosslane.dpp") + ((f"crosslane.dpp.{mod}",) if mod else ())
    if fams and fams[0] == "sync.wait":
        ops = ins.operands.replace(" ", "")
        if "vmcnt(0)" in ops:
            fams = fams + ("sync.wait.vmcnt0",)
        if "lgkmcnt(0)" in ops:
            fams = fams + ("sync.wait.lgkmcnt0",)
    return fams


_NV_BRANCH = {"BRA", "BRX", "JMP", "JMX"}


def is_branch(ins: Instruction, vendor: str) -> bool:
    """A jump within the kernel (not a call, return or exit)."""
    if vendor == "nvidia":
        return ins.base in _NV_BRANCH
    op = ins.opcode
    return op == "s_branch" or op.startswith("s_cbranch")
