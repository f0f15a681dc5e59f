"""AMD inputs (.hip, .s, .hsaco/.co) to ``KernelISA``: compile, disassemble, parse."""

from __future__ import annotations

from pathlib import Path

from kernelpilot.errors import UsageError
from kernelpilot.isa.amdgcn import parse_amdgcn_asm, parse_amdgcn_objdump
from kernelpilot.isa.model import KernelISA
from kernelpilot.toolchain import amd_binary
from kernelpilot.toolchain.hip import compile_hip

__all__ = ["load"]


def load(source: str, kind: str, spec, opts, work: Path) -> list[KernelISA]:
    arch = spec.name if spec is not None else None
    if kind == "hip":
        build = compile_hip(Path(source), arch=spec.target, defines=opts.defines, extra_flags=list(opts.flags),
                            workdir=work)
        kernels = parse_amdgcn_asm(build.asm_text, source=source, arch=arch)
        notes = []
        if build.shim is not None:
            notes.append("compiled without ROCm's device libraries: work-item ids and simple math come from "
                         "kernelpilot's inline definitions (toolchain/hip_device_shim.h), checked to compile to the same ISA as ROCm's device library")
        notes.extend(build.warnings)
        for k in kernels:
            k.metadata["notes"] = list(notes)
        return kernels
    if kind == "amd_asm":
        return parse_amdgcn_asm(Path(source).read_text(errors="replace"), source=source, arch=arch)
    path = Path(source)
    co_arch = amd_binary.code_object_arch(path)
    if arch is not None and arch != co_arch:
        raise UsageError(f"{source} was built for {co_arch}, not {arch}: its machine code is {co_arch}'s. Give --arch "
                         f"{co_arch}, or leave --arch out to read it from the file.")
    text = amd_binary.disassemble_code_object(path, arch=co_arch)
    meta = amd_binary.read_code_object_metadata(path)
    return parse_amdgcn_objdump(text, meta, source=source, arch=co_arch)
