"""Locate external tools. Each tool has an ordered list of places to look and the package that provides it.

An environment variable ``KPILOT_<TOOL>`` (upper case, ``+`` as ``X``, ``-`` as ``_``: ``KPILOT_CLANGXX``,
``KPILOT_LLVM_OBJDUMP``) names a binary to use instead of searching.

The LLVM tools read and build AMD GPU code, so a binary found is used only if its LLVM is new enough for the
GPUs kernelpilot targets (gfx942 needs LLVM 17) and it has the AMDGPU target registered: an older system LLVM
first on PATH is passed over for a newer one elsewhere, and named in the error when none is usable.
"""

from __future__ import annotations

import functools
import os
import re
import subprocess
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kernelpilot.errors import ToolNotFoundError

__all__ = ["ToolSpec", "TOOLS", "find_tool", "find_tools", "tool_versions", "cuda_home"]


@dataclass(frozen=True)
class ToolSpec:
    name: str
    names: tuple[str, ...]          # executable names to try, in order
    package: str                    # what to install, for the error message
    extra_dirs: tuple[str, ...] = ()  # keys of _dir_sources to search besides PATH
    min_llvm: int | None = None     # an LLVM tool: the oldest LLVM major version that serves, and ...
    llvm_target: str | None = None  # ... the target it must have registered


def cuda_home() -> Path | None:
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(var):
            return Path(os.environ[var])
    default = Path("/usr/local/cuda")
    return default if default.exists() else None


def _site_dirs() -> list[Path]:
    dirs = []
    for key in ("purelib", "platlib"):
        p = sysconfig.get_paths().get(key)
        if p:
            dirs.append(Path(p))
    dirs.extend(Path(p) for p in sys.path if p.endswith("site-packages"))
    seen, out = set(), []
    for d in dirs:
        if d not in seen and d.is_dir():
            seen.add(d)
            out.append(d)
    return out


def _dirs(source: str) -> list[Path]:
    if source == "cuda":
        home = cuda_home()
        return [home / "bin"] if home else []
    if source == "triton":
        # Triton's wheel carries ptxas, cuobjdump and nvdisasm under triton/backends/nvidia/bin.
        return [d / "triton" / "backends" / "nvidia" / "bin" for d in _site_dirs()]
    if source == "pypi-nvidia":
        out = []
        for d in _site_dirs():
            for sub in ("cuda_cuobjdump", "cuda_nvdisasm", "cuda_nvcc", "cu13", "cu12"):
                out.append(d / "nvidia" / sub / "bin")
        return out
    if source == "rocm":
        home = os.environ.get("ROCM_PATH", "/opt/rocm")
        return [Path(home) / "llvm" / "bin", Path(home) / "bin"]
    raise ValueError(f"unknown tool directory source {source!r}")


_CUDA_PKG = "NVIDIA's compiler from PyPI (`pip install 'kernelpilot[cuda]'`) or the CUDA toolkit"
_NV_DISASM_PKG = (
    "NVIDIA's disassemblers from PyPI (`pip install 'kernelpilot[cuda]'`), Triton (`pip install triton` carries "
    "cuobjdump and nvdisasm), or the CUDA toolkit"
)
_LLVM_VERSIONS = ("21", "20", "19", "18", "17")
_MIN_LLVM = 17      # gfx942 (MI300) first appears in LLVM 17

TOOLS: dict[str, ToolSpec] = {
    "nvcc": ToolSpec("nvcc", ("nvcc",), _CUDA_PKG, ("cuda", "pypi-nvidia")),
    # PyPI's NVIDIA wheels before Triton's copies: they come with PyPI's nvcc, whose newer cubins Triton's older
    # cuobjdump cannot read (Triton's own compiles use Triton's own ptxas, found through Triton).
    "ptxas": ToolSpec("ptxas", ("ptxas",), _CUDA_PKG + ", or Triton (`pip install triton`)", ("cuda", "pypi-nvidia", "triton")),
    "cuobjdump": ToolSpec("cuobjdump", ("cuobjdump",), _NV_DISASM_PKG, ("cuda", "pypi-nvidia", "triton")),
    "nvdisasm": ToolSpec("nvdisasm", ("nvdisasm",), _NV_DISASM_PKG, ("cuda", "pypi-nvidia", "triton")),
    "clang++": ToolSpec(
        "clang++",
        tuple(f"clang++-{v}" for v in _LLVM_VERSIONS) + ("clang++",),
        "clang 17 or newer with HIP headers: on Debian `apt-get install clang-19 libamdhip64-dev`, or ROCm",
        ("rocm",), _MIN_LLVM, "amdgcn",
    ),
    "llvm-objdump": ToolSpec(
        "llvm-objdump",
        tuple(f"llvm-objdump-{v}" for v in _LLVM_VERSIONS) + ("llvm-objdump",),
        "LLVM 17 or newer: on Debian `apt-get install llvm-19`, or ROCm",
        ("rocm",), _MIN_LLVM, "amdgcn",
    ),
    "ncu": ToolSpec("ncu", ("ncu",), "Nsight Compute (in the CUDA toolkit, or NVIDIA's nsight-compute package)",
                    ("cuda",)),
    "rocprofv3": ToolSpec("rocprofv3", ("rocprofv3",), "ROCm's rocprofiler-sdk (rocprofv3)", ("rocm",)),
    "llvm-readelf": ToolSpec(
        "llvm-readelf",
        tuple(f"llvm-readelf-{v}" for v in _LLVM_VERSIONS) + ("llvm-readelf",),
        "LLVM 17 or newer: on Debian `apt-get install llvm-19`, or ROCm",
        ("rocm",), _MIN_LLVM, "amdgcn",
    ),
}


