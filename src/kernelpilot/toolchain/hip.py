"""Compile HIP C++ to AMDGCN assembler text with clang (device side only, no linking).

    clang++-19 -x hip --offload-arch=gfx942 --cuda-device-only -O3 -S --rocm-path=ROOT \\
        [-nogpulib -include hip_device_shim.h] [-DNAME=VALUE ...] [extra flags] -o KERNEL-gfx942.s KERNEL.hip

The HIP headers implement ``threadIdx``/``blockIdx``/``blockDim``/``gridDim``, ``__syncthreads`` and most
math functions as calls into ROCm's device libraries (``__ockl_get_local_id``, ``__ocml_exp_f32``, ...).

* With a real ROCm (``ROOT/amdgcn/bitcode`` holds ``ocml.bc`` and the target's ``oclc_isa_version``),
  clang links those libraries itself: no ``-nogpulib``, no shim.
* Without them (Debian's ``libamdhip64-dev``: ``--rocm-path=/usr``, no bitcode) the compile needs
  ``-nogpulib``, and the calls would stay unresolved (``s_swappc_b64``, a stack, many more registers).
  kernelpilot then force-includes ``hip_device_shim.h``, which defines the most used entry points inline
  with the libraries' own semantics (see the header); ``HipBuild.shim`` records that it was used.

Whatever is still called but not defined is listed in ``HipBuild.unresolved_calls`` and explained in
``HipBuild.warnings``.
"""

from __future__ import annotations

import os
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from kernelpilot.errors import CompileError, ToolError, ToolNotFoundError, UsageError
from kernelpilot.toolchain.find import find_tool
from kernelpilot.toolchain.run import compiler_warnings, ensure_file, run_tool

__all__ = ["HipBuild", "compile_hip", "device_libs_dir", "rocm_root", "SHIM_HEADER"]

SHIM_HEADER = Path(__file__).with_name("hip_device_shim.h")

_HIP_PACKAGE = "HIP headers: on Debian `apt-get install libamdhip64-dev`, or ROCm (set ROCM_PATH)"
_DEFINE_NAME = re.compile(r"^[A-Za-z_]\w*$")
_SYM_REF = re.compile(r"([A-Za-z_.$][\w.$]*)@(?:rel32|gotpcrel32|gotpcrel)@lo")
_DEFINED = re.compile(r"^([A-Za-z_.$][\w.$]*):", re.MULTILINE)
_CODE_OBJECT_VERSION = re.compile(r"^\s*\.amdhsa_code_object_version\s+(\d+)", re.MULTILINE)
# Flags under which the kernel's own copy of ocml's source would be optimised differently from the
# library (built without them): the shim then leaves its ocml part out.
_FAST_MATH_FLAGS = ("-ffast-math", "-funsafe-math-optimizations", "-ffinite-math-only", "-fno-honor-nans",
                    "-fno-honor-infinities", "-fapprox-func", "-fassociative-math", "-freciprocal-math",
                    "-fno-signed-zeros", "-Ofast", "-ffp-model=fast", "-ffp-model=aggressive")
# device-library entry points that are not ockl/ocml by name
_DEVICE_LIB_NAMES = ("__atomic_work_item_fence",)
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
    shim: Path | None = None               # hip_device_shim.h when it was force-included (no device libs)
    device_libs: Path | None = None        # ROCm's amdgcn/bitcode folder when clang linked it


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


def _isa_version_file(arch: str) -> str:
    """``gfx942:xnack-`` -> ``oclc_isa_version_942.bc``: the per-target file clang needs from the libs."""
    name = arch.split(":", 1)[0]
    return f"oclc_isa_version_{name[3:] if name.startswith('gfx') else name}.bc"


def device_libs_dir(root: Path, arch: str | None = None) -> Path | None:
    """ROCm's device-library bitcode under ``root`` (``amdgcn/bitcode``, or ``lib/amdgcn/bitcode`` in
    older layouts) when it has ``ocml.bc``, ``ockl.bc`` and, given ``arch``, that target's
    ``oclc_isa_version_*.bc``; else None (Debian's HIP headers at /usr have none)."""
    for d in (root / "amdgcn" / "bitcode", root / "lib" / "amdgcn" / "bitcode"):
        if (d / "ocml.bc").is_file() and (d / "ockl.bc").is_file():
            if arch is not None and not (d / _isa_version_file(arch)).is_file():
                return None
            return d
    return None


def _abi_version(flags: list[str]) -> int | None:
    """The code-object ABI a ``-mcode-object-version=N`` among ``flags`` asks for (400, 500, ...)."""
    version = None
    for f in flags:
        m = re.fullmatch(r"-mcode-object-version=(\d+)", f)
        if m:
            version = int(m.group(1)) * 100
    return version


