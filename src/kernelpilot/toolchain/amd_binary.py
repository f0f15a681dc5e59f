"""Read AMDGPU code objects (``.hsaco``, ``.co``, ``.o``): the target arch, the metadata note, the kernel
descriptors, and the disassembly (``llvm-objdump``).

The ELF is read here in Python (headers, section table, symbols, notes) so that a file that is not an
AMDGPU code object, or is truncated, is refused with ``InputFormatError`` before any tool sees it.
The ``NT_AMDGPU_METADATA`` note is msgpack (code object v3 and later); ``llvm-readelf --notes`` prints
the same map as YAML and is the fallback when the ``msgpack`` package is missing.
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kernelpilot.errors import InputFormatError, KernelpilotError, ToolError
from kernelpilot.toolchain.find import find_tool
from kernelpilot.toolchain.run import run_tool

__all__ = [
    "disassemble_code_object",
    "read_code_object_metadata",
    "code_object_arch",
    "read_kernel_descriptors",
    "AMDGPU_MACH",
]

EM_AMDGPU = 224
ET_REL = 1
SHT_SYMTAB = 2
SHT_NOTE = 7
SHT_NOBITS = 8
SHT_DYNSYM = 11
NT_AMDGPU_METADATA = 32
EF_AMDGPU_MACH = 0xFF
_NOT_CO = "not an AMDGPU code object"
_BUNDLE_MAGIC = b"__CLANG_OFFLOAD_BUNDLE__"
_GFX = re.compile(r"\b(gfx[0-9a-f]+)", re.IGNORECASE)

# EF_AMDGPU_MACH values (LLVM's ELF.h / AMDGPUUsage "AMDGPU ELF Header e_flags").
AMDGPU_MACH: dict[int, str] = {
    0x020: "gfx600", 0x021: "gfx601", 0x022: "gfx700", 0x023: "gfx701", 0x024: "gfx702", 0x025: "gfx703",
    0x026: "gfx704", 0x027: "gfx801", 0x028: "gfx802", 0x029: "gfx803", 0x02A: "gfx810", 0x02C: "gfx900",
    0x02D: "gfx902", 0x02E: "gfx904", 0x02F: "gfx906", 0x030: "gfx908", 0x031: "gfx909", 0x032: "gfx90c",
    0x033: "gfx1010", 0x034: "gfx1011", 0x035: "gfx1012", 0x036: "gfx1030", 0x037: "gfx1031",
    0x038: "gfx1032", 0x039: "gfx1033", 0x03A: "gfx602", 0x03B: "gfx705", 0x03C: "gfx805", 0x03D: "gfx1035",
    0x03E: "gfx1034", 0x03F: "gfx90a", 0x040: "gfx940", 0x041: "gfx1100", 0x042: "gfx1013", 0x043: "gfx1150",
    0x044: "gfx1103", 0x045: "gfx1036", 0x046: "gfx1101", 0x047: "gfx1102", 0x048: "gfx1200", 0x04A: "gfx1151",
    0x04B: "gfx941", 0x04C: "gfx942", 0x04E: "gfx1201", 0x04F: "gfx950", 0x051: "gfx9-generic",
    0x052: "gfx10-1-generic", 0x053: "gfx10-3-generic", 0x054: "gfx11-generic", 0x055: "gfx1152",
    0x058: "gfx1153", 0x059: "gfx12-generic", 0x05F: "gfx9-4-generic",
}


@dataclass
class _Section:
    name: str
    type: int
    addr: int
    offset: int
    size: int
    link: int
    entsize: int


@dataclass
class _Elf:
    path: str
    data: bytes
    e_type: int
    e_flags: int
    sections: list[_Section] = field(default_factory=list)


def _bad(path: str | Path, why: str) -> InputFormatError:
    return InputFormatError(str(path), f"{_NOT_CO} ({why})",
                            hint="Give a .hsaco/.co/.o built for an AMD GPU (clang --offload-arch, Triton's asm['hsaco']).")


def _read_elf(path: str | Path) -> _Elf:
    p = Path(path)
    try:
        data = p.read_bytes()
    except FileNotFoundError:
        raise KernelpilotError(f"{p}: no such file.") from None
    except IsADirectoryError:
        raise KernelpilotError(f"{p}: not a file.") from None
    except OSError as e:
        raise KernelpilotError(f"{p}: cannot read: {e.strerror}.") from None
    if data.startswith(_BUNDLE_MAGIC):
        raise InputFormatError(
            str(p), "a clang offload bundle, not a single code object",
            hint="Extract one with `clang-offload-bundler --unbundle --type=o "
                 "--targets=hipv4-amdgcn-amd-amdhsa--gfx942 --input=FILE --output=out.co`.")
    if len(data) < 64:
        raise _bad(p, f"{len(data)} bytes, shorter than an ELF header" if data[:4] == b"\x7fELF" else "no ELF header")
    if data[:4] != b"\x7fELF":
        raise _bad(p, "no ELF magic")
    if data[4] != 2 or data[5] != 1:
        raise _bad(p, "not a 64-bit little-endian ELF")
    (e_type, e_machine, _ver, _entry, _phoff, e_shoff, e_flags, _ehsize, _phentsize, _phnum,
     e_shentsize, e_shnum, e_shstrndx) = struct.unpack_from("<HHIQQQIHHHHHH", data, 16)
    if e_machine != EM_AMDGPU:
        raise _bad(p, f"ELF machine {e_machine}, not EM_AMDGPU (224)")
    elf = _Elf(str(p), data, e_type, e_flags)
    if e_shnum == 0:
        return elf
    if e_shentsize != 64 or e_shoff + e_shnum * 64 > len(data):
        raise _bad(p, f"truncated or corrupted: section table at {e_shoff} runs past the end of the "
                      f"{len(data)}-byte file")
    raw = []
    for i in range(e_shnum):
        name, typ, _fl, addr, off, size, link, _info, _align, entsize = struct.unpack_from(
            "<IIQQQQIIQQ", data, e_shoff + 64 * i)
        if typ != SHT_NOBITS and typ != 0 and off + size > len(data):
            raise _bad(p, f"truncated or corrupted: section {i} ends at byte {off + size} of a "
                          f"{len(data)}-byte file")
        raw.append((name, typ, addr, off, size, link, entsize))
    if e_shstrndx >= len(raw):
        raise _bad(p, "corrupted section header string table index")
    str_off, str_size = raw[e_shstrndx][3], raw[e_shstrndx][4]
    for name, typ, addr, off, size, link, entsize in raw:
        elf.sections.append(_Section(_cstr(data, str_off + name, str_off + str_size), typ, addr, off, size, link, entsize))
    return elf


def _cstr(data: bytes, start: int, limit: int) -> str:
    if start >= limit or start >= len(data):
        return ""
    end = data.find(b"\0", start, min(limit, len(data)))
    if end < 0:
        end = min(limit, len(data))
    return data[start:end].decode("utf-8", "replace")


def _notes(elf: _Elf):
    """Yield (name, type, desc) of every note in SHT_NOTE sections."""
    for s in elf.sections:
        if s.type != SHT_NOTE:
            continue
        pos, end = s.offset, s.offset + s.size
        while pos + 12 <= end:
            namesz, descsz, ntype = struct.unpack_from("<III", elf.data, pos)
            pos += 12
            name_end = pos + ((namesz + 3) & ~3)
            desc_end = name_end + ((descsz + 3) & ~3)
            if name_end + descsz > end:
                raise _bad(elf.path, f"corrupted note in section {s.name or '?'}")
            name = elf.data[pos:pos + namesz].rstrip(b"\0").decode("ascii", "replace")
            yield name, ntype, elf.data[name_end:name_end + descsz]
            pos = desc_end


def _symbols(elf: _Elf):
    """Yield (name, value, size, type, shndx) from .symtab (else .dynsym)."""
    tabs = [s for s in elf.sections if s.type == SHT_SYMTAB] or [s for s in elf.sections if s.type == SHT_DYNSYM]
    for tab in tabs[:1]:
        if tab.link >= len(elf.sections):
            raise _bad(elf.path, "corrupted symbol table link")
        strtab = elf.sections[tab.link]
        n = tab.size // 24
        for i in range(n):
            st_name, st_info, _other, shndx, value, size = struct.unpack_from("<IBBHQQ", elf.data, tab.offset + 24 * i)
            name = _cstr(elf.data, strtab.offset + st_name, strtab.offset + strtab.size)
            yield name, value, size, st_info & 0xF, shndx


def code_object_arch(path: str | Path) -> str:
    """The processor a code object was built for (``gfx942``), from the ELF header's e_flags, else
    from the metadata's ``amdhsa.target``. Raises ``InputFormatError`` for anything else."""
    elf = _read_elf(path)
    mach = AMDGPU_MACH.get(elf.e_flags & EF_AMDGPU_MACH)
    if mach:
        return mach
    md = _metadata_from_elf(elf)
    m = _GFX.search(str(md.get("amdhsa.target", "")))
    if m:
        return m.group(1).lower()
    raise _bad(path, f"unknown EF_AMDGPU_MACH 0x{elf.e_flags & EF_AMDGPU_MACH:02x} and no amdhsa.target")


