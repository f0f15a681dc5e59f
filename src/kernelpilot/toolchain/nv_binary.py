"""Read NVIDIA binaries: check what a file is, find its arch, pull one arch's cubin out of a fatbin or an
executable, disassemble it, and dump its resource usage and ELF attributes.

What kind of file (read here, in Python, with no tool; ``classify``):

- a **cubin**: an ELF file with ``e_machine == EM_CUDA (190)``; its arch comes from ``e_flags`` (the SM
  number: bits 8..15 for the ELF ABI version 8 that CUDA 13 writes, bits 0..7 for ABI 7 of CUDA <= 12)
  and, for the ``a`` (arch-specific) variants, from ``EF_CUDA_ACCELERATORS`` (0x800 in ABI-7 ``e_flags``)
  or the ``.nv.compat`` attribute ``EICOMPAT_ATTR_CUDA_ACCELERATOR_TARGET`` (ABI 8: sm_90 and sm_90a
  cubins have the same ``e_flags``);
- a **fatbin** (``nvcc -fatbin``; magic ``0xBA55ED50``) or a **host ELF** holding one (an executable or
  an ``nvcc -c`` object: a ``.nv_fatbin`` / ``__nv_relfatbin`` section): ``cuobjdump -lelf`` lists the
  cubins inside and ``cuobjdump -xelf NAME`` writes one out.

Anything else, or an ELF whose header or section table does not fit in the file, raises
``InputFormatError(path, "not a CUDA binary (...)")``.

Disassembler: ``nvdisasm -c -hex -gi`` is preferred. It prints every instruction with both 64-bit
words (the second holds the scheduling control bits), labels branch targets (`` `(.L_x_3)``), names
``BRX`` jump tables, and, for a cubin built with ``-lineinfo``, precedes instructions with
``//## File "...", line N [inlined at "...", line M]`` (``-gi`` gives the whole inline chain; ``-g``
only the innermost frame). ``cuobjdump -sass`` prints the same instruction words but no source lines
and absolute branch addresses; it reads fatbins directly and is the fallback when nvdisasm is missing.
The SASS parser (``isa/sass.py``) reads both.

Launch bounds: ``cuobjdump -elf`` decodes each kernel's ``.nv.info.<kernel>`` attributes;
``EIATTR_MAX_THREADS`` holds ``__launch_bounds__(N)`` / ``.maxntid`` and ``EIATTR_REQNTID`` ``.reqntid``
(``parse_launch_bounds``; ``launch_bounds`` gives threads per block).

Tool versions checked: nvcc/ptxas 13.0; cuobjdump and nvdisasm 13.1 from Triton 3.9's wheel read the
CUDA 13.0 cubins (both ELF ABI 8 and the ABI-7 cubins of Triton's own ptxas 12.9). PyPI's
``nvidia-cuda-cuobjdump`` / ``nvidia-cuda-nvdisasm`` (13.2 and later; binaries under ``nvidia/cu13/bin``)
print identical output.
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from kernelpilot.errors import InputFormatError, ToolNotFoundError, UsageError
from kernelpilot.toolchain.find import find_tool
from kernelpilot.toolchain.run import ensure_file, run_tool

__all__ = [
    "BinaryKind",
    "CubinInfo",
    "EmbeddedCubin",
    "classify",
    "read_cubin_info",
    "cubin_arch",
    "list_cubins",
    "extract_cubins",
    "select_cubin",
    "disassemble_sass",
    "resource_usage",
    "elf_dump",
    "launch_bounds_text",
    "LaunchBounds",
    "parse_launch_bounds",
    "launch_bounds_info",
    "launch_bounds",
]

BinaryKind = Literal["cubin", "fatbin", "host"]

EM_CUDA = 190
FATBIN_MAGIC = 0xBA55ED50
_EF_CUDA_ACCELERATORS_V7 = 0x800
_EICOMPAT_ATTR_CUDA_ACCELERATOR_TARGET = 0x09
_EIFMT_SVAL = 4
_HOST_FATBIN_SECTIONS = (b".nv_fatbin", b"__nv_relfatbin", b".nvFatBinSegment")


@dataclass(frozen=True)
class CubinInfo:
    path: Path
    arch: str               # sm_90, sm_90a, sm_100a
    sm: int                 # 90
    abi_version: int        # ELF EI_ABIVERSION: 7 (CUDA <= 12) or 8 (CUDA 13)
    e_flags: int
    functions: tuple[str, ...]  # names of the .text.<name> sections (kernels and separate device functions)


@dataclass(frozen=True)
class EmbeddedCubin:
    """One cubin inside a fatbin or an executable, as ``cuobjdump -lelf`` lists it."""

    index: int
    name: str       # the file name cuobjdump -xelf writes: "multi.2.sm_90a.cubin"
    arch: str       # sm_90a


def _bad(path: Path, why: str, hint: str | None = None) -> InputFormatError:
    return InputFormatError(str(path), f"not a CUDA binary ({why})", hint=hint)


def _read(path: str | Path) -> tuple[Path, bytes]:
    p = ensure_file(path)
    try:
        return p, p.read_bytes()
    except OSError as e:
        raise InputFormatError(str(p), f"cannot be read: {e.strerror}") from None


def _sections(p: Path, b: bytes) -> list[tuple[bytes, int, int, int]]:
    """(name, type, offset, size) of each section of a 64-bit little-endian ELF, checking every bound."""
    if len(b) < 64:
        raise _bad(p, f"{len(b)} bytes, too short for an ELF header")
    if b[4] != 2 or b[5] != 1:
        raise _bad(p, "not a 64-bit little-endian ELF")
    e_shoff = struct.unpack_from("<Q", b, 0x28)[0]
    e_shentsize, e_shnum, e_shstrndx = struct.unpack_from("<HHH", b, 0x3A)
    if e_shnum == 0 or e_shentsize < 64:
        raise _bad(p, "ELF without a section table")
    if e_shoff + e_shnum * e_shentsize > len(b):
        raise _bad(p, f"truncated: the section table ends at byte {e_shoff + e_shnum * e_shentsize}, the file has {len(b)}")
    if e_shstrndx >= e_shnum:
        raise _bad(p, "corrupted ELF section-name index")
    raw = []
    for i in range(e_shnum):
        name_off, sh_type, _flags, _addr, off, size = struct.unpack_from("<IIQQQQ", b, e_shoff + i * e_shentsize)
        if sh_type != 8 and sh_type != 0 and off + size > len(b):  # 8 = SHT_NOBITS
            raise _bad(p, f"truncated or corrupted: section {i} lies past the end of the file")
        raw.append((name_off, sh_type, off, size))
    _, _, str_off, str_size = raw[e_shstrndx]
    strtab = b[str_off:str_off + str_size]
    out = []
    for name_off, sh_type, off, size in raw:
        if name_off > len(strtab):
            raise _bad(p, "corrupted ELF section names")
        end = strtab.find(b"\0", name_off)
        out.append((strtab[name_off:end if end >= 0 else len(strtab)], sh_type, off, size))
    return out


def classify(path: str | Path) -> BinaryKind:
    """``"cubin"``, ``"fatbin"`` or ``"host"`` (an executable / object holding a fatbin); anything else
    raises ``InputFormatError``."""
    p, b = _read(path)
    return _classify(p, b)


def _classify(p: Path, b: bytes) -> BinaryKind:
    if len(b) >= 4 and struct.unpack_from("<I", b, 0)[0] == FATBIN_MAGIC:
        return "fatbin"
    if len(b) < 4 or b[:4] != b"\x7fELF":
        what = "text" if b[:200].isascii() and b"\0" not in b[:200] else "unknown data"
        raise _bad(p, f"no ELF or fatbin header; the file holds {what}")
    secs = _sections(p, b)
    machine = struct.unpack_from("<H", b, 18)[0]
    if machine == EM_CUDA:
        return "cubin"
    if any(name in _HOST_FATBIN_SECTIONS for name, *_ in secs):
        return "host"
    raise _bad(p, f"an ELF file for machine {machine} with no CUDA fatbin section")


def read_cubin_info(path: str | Path) -> CubinInfo:
    """Arch and kernel sections of a cubin, read from its ELF header (no tool needed)."""
    p, b = _read(path)
    kind = _classify(p, b)
    if kind != "cubin":
        raise _bad(p, f"a {kind} holding cubins, not a single cubin",
                   hint="Extract one with `cuobjdump -xelf` or pass the arch to pick.")
    secs = _sections(p, b)
    abi = b[8]
    flags = struct.unpack_from("<I", b, 48)[0]
    if abi >= 8:
        sm = (flags >> 8) & 0xFF
        accel = False
        for name, _t, off, size in secs:
            if name == b".nv.compat":
                accel = _compat_accelerator(b[off:off + size])
                break
    else:
        sm = flags & 0xFF
        accel = bool(flags & _EF_CUDA_ACCELERATORS_V7)
    if not 30 <= sm <= 255:
        raise _bad(p, f"implausible SM version {sm} in the ELF flags 0x{flags:x}")
    functions = tuple(
        name[len(b".text."):].decode("utf-8", "replace") for name, *_ in secs if name.startswith(b".text.")
    )
    return CubinInfo(p, f"sm_{sm}{'a' if accel else ''}", sm, abi, flags, functions)


def _compat_accelerator(data: bytes) -> bool:
    """Read EICOMPAT_ATTR_CUDA_ACCELERATOR_TARGET from a ``.nv.compat`` section: records of
    (format byte, attribute byte, 2-byte value), where format 4 (EIFMT_SVAL) means the value is a length
    and that many bytes follow."""
    i = 0
    while i + 4 <= len(data):
        fmt, attr = data[i], data[i + 1]
        if fmt == 0:
            break
        if fmt == _EIFMT_SVAL:
            i += 4 + struct.unpack_from("<H", data, i + 2)[0]
            continue
        if attr == _EICOMPAT_ATTR_CUDA_ACCELERATOR_TARGET:
            return data[i + 2] != 0
        i += 4
    return False


def cubin_arch(path: str | Path) -> str:
    """The arch of a cubin (``sm_90a``). For a fatbin or executable use ``list_cubins``."""
    return read_cubin_info(path).arch


_TOOL_PREFIX = re.compile(r"^\s*\w+\s+(?:fatal|error|info|warning)\s*:\s*")


def _tool_message(tool: str, stderr: str, returncode: int) -> str:
    """The tool's first complaint, without its ``nvdisasm fatal   :`` prefix."""
    lines = [l for l in stderr.splitlines() if l.strip()]
    serious = [l for l in lines if "warning" not in l.split(":", 1)[0]] or lines
    if not serious:
        return f"{tool} exited with code {returncode}"
    return f"{tool}: {_TOOL_PREFIX.sub('', serious[0]).strip()}"


