"""AMDGCN parsers: assembler text (``clang -S``, Triton's ``asm["amdgcn"]``) and ``llvm-objdump -d`` output
into ``KernelISA``. Pure functions: no subprocesses, no file access.

Resources come from the code object metadata (``amdhsa.kernels[]``, the YAML block ``.amdgpu_metadata``
in a ``.s``, the msgpack note in a code object). Its ``.sgpr_count`` equals the ``; NumSgprs:``
(LLVM 19) / ``; TotalNumSgprs:`` (LLVM 20 and later) comment: the SGPRs the kernel numbers
(``.amdhsa_next_free_sgpr``) plus the ones the hardware reserves for VCC, the XNACK mask and flat
scratch. That total is what limits occupancy, so it is ``AmdResources.sgpr``; the numbered count is
kept in ``KernelISA.metadata["sgpr_numbered"]``.

Counting differences between a ``.s`` and the disassembly of the same code object: ``.p2align``
inside a function (Triton aligns the body after its kernel-argument preload prologue) and the padding
after the last function are filled with ``s_nop 0`` that only appear in the binary. The objdump parser
drops unreachable ``s_nop 0`` runs after an unconditional branch or ``s_endpgm`` and anything past
a function symbol's size, and says how many in ``metadata["padding_nops"]``.
"""

from __future__ import annotations

import re
from typing import Any

from kernelpilot.errors import InputFormatError
from kernelpilot.isa.model import AmdResources, Instruction, KernelISA

__all__ = ["parse_amdgcn_asm", "parse_amdgcn_objdump", "resources_from_metadata", "arch_from_target"]

# --- shared -----------------------------------------------------------------------------------------

_GFX = re.compile(r"\b(gfx[0-9a-f]+)((?::[a-z0-9_]+[+-])*)", re.IGNORECASE)
_BRANCH_PREFIXES = ("s_cbranch_",)
_UNCONDITIONAL_END = frozenset({"s_branch", "s_endpgm", "s_setpc_b64", "s_endpgm_saved", "s_code_end"})
_CALL_SYM = re.compile(r"([A-Za-z_.$][\w.$]*)@(?:rel32|gotpcrel32|gotpcrel|abs32)@lo")
_HIP_DEFAULT_FLAT_WG = 1024


def arch_from_target(target: str) -> tuple[str | None, list[str]]:
    """``amdgcn-amd-amdhsa--gfx942:sramecc+:xnack-`` (or Triton's ``amdgpu9.42-amd-amdhsa-unknown-gfx942``)
    -> (``"gfx942"``, ``["sramecc+", "xnack-"]``)."""
    m = _GFX.search(target or "")
    if not m:
        return None, []
    feats = [f for f in m.group(2).split(":") if f]
    return m.group(1).lower(), feats


def _is_branch(opcode: str) -> bool:
    return opcode == "s_branch" or opcode.startswith(_BRANCH_PREFIXES)


def _int_or_str(text: str) -> int | str:
    t = text.strip()
    try:
        return int(t, 0)
    except ValueError:
        return t


def _find_kernel_md(metadata: dict[str, Any] | None, name: str) -> dict[str, Any] | None:
    if not metadata:
        return None
    for k in metadata.get("amdhsa.kernels") or []:
        if not isinstance(k, dict):
            continue
        sym = str(k.get(".symbol", ""))
        if k.get(".name") == name or sym == name or (sym.endswith(".kd") and sym[:-3] == name):
            return k
    return None


