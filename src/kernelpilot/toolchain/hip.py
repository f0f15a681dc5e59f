"""Compile HIP C++ to AMDGCN assembler text with clang (device side only, no linking).

    clang++-19 -x hip --offload-arch=gfx942 --cuda-device-only -nogpulib -O3 -S --rocm-path=ROOT \\
        [-DNAME=VALUE ...] [extra flags] -o KERNEL-gfx942.s KERNEL.hip

``-nogpulib`` keeps the ROCm device library out, so Debian's clang with ``libamdhip64-dev`` is enough.
The price: HIP headers implement ``threadIdx``/``blockIdx``/``blockDim`` and most math functions as calls
into that library (``__ockl_get_local_id``, ``__ocml_exp_f32``, ...), which then stay unresolved calls in
the assembly (``s_swappc_b64``, a stack, many more registers). ``HipBuild.unresolved_calls`` lists them
and ``HipBuild.warnings`` says what to use instead (``__builtin_amdgcn_workitem_id_x()``, ...).
"""

from __future__ import annotations

import os
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from kernelpilot.errors import CompileError, ToolError, ToolNotFoundError, UsageError
from kernelpilot.toolchain.find import find_tool
from kernelpilot.toolchain.run import ensure_file, run_tool

__all__ = ["HipBuild", "compile_hip", "rocm_root"]

_HIP_PACKAGE = "HIP headers: on Debian `apt-get install libamdhip64-dev`, or ROCm (set ROCM_PATH)"
_DEFINE_NAME = re.compile(r"^[A-Za-z_]\w*$")
_SYM_REF = re.compile(r"([A-Za-z_.$][\w.$]*)@(?:rel32|gotpcrel32|gotpcrel)@lo")
_DEFINED = re.compile(r"^([A-Za-z_.$][\w.$]*):", re.MULTILINE)
_BUILTIN_FOR = {
    "__ockl_get_local_id": "__builtin_amdgcn_workitem_id_x/y/z()",
    "__ockl_get_group_id": "__builtin_amdgcn_workgroup_id_x/y/z()",
    "__ockl_get_local_size": "a compile-time block size (template parameter or constant)",
    "__ockl_get_num_groups": "a kernel argument",
}


@dataclass
class HipBuild:
    """One device-only compile: the assembler text and how it was made."""

    source: Path
    arch: str
    asm_path: Path
    asm_text: str
    command: list[str]
    stderr: str = ""                       # clang's warnings (empty when clean)
    unresolved_calls: list[str] = field(default_factory=list)   # functions called but not defined
    warnings: list[str] = field(default_factory=list)


def rocm_root() -> Path:
    """The ``--rocm-path`` for clang: $ROCM_PATH or /opt/rocm when it has include/hip, else /usr when
    /usr/include/hip/hip_runtime.h exists (Debian's libamdhip64-dev)."""
    candidates = []
    if os.environ.get("ROCM_PATH"):
        candidates.append(Path(os.environ["ROCM_PATH"]))
    candidates.append(Path("/opt/rocm"))
    for c in candidates:
        if (c / "include" / "hip").is_dir():
            return c
    if Path("/usr/include/hip/hip_runtime.h").is_file():
        return Path("/usr")
    raise ToolNotFoundError("HIP headers (hip/hip_runtime.h)", _HIP_PACKAGE,
                            searched=[str(c / "include" / "hip") for c in candidates] + ["/usr/include/hip"])


def _define_flags(defines: dict[str, str] | None) -> list[str]:
    flags = []
    for k, v in (defines or {}).items():
        if not _DEFINE_NAME.match(str(k)):
            raise UsageError(f"invalid macro name {k!r} for -D; use a C identifier.")
        flags.append(f"-D{k}" if v is None or v == "" else f"-D{k}={v}")
    return flags


def compile_hip(
    path: str | Path,
    *,
    arch: str,
    defines: dict[str, str] | None = None,
    extra_flags: list[str] | tuple[str, ...] = (),
    workdir: Path | None = None,
) -> HipBuild:
    """Compile a HIP source for one AMD GPU (``gfx942``; target features allowed: ``gfx90a:xnack-``) to
    a ``.s`` in ``workdir`` (a new temporary directory when None, left for the caller).

    Raises ``CompileError`` with clang's diagnostics when the source does not compile,
    ``ToolNotFoundError`` when clang or the HIP headers are missing, and ``ToolError`` when this clang
    does not know ``arch``.
    """
    src = ensure_file(path).resolve()
    clang = find_tool("clang++")
    root = rocm_root()
    out_dir = Path(workdir) if workdir is not None else Path(tempfile.mkdtemp(prefix="kpilot-hip-"))
    out_dir.mkdir(parents=True, exist_ok=True)
    safe_arch = re.sub(r"[^A-Za-z0-9_.-]", "_", arch)
    asm_path = out_dir / f"{src.stem}-{safe_arch}.s"
    cmd = [
        str(clang), "-x", "hip", f"--offload-arch={arch}", "--cuda-device-only", "-nogpulib", "-O3", "-S",
        f"--rocm-path={root}", *_define_flags(defines), *[str(f) for f in extra_flags],
        "-o", str(asm_path), str(src),
    ]
    try:
        res = run_tool(cmd, tool=clang.name, compile_of=str(path))
    except CompileError as e:
        if "invalid target ID" in e.stderr or "unsupported CUDA gpu architecture" in e.stderr \
                or "Unsupported CUDA gpu architecture" in e.stderr or "unknown target CPU" in e.stderr:
            raise ToolError(
                clang.name, cmd, e.returncode, e.stderr,
                message=f"{clang.name} does not support --offload-arch={arch}.",
                hint="gfx950 needs clang 20 or newer (ROCm 6.4+); point KPILOT_CLANGXX at one.",
            ) from None
        raise
    asm_text = asm_path.read_text(errors="replace")
    build = HipBuild(source=src, arch=arch, asm_path=asm_path, asm_text=asm_text, command=cmd,
                     stderr=res.stderr)
    defined = set(_DEFINED.findall(asm_text))
    missing: list[str] = []
    for name in _SYM_REF.findall(asm_text):
        if name not in defined and name not in missing:
            missing.append(name)
    build.unresolved_calls = missing
    for name in missing:
        instead = _BUILTIN_FOR.get(name)
        if name.startswith(("__ockl_", "__ocml_")):
            build.warnings.append(
                f"{name} is a ROCm device-library function that -nogpulib leaves unresolved: the ISA shows a "
                f"call (s_swappc_b64) and inflated registers"
                + (f"; use {instead} instead." if instead else "; avoid it or use a clang builtin."))
        else:
            build.warnings.append(f"{name} is called but not defined in this translation unit.")
    return build