def _newer_hint(tool: str) -> str:
    return (f"If it is a cubin from a newer CUDA than this {tool}, install a newer one: "
            f"`pip install -U nvidia-cuda-{tool}`.")


def _cuobjdump(args: list[str], p: Path, *, cwd: Path | None = None) -> str:
    exe = find_tool("cuobjdump")
    res = run_tool([exe, *args, p], tool="cuobjdump", cwd=cwd, check=False)
    if res.returncode != 0:
        raise _bad(p, _tool_message("cuobjdump", res.stderr or res.stdout, res.returncode), hint=_newer_hint("cuobjdump"))
    if "does not contain device code" in res.stderr:
        raise _bad(p, "cuobjdump found no device code")
    return res.stdout


_LELF = re.compile(r"^ELF file\s+(\d+):\s+(\S+)\s*$")
_CUBIN_NAME_ARCH = re.compile(r"\.(sm_\d+[a-z]?)\.cubin$")


def list_cubins(path: str | Path) -> list[EmbeddedCubin]:
    """The cubins inside a fatbin, object or executable (``cuobjdump -lelf``); a cubin lists itself."""
    p, b = _read(path)
    _classify(p, b)
    out = []
    for line in _cuobjdump(["-lelf"], p).splitlines():
        m = _LELF.match(line.strip())
        if m:
            a = _CUBIN_NAME_ARCH.search(m.group(2))
            out.append(EmbeddedCubin(int(m.group(1)), m.group(2), a.group(1) if a else ""))
    return out


