"""Triton kernels (FILE.py:KERNEL) to ``KernelISA``: compile offline for the arch, then parse its ISA."""

from __future__ import annotations

from pathlib import Path

from kernelpilot.isa.model import KernelISA, NvidiaResources

__all__ = ["load"]


def load(source: str, spec, opts, work: Path) -> list[KernelISA]:
    from kernelpilot.toolchain.triton_compile import compile_triton

    build = compile_triton(
        source,
        arch=spec.target,
        signature=opts.signature,
        constexprs=opts.defines or None,
        num_warps=opts.num_warps,
        num_stages=opts.num_stages,
        variant=opts.variant,
        workdir=work,
    )
    if build.vendor == "nvidia":
        from kernelpilot.isa.nvidia_load import kernels_from_cubin

        kernels = kernels_from_cubin(Path(build.binary_path), source=source, arch=spec.name,
                                     ptxas_report=build.ptxas_report, resource_source="ptxas -v (Triton's PTX)")
    else:
        from kernelpilot.isa.amdgcn import parse_amdgcn_asm

        text = build.asm["amdgcn"]
        kernels = parse_amdgcn_asm(text if isinstance(text, str) else text.decode(), source=source, arch=spec.name)
    shared = int(build.metadata.get("shared", 0) or 0)
    for k in kernels:
        k.block_size = build.block_size
        k.block_size_source = f"Triton num_warps={build.num_warps}"
        if shared:
            # Triton allocates its shared memory (LDS on AMD) dynamically, at launch; the compiler's report (ptxas,
            # the code object's group segment) holds only the static part.
            r = k.resources
            static = (r.shared_bytes if isinstance(r, NvidiaResources) else r.lds_bytes) or 0
            k.metadata["dynamic_shared_bytes"] = max(shared - static, 0)
        k.metadata["triton"] = {key: build.metadata[key] for key in ("num_warps", "num_stages", "shared", "name")
                                if key in build.metadata}
        if build.warnings:
            k.metadata["notes"] = list(build.warnings)
    return kernels