def _shim_flags(flags: list[str], abi: int) -> list[str]:
    out = ["-include", str(SHIM_HEADER), f"-D__KPILOT_SHIM_ABI_VERSION={abi}"]
    if any(f == g or f.startswith(g + "=") for f in flags for g in _FAST_MATH_FLAGS):
        out.append("-D__KPILOT_SHIM_NO_OCML=1")
    return out


def _define_flags(defines: dict[str, str] | None) -> list[str]:
    flags = []
    for k, v in (defines or {}).items():
        if not _DEFINE_NAME.match(str(k)):
            raise UsageError(f"invalid macro name {k!r} for -D; use a C identifier.")
        flags.append(f"-D{k}" if v is None or v == "" else f"-D{k}={v}")
    return flags


def _run_clang(clang: Path, cmd: list[str], path: str | Path):
    try:
        return run_tool(cmd, tool=clang.name, compile_of=str(path))
    except CompileError as e:
        if "invalid target ID" in e.stderr or "unsupported CUDA gpu architecture" in e.stderr \
                or "Unsupported CUDA gpu architecture" in e.stderr or "unknown target CPU" in e.stderr:
            raise ToolError(
                clang.name, cmd, e.returncode, e.stderr,
                message=f"{clang.name} does not support --offload-arch={_cmd_arch(cmd)}.",
                hint="gfx950 needs clang 20 or newer (ROCm 6.4+); point KPILOT_CLANGXX at one.",
            ) from None
        raise


def _cmd_arch(cmd: list[str]) -> str:
    return next((c.split("=", 1)[1] for c in cmd if c.startswith("--offload-arch=")), "?")


def compile_hip(
    path: str | Path,
    *,
    arch: str,
    defines: dict[str, str] | None = None,
    extra_flags: list[str] | tuple[str, ...] = (),
    workdir: Path | None = None,
    device_shim: bool = True,
) -> HipBuild:
    """Compile a HIP source for one AMD GPU (``gfx942``; target features allowed: ``gfx90a:xnack-``) to
    a ``.s`` in ``workdir`` (a new temporary directory when None, left for the caller).

    With ROCm's device libraries under the ROCm root clang links them; without them the compile uses
    ``-nogpulib`` and, unless ``device_shim`` is False, force-includes ``hip_device_shim.h`` so that
    ``threadIdx``, ``__syncthreads`` and the common math functions compile as they would with ROCm.

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
    flags = [str(f) for f in extra_flags]
    libs = device_libs_dir(root, arch)
    shim = SHIM_HEADER if libs is None and device_shim and SHIM_HEADER.is_file() else None
    abi = _abi_version(flags) or 500           # clang 19 defaults to code object v5

    if libs is None:
        lib_flags = ["-nogpulib"]
    elif libs == root / "amdgcn" / "bitcode":
        lib_flags = []                         # where clang looks by itself
    else:
        lib_flags = [f"--rocm-device-lib-path={libs}"]

    def command(abi: int) -> list[str]:
        return [
            str(clang), "-x", "hip", f"--offload-arch={arch}", "--cuda-device-only", *lib_flags, "-O3", "-S",
            f"--rocm-path={root}",
            *(_shim_flags(flags, abi) if shim is not None else []),
            *_define_flags(defines), *flags, "-o", str(asm_path), str(src),
        ]

    cmd = command(abi)
    res = _run_clang(clang, cmd, path)
    if shim is not None:
        # the shim reads the hidden kernel arguments of the code-object ABI clang used: if that is not
        # the one assumed (an older clang's default, -mcode-object-version=none), compile again with it
        m = _CODE_OBJECT_VERSION.search(asm_path.read_text(errors="replace"))
        if m and (int(m.group(1)) * 100 >= 500) != (abi >= 500):
            cmd = command(int(m.group(1)) * 100)
            res = _run_clang(clang, cmd, path)
    asm_text = asm_path.read_text(errors="replace")
    build = HipBuild(source=src, arch=arch, asm_path=asm_path, asm_text=asm_text, command=cmd,
                     stderr=res.stderr, shim=shim, device_libs=libs)
    build.warnings.extend(compiler_warnings(res.stderr))
    defined = set(_DEFINED.findall(asm_text))
    missing: list[str] = []
    for name in _SYM_REF.findall(asm_text):
        if name not in defined and name not in missing:
            missing.append(name)
    build.unresolved_calls = missing
    for name in missing:
        instead = _BUILTIN_FOR.get(name)
        if name.startswith(("__ockl_", "__ocml_")) or name in _DEVICE_LIB_NAMES:
            build.warnings.append(
                f"{name} is a ROCm device-library function that -nogpulib leaves unresolved: the ISA shows a "
                f"call (s_swappc_b64) and inflated registers"
                + ("; kernelpilot's inline stand-ins (hip_device_shim.h) do not define it, as its exact "
                   "result needs the library" if shim is not None else "")
                + (f"; use {instead} instead." if instead else "; avoid it or use a clang builtin."))
        else:
            build.warnings.append(f"{name} is called but not defined in this translation unit.")
    return build