def extract_cubins(path: str | Path, *, arch: str | None, workdir: Path) -> list[Path]:
    """Cubins for ``arch`` from ``path``, written into ``workdir`` (``cuobjdump -xelf``).

    A plain cubin is returned as it is (after checking its arch when one is asked for). A container may
    hold several cubins of one arch (an executable linked from several objects): all are returned.
    ``arch=None`` is allowed when the container holds a single arch. Raises ``UsageError`` naming the
    archs present when the asked one is missing or the choice is ambiguous.
    """
    p, b = _read(path)
    kind = _classify(p, b)
    if kind == "cubin":
        info = read_cubin_info(p)
        if arch is not None and info.arch != arch:
            raise UsageError(f"{p} is a cubin for {info.arch}, not {arch}.")
        return [p]
    entries = list_cubins(p)
    if not entries:
        raise _bad(p, f"a {kind} with no cubins inside (PTX only?)",
                   hint="Compile it to SASS for the arch you want, e.g. nvcc -gencode arch=compute_90,code=sm_90.")
    archs = sorted({e.arch for e in entries})
    if arch is None:
        if len(archs) != 1:
            raise UsageError(f"{p} holds cubins for {', '.join(archs)}; pass the arch to analyze.")
        arch = archs[0]
    chosen = [e for e in entries if e.arch == arch]
    if not chosen:
        raise UsageError(f"{p} holds no cubin for {arch}; it has {', '.join(archs)}.")
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    out = []
    for e in chosen:
        _cuobjdump(["-xelf", e.name], p.resolve(), cwd=workdir)
        target = workdir / e.name
        if not target.is_file():
            raise _bad(p, f"cuobjdump -xelf did not write {e.name}")
        out.append(target)
    return out