def _metadata_from_elf(elf: _Elf) -> dict[str, Any]:
    for name, ntype, desc in _notes(elf):
        if name == "AMDGPU" and ntype == NT_AMDGPU_METADATA:
            try:
                import msgpack
            except ImportError:
                return _metadata_via_readelf(elf.path)
            try:
                md = msgpack.unpackb(desc, raw=False, strict_map_key=False)
            except Exception as e:
                raise _bad(elf.path, f"its NT_AMDGPU_METADATA note is not valid msgpack: {e}") from None
            if not isinstance(md, dict):
                raise _bad(elf.path, "its NT_AMDGPU_METADATA note is not a map")
            return md
    return {}


def _metadata_via_readelf(path: str) -> dict[str, Any]:
    import yaml

    tool = find_tool("llvm-readelf")
    try:
        res = run_tool([tool, "--notes", path], tool="llvm-readelf")
    except ToolError as e:
        raise _bad(path, f"llvm-readelf could not read it: {e.stderr.strip()[:200]}") from None
    text = res.stdout
    start = text.find("---")
    end = text.find("\n...", start)
    if start < 0 or end < 0:
        return {}
    body = text[start:end]
    # readelf indents the first line of the YAML document only
    lines = body.splitlines()
    md = yaml.safe_load("\n".join(l.strip() if i == 0 else l for i, l in enumerate(lines)))
    return md if isinstance(md, dict) else {}


