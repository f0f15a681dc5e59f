"""From a kernel source or binary to one ``KernelReport`` per kernel.

``load_kernels`` compiles and disassembles (the only part that runs tools); ``analyze_kernel`` is pure:
counts, families, loops, stalls, occupancy and findings over a parsed ``KernelISA``.
"""

from __future__ import annotations

import tempfile
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from kernelpilot.arch.occupancy import amd_occupancy, nvidia_occupancy
from kernelpilot.arch.registry import get_arch
from kernelpilot.errors import InputFormatError, KernelpilotError, UsageError
from kernelpilot.isa.cfg import find_loops, loop_depths
from kernelpilot.isa.families import classify
from kernelpilot.isa.findings import Context, run_rules
from kernelpilot.isa.model import AmdResources, KernelISA, KernelReport, NvidiaResources, Occupancy
from kernelpilot.isa.stalls import estimate_stalls, stall_cycles
from kernelpilot.options import Options, param

__all__ = ["AnalyzeOptions", "analyze", "analyze_kernel", "load_kernels", "detect_input"]

InputKind = Literal["cuda", "hip", "triton", "ptx", "cubin", "amd_asm", "code_object", "sass"]

_SUFFIX_KIND: dict[str, InputKind] = {
    ".cu": "cuda", ".cuh": "cuda",
    ".hip": "hip",
    ".ptx": "ptx",
    ".cubin": "cubin", ".fatbin": "cubin",
    ".s": "amd_asm", ".amdgcn": "amd_asm",
    ".hsaco": "code_object", ".co": "code_object",
    ".sass": "sass",
}


@dataclass(frozen=True, kw_only=True)
class AnalyzeOptions(Options):
    """How a kernel is built and read for analysis: everything `kpilot isa analyze` and `isa diff` take besides
    their sources (declared once for the Python API, the CLI and the tools: ``options.py``)."""

    arch: str | None = param("Target: sm_80, sm_89, sm_90, sm_90a, sm_100, gfx90a, gfx942, gfx950, or a GPU name "
                             "(H200, MI300X); needed to compile a source, read from the file for a binary.",
                             short="-a")
    kernel: str | None = param("Only this kernel (mangled or plain name; a substring also matches).", short="-k")
    defines: dict[str, str] = param("Preprocessor define (C++) or constexpr value (Triton), NAME=VALUE.", {},
                                    flag="-D", metavar="NAME=VALUE")
    block_size: int | None = param("Threads per block for occupancy (default: launch bounds, Triton num_warps, or "
                                   "the code object's max workgroup size).", minimum=1)
    lang: str | None = param("Language of a C++ source whose suffix does not say (e.g. hip for .cpp).",
                             choices=("cuda", "hip", "triton"))
    signature: str | None = param("Triton signature, e.g. 'x_ptr:*fp32,n:i32' (overrides the file's KPILOT_SPECS).")
    num_warps: int | None = param("Triton num_warps.", minimum=1)
    num_stages: int | None = param("Triton num_stages.", minimum=1)
    variant: str | None = param("Triton: a named variant of the file's KPILOT_SPECS declaration.")
    flags: tuple[str, ...] = param("Extra compiler flag, e.g. -maxrregcount=32 (through a tool, only the forms "
                                   "tools/isa.py allows: defines, includes in the workspace, optimisation, "
                                   "fast-math, register and arch settings, warnings).", flag="--flag",
                                   metavar="FLAG")
    keep: Path | None = param("Keep the compiler's outputs (binary, assembly, report) in this folder.", path=True)


def detect_input(source: str, lang: str | None = None) -> InputKind:
    """What kind of input ``source`` is, from ``--lang``, the ``file.py:kernel`` form, the suffix or the bytes."""
    if lang is not None:
        lang = lang.lower()
        if lang not in ("cuda", "hip", "triton"):
            raise UsageError(f"--lang must be cuda, hip or triton, not {lang!r}.")
        if lang == "triton":
            return "triton"
        return lang  # type: ignore[return-value]
    path_part = source.rsplit(":", 1)[0] if ":" in source else source
    if ":" in source and path_part.endswith(".py"):
        return "triton"
    if source.endswith(".py"):
        raise UsageError(f"{source}: name the Triton kernel as FILE.py:KERNEL_NAME.")
    p = Path(source)
    kind = _SUFFIX_KIND.get(p.suffix.lower())
    if kind is not None:
        return kind
    if p.is_file():
        head = p.read_bytes()[:64]
        if head[:4] == b"\x7fELF" and len(head) >= 20:
            machine = int.from_bytes(head[18:20], "little")
            if machine == 190:
                return "cubin"
            if machine == 224:
                return "code_object"
    raise UsageError(
        f"{source}: cannot tell what this is from its name; use .cu, .hip (or --lang hip), FILE.py:KERNEL, "
        ".ptx, .cubin, .s (AMDGCN), .hsaco/.co."
    )


def _vendor_of_kind(kind: InputKind) -> str | None:
    if kind in ("cuda", "ptx", "cubin", "sass"):
        return "nvidia"
    if kind in ("hip", "amd_asm", "code_object"):
        return "amd"
    return None


def _resolve_arch(arch: str | None, kind: InputKind, source: str):
    if arch is None:
        if kind in ("cubin", "code_object", "amd_asm", "sass"):
            return None  # taken from the binary
        raise UsageError(f"{source}: --arch is required to compile it (e.g. --arch sm_90 or --arch gfx942).")
    spec = get_arch(arch)
    want = _vendor_of_kind(kind)
    if want is not None and spec.vendor != want:
        lang_hint = " (use --lang hip to compile CUDA-style C++ as HIP)" if kind == "cuda" else ""
        raise UsageError(f"{source} is {want} code but --arch {arch} is an {spec.vendor} target{lang_hint}.")
    return spec


