"""Compile CUDA C++ and assemble PTX into a cubin for one NVIDIA arch, keeping ptxas's resource report.

    compile_cuda(src, arch="sm_90a")   nvcc -cubin -arch=sm_90a -O3 -lineinfo -Xptxas -v [-D..] [extra] -o OUT SRC
    assemble_ptx(src, arch="sm_90")    ptxas -v -lineinfo -arch=sm_90 [extra] -o OUT SRC

``-lineinfo`` keeps source lines in the cubin so the SASS maps back to the source (``nvdisasm -gi``);
it does not change the generated code. ``-arch=sm_90a`` is nvcc's shorthand for
``-gencode arch=compute_90a,code=[sm_90a,compute_90a]``; with ``-cubin`` only the sm_90a cubin is written.
ptxas prints its ``-v`` report on stderr under nvcc and on stdout when run directly: both are kept.

A source that does not compile raises ``CompileError`` carrying the compiler's diagnostics and the command.
"""

from __future__ import annotations

import re
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Mapping

from kernelpilot.errors import CompileError, ToolNotFoundError, UsageError
from kernelpilot.toolchain.find import find_tool, find_tools
from kernelpilot.toolchain.run import ensure_file, run_tool

__all__ = ["CudaBuild", "compile_cuda", "assemble_ptx", "check_arch", "ptx_target"]

_ARCH_RE = re.compile(r"^sm_(\d{2,3})([af]?)$")
_DEFINE_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass
class CudaBuild:
    """One compiled cubin and how it was made.

    When the caller gave no ``workdir`` the build lives in a temporary directory this object owns:
    use it as a context manager (``with compile_cuda(...) as build:``) or call ``cleanup()`` to remove it.
    """

    cubin_path: Path
    ptxas_report: str          # ptxas -v lines (stdout and stderr of the compiler, unfiltered)
    command: list[str]
    stderr: str                # everything the compiler wrote to stderr (warnings included)
    arch: str = ""
    source: str = ""
    workdir: Path | None = None
    owns_workdir: bool = field(default=False, repr=False)

    def cleanup(self) -> None:
        if self.owns_workdir and self.workdir is not None:
            shutil.rmtree(self.workdir, ignore_errors=True)
            self.owns_workdir = False

    def __enter__(self) -> "CudaBuild":
        return self

    def __exit__(self, *exc) -> None:
        self.cleanup()


def check_arch(arch: str) -> str:
    """Return ``arch`` if it looks like ``sm_90``/``sm_90a``/``sm_100f``; else raise ``UsageError``.
    Whether this toolkit supports it is the compiler's to say (an unsupported one is a CompileError)."""
    if not isinstance(arch, str) or not _ARCH_RE.match(arch):
        raise UsageError(
            f"arch {arch!r} is not an NVIDIA SM name; use the form sm_80, sm_90a or sm_100a.",
        )
    return arch


def _workdir(workdir: Path | None) -> tuple[Path, bool]:
    if workdir is not None:
        p = Path(workdir)
        p.mkdir(parents=True, exist_ok=True)
        return p, False
    return Path(tempfile.mkdtemp(prefix="kpilot-nv-")), True


def _define_flags(defines: Mapping[str, str] | None) -> list[str]:
    flags = []
    for key, value in (defines or {}).items():
        if not _DEFINE_RE.match(str(key)):
            raise UsageError(f"-D name {key!r} is not a C identifier.")
        value = "" if value is None else str(value)
        flags.append(f"-D{key}={value}" if value != "" else f"-D{key}")
    return flags


def compile_cuda(
    path: str | Path,
    *,
    arch: str,
    defines: Mapping[str, str] | None = None,
    extra_flags: Iterable[str] = (),
    workdir: Path | None = None,
    timeout: float = 600.0,
) -> CudaBuild:
    """Compile a ``.cu`` file to a cubin for ``arch`` with ptxas's ``-v`` report."""
    src = ensure_file(path)
    check_arch(arch)
    nvcc = find_tool("nvcc")
    out_dir, owns = _workdir(workdir)
    out = out_dir / f"{src.stem}.{arch}.cubin"
    cmd = [
        str(nvcc), "-cubin", f"-arch={arch}", "-O3", "-lineinfo", "-Xptxas", "-v",
        *_define_flags(defines), *[str(f) for f in extra_flags], "-o", str(out), str(src),
    ]
    return _build(cmd, "nvcc", src, arch, out, out_dir, owns, timeout)