def _env_var(name: str) -> str:
    return "KPILOT_" + name.upper().replace("+", "X").replace("-", "_")


def _candidates(spec: ToolSpec, names: tuple[str, ...]) -> tuple[list[Path], list[str]]:
    """Every existing binary for ``spec`` in search order (CUDA toolkit, PATH, then the rest), and where we looked."""
    found: list[Path] = []
    searched: list[str] = []

    def add(p: Path) -> None:
        if p.is_file() and os.access(p, os.X_OK) and p.resolve() not in {f.resolve() for f in found}:
            found.append(p)

    # Explicit directories first for the CUDA toolkit (so its cuobjdump wins over an older one on PATH),
    # then PATH, then the rest.
    for src in [s for s in spec.extra_dirs if s == "cuda"]:
        for d in _dirs(src):
            for exe in names:
                searched.append(str(d / exe))
                add(d / exe)
    # Every directory of PATH, not only the first hit: the first may be too old (see _unusable).
    path_dirs = [Path(d) for d in os.environ.get("PATH", os.defpath).split(os.pathsep) if d]
    for exe in names:
        searched.append(f"PATH:{exe}")
        for d in path_dirs:
            add(d / exe)
    for src in [s for s in spec.extra_dirs if s != "cuda"]:
        for d in _dirs(src):
            for exe in names:
                searched.append(str(d / exe))
                add(d / exe)
    return found, searched


def _spec(name: str) -> ToolSpec:
    try:
        return TOOLS[name]
    except KeyError:
        raise ValueError(f"unknown tool {name!r}; known: {', '.join(TOOLS)}") from None


def _override(name: str) -> Path | None:
    override = os.environ.get(_env_var(name))
    if not override:
        return None
    p = Path(override)
    if p.is_file() and os.access(p, os.X_OK):
        return p
    raise ToolNotFoundError(name, f"a working binary at {override} (from ${_env_var(name)})")


@functools.lru_cache(maxsize=None)
def _llvm_info(path: Path) -> tuple[int | None, frozenset[str]]:
    """An LLVM tool's major version and registered targets, from ``--version`` (and clang's ``-print-targets``)."""
    text = ""
    for args in [["--version"]] + ([["-print-targets"]] if "clang" in path.name else []):
        try:
            out = subprocess.run([str(path), *args], capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            continue
        text += out.stdout + out.stderr
    m = re.search(r"(?:LLVM|clang) version (\d+)", text)
    targets = frozenset(re.findall(r"^\s+(\S+)\s+- ", text, re.M))
    return (int(m.group(1)) if m else None), targets


def _unusable(spec: ToolSpec, path: Path) -> str | None:
    """Why ``path`` cannot serve as ``spec`` (None where it can)."""
    if spec.min_llvm is None:
        return None
    major, targets = _llvm_info(path)
    if major is None:
        return f"{path} (no LLVM version in its --version output)"
    if major < spec.min_llvm:
        return f"{path} (LLVM {major}; {spec.min_llvm} or newer is needed)"
    if spec.llvm_target and targets and spec.llvm_target not in targets:
        return f"{path} (LLVM {major} without the {spec.llvm_target} target)"
    return None


def _usable(name: str, spec: ToolSpec, names: tuple[str, ...]) -> list[Path]:
    found, searched = _candidates(spec, names)
    usable, rejected = [], []
    for p in found:
        why = _unusable(spec, p)
        (rejected.append(why) if why else usable.append(p))
    if not usable:
        raise ToolNotFoundError(name, spec.package, searched=searched, rejected=rejected)
    return usable


@functools.lru_cache(maxsize=None)
def find_tool(name: str) -> Path:
    """Return the path of tool ``name`` (a key of ``TOOLS``) or raise ``ToolNotFoundError``."""
    spec = _spec(name)
    p = _override(name)
    if p is not None:
        return p
    return _usable(name, spec, spec.names)[0]


@functools.lru_cache(maxsize=None)
def find_tools(name: str, *, extra_names: tuple[str, ...] = ()) -> tuple[Path, ...]:
    """Every installed binary of tool ``name`` (and of ``extra_names``), preferred first: for falling back to
    another version when the first one is too old for its input (e.g. PTX of a newer ISA version)."""
    spec = _spec(name)
    p = _override(name)
    if p is not None:
        return (p,)
    return tuple(_usable(name, spec, spec.names + extra_names))


def _first_version_line(path: Path) -> str:
    try:
        out = subprocess.run([str(path), "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"error: {e}"
    lines = [l.strip() for l in (out.stdout + out.stderr).splitlines() if l.strip()]
    # nvcc/ptxas print the release on their last line; LLVM tools print it first.
    for l in lines:
        if "release" in l.lower() or "version" in l.lower():
            return l
    return lines[0] if lines else "unknown"


def tool_versions() -> dict[str, dict[str, Any]]:
    """Where each known tool is and its version line (None where missing), what installs a missing one, and the
    binaries found but not usable (``rejected``). For `kpilot doctor` and the benchmarks' environment record."""
    out: dict[str, dict[str, Any]] = {}
    for name in TOOLS:
        try:
            p = find_tool(name)
        except ToolNotFoundError as e:
            out[name] = {"path": None, "version": None, "install": e.package, "rejected": e.rejected}
            continue
        out[name] = {"path": str(p), "version": _first_version_line(p), "install": None, "rejected": []}
    return out
