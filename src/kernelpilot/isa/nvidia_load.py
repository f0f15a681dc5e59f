"""NVIDIA inputs (.cu, .ptx, .cubin, SASS text) to ``KernelISA``: compile, disassemble, parse."""

from __future__ import annotations

from pathlib import Path

from kernelpilot.arch.registry import get_arch
from kernelpilot.errors import InputFormatError, KernelpilotError
from kernelpilot.isa.model import KernelISA, NvidiaResources
from kernelpilot.isa.ptxas import parse_ptxas_report, parse_res_usage
from kernelpilot.isa.sass import parse_sass
from kernelpilot.toolchain import nv_binary
from kernelpilot.toolchain.nvcc import assemble_ptx, compile_cuda
from kernelpilot.toolchain.run import compiler_warnings

__all__ = ["load", "kernels_from_cubin"]

_DEFAULT_BLOCK = 256


def _normalized(target: str) -> str:
    """``sm_90a`` -> ``sm_90`` (the arch data's name); unknown targets stay as they are."""
    try:
        return get_arch(target).name
    except KernelpilotError:
        return target


def kernels_from_cubin(cubin: Path, *, source: str, arch: str | None, ptxas_report: str | None = None,
                       resource_source: str = "ptxas -v") -> list[KernelISA]:
    """Disassemble a cubin and attach resources: the compiler's report where we have it, else the cubin's own."""
    target = nv_binary.cubin_arch(cubin)
    cubin_arch = arch or _normalized(target)
    resources: dict[str, NvidiaResources] = {}
    if ptxas_report:
        resources = parse_ptxas_report(ptxas_report)
        for r in resources.values():
            r.source = resource_source
    usage = parse_res_usage(nv_binary.resource_usage(cubin))
    for name, r in usage.items():
        if name not in resources:
            r.source = "cuobjdump -res-usage (no spill counts)"
            resources[name] = r
        elif resources[name].local_bytes is None:
            # ptxas -v does not print local memory; the cubin's own record does.
            resources[name].local_bytes = r.local_bytes
    text = nv_binary.disassemble_sass(cubin)
    kernels = parse_sass(text, source=source, arch=cubin_arch, resources=resources)
    bounds = nv_binary.launch_bounds(cubin)
    for k in kernels:
        k.metadata["target"] = target
        if bounds.get(k.name):
            k.block_size = bounds[k.name]
            k.block_size_source = "launch bounds (__launch_bounds__ / .maxntid)"
    return kernels


def load(source: str, kind: str, spec, opts, work: Path) -> list[KernelISA]:
    arch = spec.target if spec is not None else None
    if kind == "cuda":
        build = compile_cuda(Path(source), arch=arch, defines=opts.defines, extra_flags=list(opts.flags), workdir=work)
        kernels = kernels_from_cubin(build.cubin_path, source=source, arch=spec.name if spec else None,
                                     ptxas_report=build.ptxas_report)
        for k in kernels:
            k.metadata.setdefault("notes", []).extend(compiler_warnings(build.stderr))
    elif kind == "ptx":
        build = assemble_ptx(Path(source), arch=arch, extra_flags=list(opts.flags), workdir=work)
        kernels = kernels_from_cubin(build.cubin_path, source=source, arch=spec.name if spec else None,
                                     ptxas_report=build.ptxas_report)
    elif kind == "cubin":
        cubin = nv_binary.select_cubin(Path(source), arch=arch, workdir=work)
        kernels = kernels_from_cubin(cubin, source=source, arch=spec.name if spec else None)
    elif kind == "sass":
        text = Path(source).read_text(errors="replace")
        kernels = parse_sass(text, source=source, arch=spec.name if spec else None)
        if not kernels:
            raise InputFormatError(source, "no SASS functions found (expected cuobjdump -sass or nvdisasm output).")
    else:  # pragma: no cover - dispatch guarantees the kinds above
        raise ValueError(kind)
    for k in kernels:
        if k.block_size is None:
            k.block_size = _DEFAULT_BLOCK
            k.block_size_source = f"assumed {_DEFAULT_BLOCK} (no launch bounds; pass --block-size)"
            k.block_size_assumed = True
    return kernels