def load_kernels(source: str | Path, opts: AnalyzeOptions) -> list[KernelISA]:
    """Compile (where needed), disassemble and parse ``source``: one ``KernelISA`` per kernel."""
    source = str(source)
    kind = detect_input(source, opts.lang)
    spec = _resolve_arch(opts.arch, kind, source)
    if kind != "triton" and not Path(source).is_file():
        raise UsageError(f"{source}: no such file.")
    if opts.keep is not None:
        opts.keep.mkdir(parents=True, exist_ok=True)
        return _load(source, kind, spec, opts, opts.keep)
    with tempfile.TemporaryDirectory(prefix="kpilot-") as tmp:
        return _load(source, kind, spec, opts, Path(tmp))


def _load(source: str, kind: InputKind, spec, opts: AnalyzeOptions, work: Path) -> list[KernelISA]:
    if kind in ("cuda", "ptx", "cubin", "sass"):
        from kernelpilot.isa import nvidia_load

        kernels = nvidia_load.load(source, kind, spec, opts, work)
    elif kind in ("hip", "amd_asm", "code_object"):
        from kernelpilot.isa import amd_load

        kernels = amd_load.load(source, kind, spec, opts, work)
    else:
        from kernelpilot.isa import triton_load

        kernels = triton_load.load(source, spec, opts, work)
    if not kernels:
        raise InputFormatError(source, "no kernels found in it.")
    return _select(kernels, opts.kernel, source)


def _select(kernels: list[KernelISA], name: str | None, source: str) -> list[KernelISA]:
    if not name:
        return kernels
    exact = [k for k in kernels if name in (k.name, k.display_name) or
             (k.display_name and k.display_name.split("(", 1)[0] == name)]
    if exact:
        return exact
    partial = [k for k in kernels if name in k.name or (k.display_name and name in k.display_name)]
    if partial:
        return partial
    names = ", ".join(k.display_name or k.name for k in kernels)
    raise UsageError(f"{source}: no kernel named {name!r}; it has: {names}.")


# ------------------------------------------------------------------ pure analysis


def _occupancy(isa: KernelISA, spec, block_size: int | None) -> Occupancy | None:
    bs = block_size or isa.block_size
    r = isa.resources
    if spec is None or bs is None:
        return None
    dyn = int(isa.metadata.get("dynamic_shared_bytes", 0) or 0)   # Triton's, allocated at launch
    if isinstance(r, NvidiaResources):
        if r.registers is None:
            return None
        return nvidia_occupancy(spec, registers=r.registers, shared_bytes=r.shared_bytes or 0,
                                block_size=bs, dynamic_shared_bytes=dyn)
    if isinstance(r, AmdResources):
        if r.vgpr is None:
            return None
        occ = amd_occupancy(spec, vgpr=r.vgpr, agpr=r.agpr or 0, sgpr=r.sgpr or 0, lds_bytes=(r.lds_bytes or 0) + dyn,
                            block_size=bs, accum_offset=r.accum_offset)
        occ.compiler = isa.compiler_occupancy
        return occ
    return None


def analyze_kernel(isa: KernelISA, *, block_size: int | None = None) -> KernelReport:
    """Counts, families, loops, stalls, occupancy and findings for one parsed kernel (no tools run)."""
    try:
        spec = get_arch(isa.arch)
    except KernelpilotError:
        spec = None
    vendor = isa.vendor
    ins = isa.instructions
    fams_of = [classify(i, vendor) for i in ins]
    fam_counts: Counter[str] = Counter()
    for f in fams_of:
        fam_counts.update(set(f))
    opcodes = Counter(i.opcode for i in ins)
    loops = find_loops(ins, vendor, stall_of=lambda x: stall_cycles(x, vendor), families=fams_of)
    depth = loop_depths(len(ins), loops)
    stalls = estimate_stalls(ins, vendor, loops)
    occ = _occupancy(isa, spec, block_size)
    if occ is not None:
        occ.block_size_source = "--block-size" if block_size else isa.block_size_source
    families = dict(sorted(fam_counts.items()))
    ctx = Context(isa=isa, families=families, loops=loops, loop_depth=depth, occupancy=occ, fams_of=fams_of)
    findings = run_rules(ctx)
    notes = list(isa.metadata.get("notes", []))
    if occ is not None and not block_size and isa.block_size_assumed:
        notes.append(f"occupancy is computed for {occ.block_size} threads per block, a default (the kernel has no "
                     "launch bounds): pass --block-size with the size it is launched with")
    return KernelReport(
        name=isa.name,
        display_name=isa.display_name,
        arch=isa.arch,
        vendor=vendor,
        source=isa.source,
        resources=isa.resources,
        occupancy=occ,
        instruction_count=len(ins),
        opcodes=dict(opcodes.most_common()),
        families=families,
        loops=loops,
        stalls=stalls,
        findings=findings,
        notes=notes,
        isa=isa,
    )


def analyze(source: str | Path, *, arch: str | None = None, **options) -> list[KernelReport]:
    """Compile, disassemble and analyze ``source`` for ``arch``; one report per kernel.

    ``options`` are the fields of ``AnalyzeOptions`` (kernel, defines, block_size, lang, signature,
    num_warps, num_stages, variant, flags, keep)."""
    opts = AnalyzeOptions(arch=arch, **options)
    return [analyze_kernel(k, block_size=opts.block_size) for k in load_kernels(source, opts)]