def select_cubin(path: str | Path, *, arch: str | None, workdir: Path) -> Path:
    """The one cubin for ``arch`` in ``path`` (see ``extract_cubins``). Where a container holds several
    cubins of that arch, the ones without code are dropped (an executable carries empty ones from the
    CUDA runtime); if more than one still has code, ``UsageError`` says to analyze them one by one
    (``extract_cubins`` returns them all)."""
    cubins = extract_cubins(path, arch=arch, workdir=workdir)
    if len(cubins) == 1:
        return cubins[0]
    with_code = [c for c in cubins if read_cubin_info(c).functions]
    if len(with_code) == 1:
        return with_code[0]
    if not with_code:
        return cubins[0]
    raise UsageError(
        f"{path} holds {len(with_code)} cubins with code for {arch or 'its arch'} "
        f"(one per compiled source file); extract them with `cuobjdump -xelf all` and analyze each."
    )


def disassemble_sass(path: str | Path, *, tool: Literal["nvdisasm", "cuobjdump"] | None = None) -> str:
    """SASS text of a cubin: ``nvdisasm -c -hex -gi`` (preferred; control words, labels, source lines),
    or ``cuobjdump -sass`` when nvdisasm is missing or ``tool="cuobjdump"`` (which also reads fatbins).
    Unreadable input raises ``InputFormatError``."""
    p, b = _read(path)
    kind = _classify(p, b)
    if tool is None:
        if kind != "cubin":
            tool = "cuobjdump"
        else:
            try:
                find_tool("nvdisasm")
                tool = "nvdisasm"
            except ToolNotFoundError:
                tool = "cuobjdump"
    if tool == "cuobjdump":
        return _cuobjdump(["-sass"], p)
    if tool != "nvdisasm":
        raise ValueError(f"tool must be 'nvdisasm' or 'cuobjdump', not {tool!r}")
    if kind != "cubin":
        raise _bad(p, f"nvdisasm reads single cubins; this is a {kind}",
                   hint="Extract the cubin first (extract_cubins) or use cuobjdump -sass.")
    exe = find_tool("nvdisasm")
    res = run_tool([exe, "-c", "-hex", "-gi", p], tool="nvdisasm", check=False)
    if res.returncode != 0 or not res.stdout.strip():
        raise _bad(p, _tool_message("nvdisasm", res.stderr, res.returncode), hint=_newer_hint("nvdisasm"))
    return res.stdout


def resource_usage(path: str | Path) -> str:
    """``cuobjdump -res-usage`` text (registers, stack, shared, local, constant per kernel).

    For a single cubin the text starts with the ``arch = sm_XX`` line that cuobjdump itself prints for
    each cubin of a fatbin, so ``isa.ptxas.parse_res_usage`` knows the arch (it takes the sm_90+ reserved
    kilobyte off ``SHARED``) without being told."""
    p, b = _read(path)
    kind = _classify(p, b)
    text = _cuobjdump(["-res-usage"], p)
    if kind == "cubin":
        text = f"arch = {read_cubin_info(p).arch}\n" + text
    return text


