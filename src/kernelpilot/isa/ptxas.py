"""Pure parsers for NVIDIA's resource reports: ``ptxas -v``, ``cuobjdump -res-usage`` and the launch
bounds in ``cuobjdump -elf``. No tools are run here; ``toolchain/nvcc.py`` and ``toolchain/nv_binary.py``
produce the text.

Formats, as printed by CUDA 13.0 (nvcc/ptxas) and cuobjdump 13.1 (Triton 3.9's wheel):

``ptxas -v`` (``nvcc -Xptxas -v`` prints the same lines on stderr)::

    ptxas info    : Compiling entry function '_Z15grid_stride_sumPKfPfi' for 'sm_90'
    ptxas info    : Function properties for _Z15grid_stride_sumPKfPfi
        0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
    ptxas info    : Used 12 registers, used 0 barriers, 49152 bytes smem, 372 bytes cmem[0]

The parts after ``Used N registers`` are optional and vary: sm_80..sm_89 print ``cmem[0]``, sm_90 and
later do not; ``used N barriers`` is new in CUDA 12; ``N bytes cumulative stack size`` appears when the
kernel has a stack frame; older toolkits print ``N bytes cmem[2]`` and texture counts. A non-inlined
device function gets ``Function properties for <name>`` with no ``Compiling entry function`` line and
no ``Used`` line; it is not a kernel and is returned only on request.

``cuobjdump -res-usage``::

     Function _Z2k1Pfi:
      REG:32 STACK:64 SHARED:0 LOCAL:0 CONSTANT[0]:540 TEXTURE:0 SURFACE:0 SAMPLER:0

For sm_90 and later, ``SHARED`` includes the 1 KB of shared memory the compiler reserves at the start of
each block's window (``.nv.reservedSmem``; the SASS addresses user data from 0x400) whenever the kernel
uses shared memory at all: ptxas reports 49152 bytes smem where cuobjdump reports 50176.
``parse_res_usage(..., arch=)`` removes that kilobyte so that ``shared_bytes`` means the same thing from
either source (the user's static shared memory; occupancy calculators add the per-block reservation
themselves). It does not report spills (``spill_*`` stay None).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from kernelpilot.isa.model import NvidiaResources

# The launch-bounds parser reads the cubin's own attributes; it lives with the binary tools (the toolchain
# layer, which must not import isa/) and is re-exported here beside the other report parsers.
from kernelpilot.toolchain.nv_binary import LaunchBounds, parse_launch_bounds

__all__ = [
    "PtxasReport",
    "LaunchBounds",
    "parse_ptxas_report",
    "parse_ptxas_report_full",
    "parse_res_usage",
    "parse_launch_bounds",
    "arch_number",
    "RESERVED_SHARED_SM90",
]

# Shared memory the compiler reserves per block on sm_90+ and that cuobjdump -res-usage counts in SHARED.
RESERVED_SHARED_SM90 = 1024

_COMPILING = re.compile(r"Compiling entry function '([^']+)' for '([^']+)'")
_PROPERTIES = re.compile(r"Function properties for (\S+)")
_FRAME = re.compile(
    r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads"
)
_USED = re.compile(r"\bUsed (\d+) registers\b(.*)")
_USED_PARTS = {
    "barriers": re.compile(r"used (\d+) barriers"),
    "smem": re.compile(r"(\d+) bytes smem"),
    "cmem0": re.compile(r"(\d+) bytes cmem\[0\]"),
    "cumulative_stack": re.compile(r"(\d+) bytes cumulative stack size"),
}
_ARCH_NUM = re.compile(r"sm_(\d+)")


def arch_number(arch: str | None) -> int | None:
    """90 for ``sm_90``/``sm_90a``; None when ``arch`` is None or not an ``sm_`` name."""
    if not arch:
        return None
    m = _ARCH_NUM.search(arch)
    return int(m.group(1)) if m else None


@dataclass
class PtxasReport:
    """Everything ``parse_ptxas_report_full`` found: kernels and device functions, per arch."""

    kernels: dict[str, NvidiaResources]
    device_functions: dict[str, NvidiaResources]
    arch_of: dict[str, str]            # kernel name -> arch it was compiled for ("sm_90")
    cumulative_stack: dict[str, int]   # kernel name -> "N bytes cumulative stack size" (frame + callees)


def parse_ptxas_report_full(text: str, *, arch: str | None = None) -> PtxasReport:
    """Parse ``ptxas -v`` output. With ``arch`` set, keep only entries compiled for that arch (a build
    for several ``-gencode`` targets reports every kernel once per arch); without it, the last one wins."""
    kernels: dict[str, NvidiaResources] = {}
    devfns: dict[str, NvidiaResources] = {}
    arch_of: dict[str, str] = {}
    cumulative: dict[str, int] = {}

    entry_name: str | None = None      # from "Compiling entry function"
    entry_arch: str | None = None
    current: NvidiaResources | None = None
    current_name: str | None = None
    current_is_entry = False

    def keep() -> bool:
        return arch is None or entry_arch is None or entry_arch == arch

    for line in text.splitlines():
        if "ptxas" not in line and "bytes stack frame" not in line:
            continue
        m = _COMPILING.search(line)
        if m:
            entry_name, entry_arch = m.group(1), m.group(2)
            current_name, current_is_entry = entry_name, True
            current = NvidiaResources(source="ptxas -v")
            if keep():
                kernels[entry_name] = current
                arch_of[entry_name] = entry_arch
            continue
        m = _PROPERTIES.search(line)
        if m:
            name = m.group(1)
            if name == entry_name and current is not None and current_is_entry:
                current_name = name
                continue
            # A function with properties but no "Compiling entry function": a device function.
            current_name, current_is_entry = name, False
            current = NvidiaResources(source="ptxas -v")
            if keep():
                devfns[name] = current
            continue
        m = _FRAME.search(line)
        if m and current is not None:
            current.stack_bytes = int(m.group(1))
            current.spill_store_bytes = int(m.group(2))
            current.spill_load_bytes = int(m.group(3))
            continue
        m = _USED.search(line)
        if m and current is not None:
            current.registers = int(m.group(1))
            rest = m.group(2)
            p = _USED_PARTS["barriers"].search(rest)
            if p:
                current.barriers = int(p.group(1))
            p = _USED_PARTS["smem"].search(rest)
            current.shared_bytes = int(p.group(1)) if p else 0
            p = _USED_PARTS["cmem0"].search(rest)
            if p:
                current.constant_bytes = int(p.group(1))
            p = _USED_PARTS["cumulative_stack"].search(rest)
            if p and current_name is not None and current_is_entry and keep():
                cumulative[current_name] = int(p.group(1))
            continue
    return PtxasReport(kernels=kernels, device_functions=devfns, arch_of=arch_of, cumulative_stack=cumulative)


def parse_ptxas_report(text: str, *, arch: str | None = None) -> dict[str, NvidiaResources]:
    """Kernels (entry functions) in ``ptxas -v`` output, keyed by mangled name.

    ``registers``, ``barriers``, ``shared_bytes`` (static, 0 when not printed), ``constant_bytes`` (where
    printed), ``stack_bytes`` and ``spill_*_bytes`` come from the report. ``local_bytes`` stays None: ptxas
    does not print it (local arrays and spills live in the stack frame). Device functions are left out:
    see ``parse_ptxas_report_full``.
    """
    return parse_ptxas_report_full(text, arch=arch).kernels


_RES_FUNCTION = re.compile(r"^\s*Function\s+(\S+?):?\s*$")
_RES_ARCH = re.compile(r"^\s*arch\s*=\s*(sm_\w+)")
_RES_FIELD = re.compile(r"([A-Z_]+(?:\[\d+\])?):(\d+)")


def parse_res_usage(text: str, *, arch: str | None = None) -> dict[str, NvidiaResources]:
    """Kernels in ``cuobjdump -res-usage`` output, keyed by mangled name.

    The arch of each cubin comes from the ``arch = sm_XX`` header cuobjdump prints per cubin of a fatbin
    (``toolchain.nv_binary.resource_usage`` adds it for a single cubin), else from ``arch``; on sm_90+ it
    takes the reserved kilobyte off ``SHARED``. When the text covers several archs and ``arch`` is given,
    only that arch's functions are kept (without ``arch``, the last one of each name wins). Spills are
    unknown (None); ``stack_bytes`` is ``STACK``, ``local_bytes`` is ``LOCAL``.
    """
    rows: list[tuple[str | None, str, dict[str, int]]] = []
    section_arch: str | None = None
    name: str | None = None
    for line in text.splitlines():
        m = _RES_ARCH.match(line)
        if m:
            section_arch = m.group(1)
            name = None
            continue
        m = _RES_FUNCTION.match(line)
        if m:
            name = m.group(1)
            continue
        if name is None or "REG:" not in line:
            continue
        rows.append((section_arch, name, {k: int(v) for k, v in _RES_FIELD.findall(line)}))
        name = None
    archs = {a for a, _, _ in rows if a}
    out: dict[str, NvidiaResources] = {}
    for sec_arch, fname, fields in rows:
        if arch is not None and len(archs) > 1 and sec_arch != arch:
            continue
        num = arch_number(sec_arch or arch)
        shared = fields.get("SHARED")
        if shared is not None and num is not None and num >= 90 and shared >= RESERVED_SHARED_SM90:
            shared -= RESERVED_SHARED_SM90
        out[fname] = NvidiaResources(
            registers=fields.get("REG"),
            stack_bytes=fields.get("STACK"),
            shared_bytes=shared,
            local_bytes=fields.get("LOCAL"),
            constant_bytes=fields.get("CONSTANT[0]"),
            source="cuobjdump -res-usage",
        )
    return out