def _total_vgpr(vgpr: int | None, agpr: int | None, arch: str | None) -> int | None:
    """Unified VGPR+AGPR count on gfx90a/gfx94x/gfx950: AGPRs start at roundup(VGPRs, 4)."""
    if vgpr is None:
        return None
    if not agpr:
        return vgpr
    if arch and (arch.startswith("gfx90a") or arch.startswith("gfx94") or arch.startswith("gfx95")):
        return ((vgpr + 3) // 4) * 4 + agpr
    return max(vgpr, agpr)   # gfx908: separate files of equal size


def resources_from_metadata(
    md: dict[str, Any] | None,
    info: dict[str, Any] | None,
    *,
    arch: str | None,
    where: str,
    descriptor: dict[str, Any] | None = None,
) -> AmdResources:
    """Build ``AmdResources`` from one ``amdhsa.kernels[]`` entry, falling back to the ``; Kernel info``
    comments (``info``) where the metadata is missing; ``source`` says which was used."""
    info = info or {}
    descriptor = descriptor or {}

    def ci(key: str) -> int | None:
        v = info.get(key)
        return v if isinstance(v, int) else None

    if md:
        r = AmdResources(
            vgpr=md.get(".vgpr_count"),
            sgpr=md.get(".sgpr_count"),
            agpr=md.get(".agpr_count"),
            vgpr_spill=md.get(".vgpr_spill_count"),
            sgpr_spill=md.get(".sgpr_spill_count"),
            lds_bytes=md.get(".group_segment_fixed_size"),
            scratch_bytes=md.get(".private_segment_fixed_size"),
            wavefront_size=md.get(".wavefront_size"),
            source=f"amdhsa.kernels metadata ({where})",
        )
    elif info:
        lds = info.get("LDSByteSize")
        r = AmdResources(
            vgpr=ci("NumVgprs"),
            sgpr=ci("NumSgprs") if ci("NumSgprs") is not None else ci("TotalNumSgprs"),
            agpr=ci("NumAgprs"),
            lds_bytes=lds if isinstance(lds, int) else None,
            scratch_bytes=ci("ScratchSize"),
            source=f"kernel info comments ({where}); no amdhsa metadata",
        )
    else:
        r = AmdResources(source=f"none: {where} has no metadata for this kernel")
    accum = ci("AccumOffset")
    if accum is None:
        accum = descriptor.get("accum_offset")
    r.accum_offset = accum
    total = ci("TotalNumVgprs")
    r.total_vgpr = total if total is not None else _total_vgpr(r.vgpr, r.agpr, arch)
    return r


def _block_size(md: dict[str, Any] | None) -> tuple[int | None, str | None]:
    if not md or not isinstance(md.get(".max_flat_workgroup_size"), int):
        return None, None
    n = md[".max_flat_workgroup_size"]
    if n == _HIP_DEFAULT_FLAT_WG:
        # clang gives every HIP kernel amdgpu-flat-work-group-size="1,1024" unless __launch_bounds__
        # says otherwise, so 1024 in the binary cannot tell "no launch bounds" from an explicit 1024.
        return n, "max_flat_workgroup_size (1024: the default without __launch_bounds__, an upper bound)"
    return n, "max_flat_workgroup_size"


def _load_yaml(text: str) -> Any:
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    return yaml.load(text, Loader=loader)  # noqa: S506 - a safe loader


# --- .s text ----------------------------------------------------------------------------------------

_S_TARGET = re.compile(r'^\s*\.amdgcn_target\s+"([^"]*)"')
_S_FILE = re.compile(r'^\s*\.file\s+(\d+)\s+"([^"]*)"(?:\s+"([^"]*)")?')
_S_LOC = re.compile(r"^\s*\.loc\s+(\d+)\s+(\d+)")
_S_TYPE_FUNC = re.compile(r"^\s*\.type\s+([^,\s]+)\s*,\s*@function")
_S_LABEL = re.compile(r'^([A-Za-z_.$"][^:\s;]*):')
_S_FUNC_END = re.compile(r"^\.Lfunc_end\d+:")
_S_KD_BEGIN = re.compile(r"^\s*\.amdhsa_kernel\s+(\S+)")
_S_KD_ENTRY = re.compile(r"^\s*\.(amdhsa_\w+)\s+(.*?)\s*$")
_S_SET = re.compile(r"^\s*\.set\s+([^,\s]+)\s*,\s*(.+?)\s*$")
_S_INFO = re.compile(r"^;\s*([A-Za-z][\w:]*(?: [A-Za-z]\w*)?)\s*(?::|=)\s*(.+?)\s*$")
_LEADING_INT = re.compile(r"^(-?\d+)\b")
_INFO_KEYS = frozenset({
    "codeLenInByte", "NumSgprs", "TotalNumSgprs", "NumVgprs", "NumAgprs", "TotalNumVgprs", "ScratchSize",
    "MemoryBound", "FloatMode", "IeeeMode", "LDSByteSize", "SGPRBlocks", "VGPRBlocks",
    "NumSGPRsForWavesPerEU", "NumVGPRsForWavesPerEU", "AccumOffset", "Occupancy", "WaveLimiterHint",
    "NamedBarCnt",
})


class _Func:
    __slots__ = ("name", "instructions", "labels", "branch_labels", "kd", "info", "calls", "ended")

    def __init__(self, name: str) -> None:
        self.name = name
        self.instructions: list[Instruction] = []
        self.labels: dict[str, int] = {}
        self.branch_labels: list[tuple[int, str]] = []
        self.kd: dict[str, int | str] = {}
        self.info: dict[str, Any] = {}
        self.calls: list[str] = []
        self.ended = False


def parse_amdgcn_asm(text: str, *, source: str, arch: str | None = None) -> list[KernelISA]:
    """Parse AMDGCN assembler text into one ``KernelISA`` per kernel.

    ``arch`` overrides the ``.amdgcn_target`` directive. Kernels are the functions with an
    ``.amdhsa_kernel`` block or a metadata entry; a file with none (device functions only) yields its
    functions instead, each with ``metadata["kind"] == "function"``.
    """
    target_arch: str | None = None
    target_features: list[str] = []
    target_string: str | None = None
    files: dict[int, str] = {}
    func_names: set[str] = set()
    funcs: dict[str, _Func] = {}
    order: list[_Func] = []
    cur: _Func | None = None          # function whose body we are in
    last_ended: _Func | None = None   # function the trailing `; Kernel info` belongs to
    kd_func: _Func | None = None      # inside .amdhsa_kernel NAME ... .end_amdhsa_kernel
    loc_line: int | None = None
    loc_file: str | None = None
    sets: dict[str, int | str] = {}
    md_lines: list[str] | None = None
    md_text: str | None = None

    for raw in text.splitlines():
        if md_lines is not None:
            if raw.strip() == ".end_amdgpu_metadata":
                md_text = "\n".join(md_lines)
                md_lines = None
            else:
                md_lines.append(raw)
            continue
        if not raw:
            continue
        c0 = raw[0]
        if c0 == "\t" or c0 == " ":
            s = raw.strip()
            if not s:
                continue
            if s[0] == ".":
                if kd_func is not None:
                    if s.startswith(".end_amdhsa_kernel"):
                        kd_func = None
                        continue
                    m = _S_KD_ENTRY.match(s)
                    if m:
                        kd_func.kd[m.group(1)] = _int_or_str(m.group(2))
                    continue
                if s.startswith(".loc"):
                    m = _S_LOC.match(s)
                    if m:
                        ln = int(m.group(2))
                        loc_line = ln if ln > 0 else None
                        loc_file = files.get(int(m.group(1))) if ln > 0 else None
                    continue
                if s.startswith(".file"):
                    m = _S_FILE.match(s)
                    if m:
                        files[int(m.group(1))] = m.group(3) if m.group(3) is not None else m.group(2)
                    continue
                if s.startswith(".type"):
                    m = _S_TYPE_FUNC.match(s)
                    if m:
                        func_names.add(m.group(1).strip('"'))
                    continue
                if s.startswith(".amdhsa_kernel"):
                    m = _S_KD_BEGIN.match(s)
                    if m:
                        kname = m.group(1)
                        kd_func = funcs.get(kname)
                        if kd_func is None:
                            kd_func = _Func(kname)
                            kd_func.ended = True
                            funcs[kname] = kd_func
                            order.append(kd_func)
                    continue
                if s.startswith(".amdgcn_target"):
                    m = _S_TARGET.match(s)
                    if m:
                        target_string = m.group(1)
                        target_arch, target_features = arch_from_target(target_string)
                    continue
                if s.startswith(".amdgpu_metadata"):
                    md_lines = []
                    continue
                if s.startswith(".set"):
                    m = _S_SET.match(s)
                    if m:
                        sets[m.group(1)] = _int_or_str(m.group(2))
                    continue
                continue
            if s[0] == ";" or cur is None:
                continue
            # an instruction: mnemonic, then operands up to a `;` comment
            semi = s.find(";")
            if semi >= 0:
                s = s[:semi].rstrip()
                if not s:
                    continue
            parts = s.split(None, 1)
            op = parts[0]
            operands = parts[1] if len(parts) > 1 else ""
            idx = len(cur.instructions)
            cur.instructions.append(Instruction(index=idx, opcode=op, operands=operands, line=loc_line, file=loc_file))
            if _is_branch(op) and operands:
                cur.branch_labels.append((idx, operands.split(",", 1)[0].split(None, 1)[0]))
            elif "@rel32@lo" in operands or "@gotpcrel" in operands:
                m = _CALL_SYM.search(operands)
                if m and m.group(1) not in cur.calls:
                    cur.calls.append(m.group(1))
            continue
        if c0 == ";":
            target_func = cur if cur is not None else last_ended
            if target_func is not None:
                m = _S_INFO.match(raw)
                if m and m.group(1) in _INFO_KEYS:
                    val = m.group(2)
                    mi = _LEADING_INT.match(val)
                    target_func.info[m.group(1)] = int(mi.group(1)) if mi else val
            continue
        if c0 == "." and raw.startswith(".Lfunc_end"):
            if cur is not None and _S_FUNC_END.match(raw):
                cur.ended = True
                last_ended = cur
                cur = None
                loc_line = loc_file = None
            continue
        m = _S_LABEL.match(raw)
        if m:
            name = m.group(1).strip('"')
            if name in func_names and (cur is None or name != cur.name):
                f = funcs.get(name)
                if f is None:
                    f = _Func(name)
                    funcs[name] = f
                    order.append(f)
                cur = f
                loc_line = loc_file = None
            elif cur is not None and not name.startswith((".Ltmp", ".Lfunc_begin")):
                cur.labels[name] = len(cur.instructions)

    if cur is not None and cur.instructions and target_string is not None:
        # Compiler output ends every function with its .Lfunc_end label: text that stops inside one is cut short,
        # and what is missing (the rest of the code, the kernel descriptor, the metadata) would go unsaid.
        raise InputFormatError(source, f"the file ends inside {cur.name}'s code (no .Lfunc_end after it): it is cut "
                                       "short; give the whole assembly.")
    metadata: dict[str, Any] = {}
    if md_text is not None:
        try:
            loaded = _load_yaml(md_text)
            if isinstance(loaded, dict):
                metadata = loaded
        except Exception as e:  # a malformed block must not hide the instructions
            metadata = {"_error": f"could not parse .amdgpu_metadata: {e}"}
    if not target_arch and metadata.get("amdhsa.target"):
        target_arch, target_features = arch_from_target(str(metadata["amdhsa.target"]))
    use_arch = arch or target_arch or "unknown"

    kernels = [f for f in order if f.kd or _find_kernel_md(metadata, f.name) is not None]
    kind = "kernel"
    if not kernels:
        kernels = [f for f in order if f.instructions]
        kind = "function"

    out: list[KernelISA] = []
    for f in kernels:
        insts = _resolve_labels(f)
        md = _find_kernel_md(metadata, f.name)
        res = resources_from_metadata(md, f.info, arch=use_arch, where=".s")
        if res.accum_offset is None and isinstance(f.kd.get("amdhsa_accum_offset"), int):
            res.accum_offset = f.kd["amdhsa_accum_offset"]
        bs, bs_src = _block_size(md)
        occ = f.info.get("Occupancy")
        meta: dict[str, Any] = {
            "kind": kind,
            "format": "asm",
            "target": target_string,
            "target_features": target_features,
            "kernel_info": dict(f.info),
            "amdhsa": dict(f.kd),
        }
        if md is not None:
            meta["amdhsa_metadata"] = {k: v for k, v in md.items() if k != ".args"}
            meta["kernarg_count"] = len(md.get(".args") or [])
        if isinstance(f.kd.get("amdhsa_next_free_sgpr"), int):
            meta["sgpr_numbered"] = f.kd["amdhsa_next_free_sgpr"]
        code_len = f.info.get("codeLenInByte")
        if isinstance(code_len, int):
            meta["code_bytes"] = code_len
        prefix = f".L{f.name}."
        fsets = {k[len(prefix):]: v for k, v in sets.items() if k.startswith(prefix)}
        if fsets:
            meta["symbols"] = fsets
        if f.calls:
            meta["calls"] = list(f.calls)
        if metadata.get("_error"):
            meta["metadata_error"] = metadata["_error"]
        out.append(KernelISA(
            name=f.name,
            arch=use_arch,
            vendor="amd",
            source=source,
            instructions=insts,
            resources=res,
            block_size=bs,
            block_size_source=bs_src,
            block_size_assumed=bs == _HIP_DEFAULT_FLAT_WG,
            compiler_occupancy=occ if isinstance(occ, int) else None,
            labels=dict(f.labels),
            metadata=meta,
        ))
    return out


def _resolve_labels(f: _Func) -> list[Instruction]:
    insts = f.instructions
    n = len(insts)
    for idx, label in f.branch_labels:
        t = f.labels.get(label)
        if t is not None and t < n:
            i = insts[idx]
            insts[idx] = Instruction(index=i.index, opcode=i.opcode, operands=i.operands, target=t,
                                     line=i.line, file=i.file)
    return insts


# --- llvm-objdump -d --------------------------------------------------------------------------------

_D_SYMTAB_ROW = re.compile(r"^([0-9a-fA-F]{8,16})\s(.{7})\s(\S+)\s+([0-9a-fA-F]{8,16})\s+(?:\.\w+\s+)?(\S+)\s*$")
_D_HEADER = re.compile(r"^([0-9a-fA-F]{8,16}) <(.+)>:\s*$")
_D_INST = re.compile(
    r"^\s+(\S+)(?:[ \t]+(.*?))?[ \t]*//[ \t]*([0-9A-Fa-f]+):((?:[ \t]+[0-9A-Fa-f]{8})+)[ \t]*(?:<([^>]*)>)?\s*$"
)
_D_BARE = re.compile(r"^\s+([a-z_][\w.]*)(?:[ \t]+(.*?))?\s*$")
_D_SYMOFF = re.compile(r"^(.*?)(?:\+0x([0-9a-fA-F]+))?$")
_OBJDUMP_LABEL = re.compile(r"^L\d+$")


class _DFunc:
    __slots__ = ("name", "start", "rows", "label_addrs", "undecoded")

    def __init__(self, name: str, start: int) -> None:
        self.name = name
        self.start = start
        self.undecoded = 0   # words llvm-objdump could not decode (printed as `.long 0x...`)
        # (opcode, operands, address or None, size in bytes, symbolic target text or None)
        self.rows: list[tuple[str, str, int | None, int, str | None]] = []
        self.label_addrs: dict[str, int] = {}


def parse_amdgcn_objdump(text: str, metadata: dict[str, Any] | None, *, source: str, arch: str) -> list[KernelISA]:
    """Parse ``llvm-objdump -d [-t] [--symbolize-operands] --mcpu=ARCH`` output of an AMDGPU code object.

    ``metadata`` is the code object's ``NT_AMDGPU_METADATA`` note as a dict (``amdhsa.kernels`` ...,
    see ``toolchain.amd_binary.read_code_object_metadata``). With ``-t`` in the output the function
    symbols' sizes bound each kernel exactly; without it a function runs to the next symbol.
    Branch targets: llvm-objdump 19 prints ``s_branch 56`` (a signed offset in words from the next
    instruction: target = address + 4 + 4 * offset) followed by ``<sym+0x100>``, or ``s_branch L0``
    with ``--symbolize-operands``; both are resolved to instruction indices.
    """
    sym_sizes: dict[str, int] = {}
    func_syms: set[str] = set()
    funcs: list[_DFunc] = []
    sym_addr: dict[str, int] = {}
    cur: _DFunc | None = None
    in_symtab = False

    for raw in text.splitlines():
        if not raw:
            in_symtab = False
            continue
        c0 = raw[0]
        if c0 == "\t" or c0 == " ":
            if cur is None:
                continue
            m = _D_INST.match(raw)
            if m:
                op = m.group(1)
                words = m.group(4).split()
                cur.rows.append((op, (m.group(2) or "").strip(), int(m.group(3), 16), 4 * len(words), m.group(5)))
                continue
            s = raw.strip()
            if not s or s.startswith(("//", ";")):
                continue
            m = _D_BARE.match(raw)
            if m:
                cur.rows.append((m.group(1), (m.group(2) or "").strip(), None, 0, None))
            continue
        if in_symtab:
            m = _D_SYMTAB_ROW.match(raw)
            if m:
                flags, name = m.group(2), m.group(5)
                sym_sizes[name] = int(m.group(4), 16)
                sym_addr.setdefault(name, int(m.group(1), 16))
                if "F" in flags:
                    func_syms.add(name)
                continue
            in_symtab = False
        if raw.startswith("SYMBOL TABLE:"):
            in_symtab = True
            continue
        m = _D_HEADER.match(raw)
        if m:
            addr, name = int(m.group(1), 16), m.group(2)
            is_label = name not in func_syms and (bool(func_syms) or _OBJDUMP_LABEL.match(name) is not None)
            if is_label and cur is not None:
                cur.label_addrs[name] = addr
            else:
                cur = _DFunc(name, addr)
                funcs.append(cur)
                sym_addr[name] = addr
            continue

    kernels_md = [k for k in (metadata or {}).get("amdhsa.kernels") or [] if isinstance(k, dict)]
    descriptors = (metadata or {}).get("kernelpilot.descriptors") or {}
    target_string = (metadata or {}).get("amdhsa.target")
    _, features = arch_from_target(str(target_string or ""))

    chosen = [f for f in funcs if _find_kernel_md(metadata, f.name) is not None]
    kind = "kernel"
    if not chosen:
        chosen = [f for f in funcs if f.rows]
        kind = "function"

    out: list[KernelISA] = []
    for f in chosen:
        insts, labels, dropped_pad, dropped_tail = _objdump_function(f, sym_sizes.get(f.name), sym_addr)
        md = _find_kernel_md(metadata, f.name)
        desc = descriptors.get(f.name) or {}
        res = resources_from_metadata(md, None, arch=arch, where="code object note", descriptor=desc)
        if md is None and kernels_md:
            res.source = "none: not a kernel in the code object metadata"
        bs, bs_src = _block_size(md)
        meta: dict[str, Any] = {
            "kind": kind,
            "format": "objdump",
            "target": target_string,
            "target_features": features,
            "start_address": f.start,
            "padding_nops": dropped_pad,
            "trailing_padding_instructions": dropped_tail,
        }
        if f.name in sym_sizes:
            meta["code_bytes"] = sym_sizes[f.name]
        if md is not None:
            meta["amdhsa_metadata"] = {k: v for k, v in md.items() if k != ".args"}
            meta["kernarg_count"] = len(md.get(".args") or [])
        if desc:
            meta["kernel_descriptor"] = dict(desc)
        if f.undecoded:
            meta["undecoded_words"] = f.undecoded
        out.append(KernelISA(
            name=f.name,
            arch=arch,
            vendor="amd",
            source=source,
            instructions=insts,
            resources=res,
            block_size=bs,
            block_size_source=bs_src,
            block_size_assumed=bs == _HIP_DEFAULT_FLAT_WG,
            compiler_occupancy=None,
            labels=labels,
            metadata=meta,
        ))
    return out


def _branch_target_addr(
    op: str, operands: str, addr: int | None, sym: str | None, labels: dict[str, int], sym_addr: dict[str, int]
) -> int | None:
    first = operands.split(",", 1)[0].strip()
    if first in labels:
        return labels[first]
    if addr is not None and first:
        try:
            off = int(first, 0)
        except ValueError:
            off = None
        if off is not None:
            if off >= 0x8000:          # printed unsigned by some versions
                off -= 0x10000
            return addr + 4 + 4 * off
    if sym:
        m = _D_SYMOFF.match(sym)
        if m and m.group(1) in sym_addr:
            return sym_addr[m.group(1)] + (int(m.group(2), 16) if m.group(2) else 0)
    return None


def _objdump_function(
    f: _DFunc, size: int | None, sym_addr: dict[str, int]
) -> tuple[list[Instruction], dict[str, int], int, int]:
    rows = f.rows
    dropped_tail = 0
    if size is not None and size > 0:
        end = f.start + size
        kept = [r for r in rows if r[2] is None or r[2] < end]
        dropped_tail = len(rows) - len(kept)
        rows = kept
    decoded = [r for r in rows if r[0][0] != "."]
    f.undecoded = len(rows) - len(decoded)
    rows = decoded
    # branch targets by address
    targets: dict[int, int | None] = {}
    target_addrs: set[int] = set(f.label_addrs.values())
    for i, (op, operands, addr, _sz, sym) in enumerate(rows):
        if _is_branch(op):
            t = _branch_target_addr(op, operands, addr, sym, f.label_addrs, sym_addr)
            targets[i] = t
            if t is not None:
                target_addrs.add(t)
    # unreachable s_nop 0 runs after an unconditional end: alignment padding
    keep: list[int] = []
    dropped = 0
    in_pad = False
    for i, (op, operands, addr, _sz, _sym) in enumerate(rows):
        if in_pad:
            if op == "s_nop" and operands in ("0", "0x0") and (addr is None or addr not in target_addrs):
                dropped += 1
                continue
            in_pad = False
        keep.append(i)
        if op in _UNCONDITIONAL_END:
            in_pad = True
    addr_to_index: dict[int, int] = {}
    insts: list[Instruction] = []
    for new_i, old_i in enumerate(keep):
        op, operands, addr, _sz, _sym = rows[old_i]
        if addr is not None:
            addr_to_index[addr] = new_i
        insts.append(Instruction(index=new_i, opcode=op, operands=operands, address=addr))
    for new_i, old_i in enumerate(keep):
        if old_i in targets and targets[old_i] is not None:
            t = addr_to_index.get(targets[old_i])
            if t is not None:
                i = insts[new_i]
                insts[new_i] = Instruction(index=i.index, opcode=i.opcode, operands=i.operands, address=i.address,
                                           target=t)
    labels: dict[str, int] = {}
    for name, a in f.label_addrs.items():
        if a in addr_to_index:
            labels[name] = addr_to_index[a]
    # name every branch target the way llvm-objdump --symbolize-operands would, when it did not
    if not labels:
        named = sorted({i.target for i in insts if i.target is not None})
        labels = {f"L{k}": t for k, t in enumerate(named)}
    return insts, labels, dropped, dropped_tail