_NO_HOST_COMPILER = re.compile(r"Failed to preprocess host compiler properties|^(gcc|g\+\+|cc1plus): No such file",
                               re.M)


def _build(cmd: list[str], tool: str, src: Path, arch: str, out: Path, out_dir: Path, owns: bool,
           timeout: float) -> CudaBuild:
    """Run one compile whose resource report (``-v``) is what the tool prints; clean up a failed temp dir."""
    try:
        res = run_tool(cmd, tool=tool, compile_of=str(src), timeout=timeout)
    except BaseException as e:
        if owns:
            shutil.rmtree(out_dir, ignore_errors=True)
        if isinstance(e, CompileError) and _NO_HOST_COMPILER.search(e.stderr or ""):
            # nvcc hands the host code to gcc/g++ and stops before compiling anything when there is none
            raise ToolNotFoundError("g++ (nvcc's host compiler)", "g++ (on Debian or Ubuntu: `apt-get install g++`)",
                                    searched=["PATH:g++", "PATH:gcc"]) from None
        raise
    return CudaBuild(
        cubin_path=out, ptxas_report=res.stdout + res.stderr, command=res.command, stderr=res.stderr,
        arch=arch, source=str(src), workdir=out_dir, owns_workdir=owns,
    )


_PTX_TARGET = re.compile(r"^\s*\.target\s+([^\s,/]+)", re.MULTILINE)


def ptx_target(text: str) -> str | None:
    """The first target of a PTX module's ``.target`` directive (``sm_90a``), or None."""
    m = _PTX_TARGET.search(text)
    return m.group(1) if m else None


def assemble_ptx(
    path: str | Path,
    *,
    arch: str | None = None,
    extra_flags: Iterable[str] = (),
    workdir: Path | None = None,
    timeout: float = 600.0,
) -> CudaBuild:
    """Assemble a ``.ptx`` file with ``ptxas -v`` for ``arch`` (default: the module's ``.target``).

    A module written for the arch-specific variant (``.target sm_90a``, as Triton emits for wgmma) is
    assembled for that variant when ``arch`` names the same GPU (``sm_90``): ptxas refuses anything else."""
    src = ensure_file(path)
    try:
        target = ptx_target(src.read_text(errors="replace"))
    except OSError as e:
        raise UsageError(f"{src}: cannot read: {e.strerror}.") from None
    if arch is None:
        if target is None or not _ARCH_RE.match(target):
            raise UsageError(f"{src}: no sm_XX .target in the PTX; pass an arch such as sm_90.")
        arch = target
    elif target is not None and target != arch and target.rstrip("af") == arch.rstrip("af"):
        arch = target
    check_arch(arch)
    out_dir, owns = _workdir(workdir)
    out = out_dir / f"{src.stem}.{arch}.cubin"
    # PTX names the ISA version it needs; an older ptxas refuses it. Try each installed ptxas (the CUDA
    # toolkit's, then Triton's newer ones) until one accepts the module.
    candidates = find_tools("ptxas", extra_names=("ptxas-blackwell",))
    for n, ptxas in enumerate(candidates):
        cmd = [str(ptxas), "-v", "-lineinfo", f"-arch={arch}", *[str(f) for f in extra_flags], "-o", str(out), str(src)]
        try:
            return _build(cmd, "ptxas", src, arch, out, out_dir, owns and n == len(candidates) - 1, timeout)
        except CompileError as e:
            if "Unsupported .version" not in e.stderr or n == len(candidates) - 1:
                if owns:
                    shutil.rmtree(out_dir, ignore_errors=True)
                raise
    raise AssertionError("unreachable")  # pragma: no cover