def read_kernel_descriptors(path: str | Path) -> dict[str, dict[str, int]]:
    """Decode each kernel descriptor (``NAME.kd``, 64 bytes in .rodata) of a code object:
    kernel name -> fields, among them ``accum_offset`` (gfx90a and later) and the granulated counts."""
    return _descriptors(_read_elf(path))


def _descriptors(elf: _Elf) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    gfx90a_plus = (elf.e_flags & EF_AMDGPU_MACH) in (0x3F, 0x40, 0x4B, 0x4C, 0x4F, 0x5F)
    for name, value, size, stype, shndx in _symbols(elf):
        if not name.endswith(".kd") or size != 64 or shndx == 0 or shndx >= len(elf.sections):
            continue
        sec = elf.sections[shndx]
        if sec.type == SHT_NOBITS:
            continue
        off = sec.offset + (value if elf.e_type == ET_REL else value - sec.addr)
        if off < 0 or off + 64 > len(elf.data):
            raise _bad(elf.path, f"kernel descriptor {name} lies outside the file")
        (group, private, kernarg, _r0, entry, _r1, rsrc3, rsrc1, rsrc2, props, preload, _r2) = struct.unpack_from(
            "<IIIIq20sIIIHHI", elf.data, off)
        d = {
            "group_segment_fixed_size": group,
            "private_segment_fixed_size": private,
            "kernarg_size": kernarg,
            "compute_pgm_rsrc1": rsrc1,
            "compute_pgm_rsrc2": rsrc2,
            "compute_pgm_rsrc3": rsrc3,
            "kernel_code_properties": props,
            "vgpr_granules": rsrc1 & 0x3F,
            "sgpr_granules": (rsrc1 >> 6) & 0xF,
            "scratch_en": rsrc2 & 1,
        }
        if gfx90a_plus:
            d["accum_offset"] = ((rsrc3 & 0x3F) + 1) * 4
            d["tg_split"] = (rsrc3 >> 16) & 1
        out[name[:-3]] = d
    return out