def elf_dump(path: str | Path) -> str:
    """``cuobjdump -elf`` text: sections, symbols and the decoded ``.nv.info`` attributes."""
    p, b = _read(path)
    _classify(p, b)
    return _cuobjdump(["-elf"], p)


def launch_bounds_text(path: str | Path) -> str:
    """The text ``isa.ptxas.parse_launch_bounds`` reads (``cuobjdump -elf``)."""
    return elf_dump(path)


@dataclass(frozen=True)
class LaunchBounds:
    """What the cubin says about a kernel's block size and register cap (``cuobjdump -elf`` .nv.info)."""

    max_threads: tuple[int, int, int] | None = None   # EIATTR_MAX_THREADS: __launch_bounds__ / .maxntid
    required: tuple[int, int, int] | None = None      # EIATTR_REQNTID: .reqntid (exact block shape)
    max_registers: int | None = None                  # EIATTR_MAXREG_COUNT (0xff = no cap)

    @property
    def block_size(self) -> int | None:
        """Threads per block: the required shape if there is one, else the launch-bounds maximum."""
        dims = self.required or self.max_threads
        if dims is None:
            return None
        return dims[0] * dims[1] * dims[2]

    @property
    def source(self) -> str | None:
        if self.required:
            return "reqntid"
        if self.max_threads:
            return "launch_bounds"
        return None


_ELF_INFO_SECTION = re.compile(r"^\.nv\.info\.(\S+)\s*$")
_ELF_ATTR = re.compile(r"^\s*Attribute:\s*(EIATTR_\w+)")
_ELF_VALUE = re.compile(r"^\s*Value:\s*(.*)$")
_HEX = re.compile(r"0x[0-9a-fA-F]+|\d+")


def parse_launch_bounds(elf_text: str) -> dict[str, LaunchBounds]:
    """Launch bounds per kernel from ``cuobjdump -elf`` text: the ``.nv.info.<kernel>`` sections'
    ``EIATTR_MAX_THREADS`` (``__launch_bounds__(N)`` / ``.maxntid``), ``EIATTR_REQNTID`` (``.reqntid``)
    and ``EIATTR_MAXREG_COUNT``. Every kernel with an info section is returned, bounds or not."""
    out: dict[str, dict[str, object]] = {}
    kernel: str | None = None
    attr: str | None = None
    for line in elf_text.splitlines():
        if not line:
            continue
        c = line[0]
        if c == ".":
            m = _ELF_INFO_SECTION.match(line)
            kernel = m.group(1) if m else None
            if kernel is not None:
                out.setdefault(kernel, {})
            attr = None
            continue
        if kernel is None:
            continue
        if "Attribute:" in line:
            m = _ELF_ATTR.match(line)
            attr = m.group(1) if m else None
            continue
        if attr and "Value:" in line:
            m = _ELF_VALUE.match(line)
            if not m:
                continue
            nums = [int(x, 16) if x[:2] in ("0x", "0X") else int(x) for x in _HEX.findall(m.group(1))]
            if attr == "EIATTR_MAX_THREADS" and len(nums) >= 3:
                out[kernel]["max_threads"] = (nums[0], nums[1], nums[2])
            elif attr == "EIATTR_REQNTID" and len(nums) >= 3:
                out[kernel]["required"] = (nums[0], nums[1], nums[2])
            elif attr == "EIATTR_MAXREG_COUNT" and nums:
                out[kernel]["max_registers"] = nums[0]
            attr = None
    return {k: LaunchBounds(**v) for k, v in out.items()}  # type: ignore[arg-type]


def launch_bounds_info(path: str | Path) -> dict[str, LaunchBounds]:
    """Launch bounds of every kernel in a cubin (``cuobjdump -elf``, parsed by ``parse_launch_bounds``)."""
    return parse_launch_bounds(elf_dump(path))


def launch_bounds(path: str | Path) -> dict[str, int]:
    """Threads per block for the kernels of a cubin that declare it (``__launch_bounds__(N)`` /
    ``.maxntid``: the maximum; ``.reqntid``: the exact shape, x*y*z). Kernels without bounds are absent."""
    return {k: b.block_size for k, b in launch_bounds_info(path).items() if b.block_size is not None}