def read_code_object_metadata(path: str | Path) -> dict[str, Any]:
    """The code object's ``NT_AMDGPU_METADATA`` note as a dict (``amdhsa.kernels``, ``amdhsa.target``,
    ``amdhsa.version``), plus ``"kernelpilot.descriptors"``: the decoded kernel descriptors by kernel
    name (see ``read_kernel_descriptors``). ``{}`` plus descriptors when the object has no note."""
    elf = _read_elf(path)
    md = dict(_metadata_from_elf(elf))
    desc = _descriptors(elf)
    if desc:
        md["kernelpilot.descriptors"] = desc
    return md


def disassemble_code_object(path: str | Path, *, arch: str | None = None) -> str:
    """``llvm-objdump -d -t --mcpu=ARCH PATH``: the disassembly with the symbol table in front (the
    symbol sizes bound each function; see ``isa.amdgcn.parse_amdgcn_objdump``). ``arch`` defaults to
    the one recorded in the code object."""
    elf = _read_elf(path)
    if not any(s.type != SHT_NOBITS and s.name == ".text" for s in elf.sections):
        raise _bad(path, "no .text section")
    mcpu = arch or code_object_arch(path)
    tool = find_tool("llvm-objdump")
    try:
        res = run_tool([tool, "-d", "-t", f"--mcpu={mcpu}", str(path)], tool="llvm-objdump")
    except ToolError as e:
        if "not a recognized processor" in e.stderr or "unknown target" in e.stderr.lower():
            raise ToolError("llvm-objdump", e.command, e.returncode, e.stderr,
                            message=f"{tool.name} does not know {mcpu}.", hint=_NEWER_LLVM) from None
        raise _bad(path, f"llvm-objdump could not read it: {e.stderr.strip()[:300]}") from None
    if "is not a recognized processor" in res.stderr:
        raise ToolError("llvm-objdump", res.command, res.returncode, res.stderr,
                        message=f"{tool.name} does not know {mcpu}.", hint=_NEWER_LLVM)
    decoded = undecoded = 0
    for line in res.stdout.splitlines():
        if line.startswith("\t") and "// " in line:
            if line.startswith(("\t.long", "\t.short", "\t.byte")):
                undecoded += 1
            elif not line.startswith("\ts_nop 0 "):   # alignment padding is s_nop 0: do not count it
                decoded += 1
    if undecoded and undecoded >= decoded:
        raise _bad(path, f"corrupted: {undecoded} of {decoded + undecoded} words in .text do not decode as "
                         f"{mcpu} instructions")
    return res.stdout


_NEWER_LLVM = ("Use a newer LLVM (gfx950 needs LLVM 20) through KPILOT_LLVM_OBJDUMP, or pass arch='gfx942' to "
               "decode it as gfx942 (instructions new in the later chip will not decode).")
