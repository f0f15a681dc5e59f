"""What this machine has for kernelpilot: external tools, Python modules, GPUs and their driver, and whether
this user may read the GPU's performance counters. ``detect()`` looks (processes, files, imports); the
parsers and ``Inventory.available()`` are pure, so the decisions are tested with plain data.

The counter permission comes from the NVIDIA driver's ``/proc/driver/nvidia/params``:
``RmProfilingAdminOnly: 1`` lets only administrators read counters (root, a process with CAP_SYS_ADMIN, and
from driver R565 one with CAP_PERFMON; https://developer.nvidia.com/ERR_NVGPUCTRPERM); ncu then fails with
ERR_NVGPUCTRPERM for everyone else.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import os
import re
import shutil
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from kernelpilot.toolchain.features import HIP_HEADERS, NCU_COUNTERS, NVIDIA_GPU, TORCH_GPU, TRITON_AMD, module, tool

__all__ = [
    "ToolFound",
    "ModuleFound",
    "NvidiaGpu",
    "GpuInfo",
    "CounterAccess",
    "Inventory",
    "PYTHON_MODULES",
    "parse_nvidia_smi",
    "parse_profiling_admin_only",
    "parse_cap_eff",
    "counter_access",
    "detect",
]

# module -> the distribution that provides it (for its version without importing it)
PYTHON_MODULES: dict[str, str] = {
    "triton": "triton",
    "torch": "torch",
    "ncu_report": "ncu-report",
    "anthropic": "anthropic",
    "openai": "openai",
    "mcp": "mcp",
    "pypdf": "pypdf",
}
# Imported for real: doctor needs them (Triton's backends, torch.cuda), and a broken install shows as missing.
# The others are only located, since importing them takes seconds and tells nothing more.
_IMPORTED = ("triton", "torch")

_CAP_SYS_ADMIN = 21
_CAP_PERFMON = 38
_PERFMON_DRIVER = 565        # the first driver branch where CAP_PERFMON grants counter access
_SMI_TIMEOUT = 30.0
_NVIDIA_PARAMS = Path("/proc/driver/nvidia/params")


@dataclass(frozen=True)
class ToolFound:
    """An external tool: where it is and its version line, or what to install and which binaries were
    found but are unusable (an LLVM too old, or without the AMDGPU target)."""

    name: str
    path: str | None
    version: str | None = None
    install: str | None = None
    rejected: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "version": self.version, "install": self.install, "rejected": list(self.rejected)}


@dataclass(frozen=True)
class ModuleFound:
    """A Python module: its version when it is installed (None when not), and why an import failed."""

    name: str
    version: str | None
    error: str | None = None


@dataclass(frozen=True)
class NvidiaGpu:
    name: str
    driver: str
    compute_cap: str

    def to_json(self) -> dict[str, str]:
        return asdict(self)


@dataclass(frozen=True)
class GpuInfo:
    """The GPUs as ``nvidia-smi`` lists them (``nvidia_smi`` None: not installed; ``error``: it failed) and as
    torch sees them (``torch_gpu`` None: torch is not installed)."""

    nvidia_smi: str | None = None
    gpus: tuple[NvidiaGpu, ...] = ()
    error: str | None = None
    torch_gpu: bool | None = None
    torch_build: str | None = None      # "CUDA 12.8", "ROCm 6.2" or "CPU only"
    torch_error: str | None = None

    @property
    def driver_major(self) -> int | None:
        for g in self.gpus:
            m = re.match(r"(\d+)", g.driver)
            if m:
                return int(m.group(1))
        return None

    def describe(self) -> str:
        if self.gpus:
            names = ", ".join(f"{g.name} (sm_{g.compute_cap.replace('.', '')})" for g in self.gpus)
            smi = f"{names}; driver {self.gpus[0].driver}"
        elif self.error:
            smi = f"nvidia-smi failed: {self.error}"
        elif self.nvidia_smi:
            smi = "nvidia-smi lists no GPU"
        else:
            smi = "no NVIDIA GPU (nvidia-smi not found)"
        if self.torch_gpu is None:
            torch = "torch not installed"
        elif self.torch_error:
            torch = f"torch: {self.torch_error}"
        else:
            torch = f"torch ({self.torch_build}): {'GPU available' if self.torch_gpu else 'no GPU'}"
        return f"{smi}; {torch}"

    def to_json(self) -> dict[str, Any]:
        return {"nvidia_smi": self.nvidia_smi, "gpus": [g.to_json() for g in self.gpus], "error": self.error,
                "torch_gpu": self.torch_gpu, "torch_build": self.torch_build, "torch_error": self.torch_error}


@dataclass(frozen=True)
class CounterAccess:
    """May this process read the GPU's performance counters? ``admin_only``: the driver's
    RmProfilingAdminOnly (None where it could not be read, ``unknown_why`` says why); ``admin``: what makes
    this process an administrator to the driver (``root``, ``CAP_SYS_ADMIN``, ``CAP_PERFMON``), or None."""

    admin_only: bool | None
    admin: str | None = None
    unknown_why: str | None = None

    @property
    def state(self) -> str:
        return "unknown" if self.admin_only is None else "restricted" if self.admin_only else "allowed"

    @property
    def usable(self) -> bool:
        """False only where the driver restricts the counters and this process is no administrator; an
        unknown state is not held against the user (ncu itself will tell)."""
        return not (self.admin_only and self.admin is None)

    def describe(self) -> str:
        if self.admin_only is None:
            return f"unknown ({self.unknown_why or 'no NVIDIA driver'})"
        if not self.admin_only:
            return "allowed (RmProfilingAdminOnly: 0)"
        if self.admin:
            return f"restricted to administrators; allowed here ({self.admin})"
        return "restricted (not root)"

    def to_json(self) -> dict[str, Any]:
        return {"state": self.state, "usable": self.usable, "admin": self.admin, "text": self.describe()}


@dataclass(frozen=True)
class Inventory:
    """Everything ``detect()`` found. ``hip_headers``: the ROCm root clang is given (None: no HIP headers);
    ``triton_amd``: how Triton's AMD backend links (None: it cannot, or no Triton), ``triton_amd_why`` why not."""

    tools: dict[str, ToolFound]
    modules: dict[str, ModuleFound]
    gpu: GpuInfo = field(default_factory=GpuInfo)
    counters: CounterAccess = field(default_factory=lambda: CounterAccess(None))
    hip_headers: str | None = None
    triton_amd: str | None = None
    triton_amd_why: str | None = None

    def available(self) -> frozenset[str]:
        """The keys of ``toolchain.features`` this inventory provides."""
        keys = {tool(n) for n, t in self.tools.items() if t.path}
        keys |= {module(n) for n, m in self.modules.items() if m.version is not None}
        torch_nvidia = bool(self.gpu.torch_gpu and (self.gpu.torch_build or "").startswith("CUDA"))
        if self.gpu.gpus or torch_nvidia:
            keys.add(NVIDIA_GPU)
        if self.counters.usable:
            keys.add(NCU_COUNTERS)
        if self.gpu.torch_gpu:
            keys.add(TORCH_GPU)
        if self.hip_headers:
            keys.add(HIP_HEADERS)
        if self.triton_amd:
            keys.add(TRITON_AMD)
        return frozenset(keys)

    def to_json(self) -> dict[str, Any]:
        return {
            "tools": {n: t.to_json() for n, t in self.tools.items()},
            "python": {n: m.version for n, m in self.modules.items()},
            "python_errors": {n: m.error for n, m in self.modules.items() if m.error},
            "gpu": self.gpu.to_json(),
            "ncu_counters": self.counters.to_json(),
            "hip_headers": self.hip_headers,
            "triton_amd_linker": {"linker": self.triton_amd, "why_not": self.triton_amd_why},
        }


# --- pure parsers ------------------------------------------------------------------------------------


def parse_nvidia_smi(text: str) -> tuple[NvidiaGpu, ...]:
    """GPUs from ``nvidia-smi --query-gpu=name,driver_version,compute_cap --format=csv,noheader``
    (one ``NVIDIA H200, 580.159.04, 9.0`` line each)."""
    out = []
    for line in text.splitlines():
        parts = [p.strip() for p in line.rsplit(",", 2)]
        if len(parts) == 3 and all(parts):
            out.append(NvidiaGpu(*parts))
    return tuple(out)


def parse_profiling_admin_only(params: str) -> bool | None:
    """``RmProfilingAdminOnly: N`` from ``/proc/driver/nvidia/params``: True for 1, False for 0, None if absent."""
    m = re.search(r"^RmProfilingAdminOnly:\s*(\d+)\s*$", params, re.M)
    return None if m is None else m.group(1) != "0"


def parse_cap_eff(status: str) -> int | None:
    """The effective capability mask from ``/proc/self/status`` (``CapEff:`` in hex)."""
    m = re.search(r"^CapEff:\s*([0-9a-fA-F]+)\s*$", status, re.M)
    return int(m.group(1), 16) if m else None


def counter_access(admin_only: bool | None, *, euid: int | None, cap_eff: int | None, driver_major: int | None,
                   unknown_why: str | None = None) -> CounterAccess:
    """Whether this process may read the counters, from the driver's setting and who the process is."""
    if admin_only is None:
        return CounterAccess(None, unknown_why=unknown_why)
    admin = None
    if euid == 0:
        admin = "root"
    elif cap_eff is not None and (cap_eff >> _CAP_SYS_ADMIN) & 1:
        admin = "CAP_SYS_ADMIN"
    elif cap_eff is not None and (cap_eff >> _CAP_PERFMON) & 1 and (driver_major or 0) >= _PERFMON_DRIVER:
        admin = "CAP_PERFMON"
    return CounterAccess(admin_only, admin)


# --- detection (I/O) ---------------------------------------------------------------------------------


def _tools() -> dict[str, ToolFound]:
    from kernelpilot.toolchain.find import tool_versions

    return {name: ToolFound(name, v["path"], v["version"], v["install"], tuple(v["rejected"]))
            for name, v in tool_versions().items()}


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0] if text else ''}".rstrip(": ")


def _module(name: str, dist: str) -> ModuleFound:
    if name in _IMPORTED:
        try:
            mod = importlib.import_module(name)
        except ImportError as e:
            if isinstance(e, ModuleNotFoundError) and e.name == name:
                return ModuleFound(name, None)
            return ModuleFound(name, None, _first_line(e))
        except Exception as e:  # noqa: BLE001 - a broken install can raise anything on import
            return ModuleFound(name, None, _first_line(e))
        return ModuleFound(name, str(getattr(mod, "__version__", None) or _dist_version(dist)))
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError) as e:
        return ModuleFound(name, None, _first_line(e))
    return ModuleFound(name, _dist_version(dist) if spec is not None else None)


def _dist_version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "unknown version"


def _nvidia_smi() -> tuple[str | None, tuple[NvidiaGpu, ...], str | None]:
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None, (), None
    cmd = [exe, "--query-gpu=name,driver_version,compute_cap", "--format=csv,noheader"]
    try:
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=_SMI_TIMEOUT, errors="replace")
    except subprocess.TimeoutExpired:
        return exe, (), f"no answer within {_SMI_TIMEOUT:.0f} s"
    except OSError as e:
        return exe, (), f"could not run: {e.strerror or e}"
    if res.returncode != 0:
        lines = [l.strip() for l in (res.stdout + res.stderr).splitlines() if l.strip()]
        return exe, (), f"exit code {res.returncode}: {lines[0] if lines else 'no output'}"
    return exe, parse_nvidia_smi(res.stdout), None


def _torch_gpu(torch_found: ModuleFound) -> tuple[bool | None, str | None, str | None]:
    if torch_found.version is None:
        return None, None, None
    try:
        import torch

        hip, cuda = getattr(torch.version, "hip", None), getattr(torch.version, "cuda", None)
        build = f"ROCm {hip}" if hip else f"CUDA {cuda}" if cuda else "CPU only"
        return bool(torch.cuda.is_available()), build, None
    except Exception as e:  # noqa: BLE001 - a driver mismatch surfaces as any exception
        return False, None, _first_line(e)


def _counters(driver_major: int | None) -> CounterAccess:
    if not sys.platform.startswith("linux"):
        return CounterAccess(None, unknown_why=f"read only on Linux, this is {sys.platform}")
    try:
        params = _NVIDIA_PARAMS.read_text(errors="replace")
    except FileNotFoundError:
        return CounterAccess(None, unknown_why="no NVIDIA driver")
    except OSError as e:
        return CounterAccess(None, unknown_why=f"{_NVIDIA_PARAMS}: {e.strerror or e}")
    admin_only = parse_profiling_admin_only(params)
    try:
        cap_eff = parse_cap_eff(Path("/proc/self/status").read_text(errors="replace"))
    except OSError:
        cap_eff = None
    return counter_access(admin_only, euid=os.geteuid(), cap_eff=cap_eff, driver_major=driver_major,
                          unknown_why=f"no RmProfilingAdminOnly in {_NVIDIA_PARAMS}")


def _hip_headers() -> str | None:
    from kernelpilot.errors import ToolNotFoundError
    from kernelpilot.toolchain.hip import rocm_root

    try:
        return str(rocm_root())
    except ToolNotFoundError:
        return None


def _triton_amd(triton_found: ModuleFound) -> tuple[str | None, str | None]:
    """How Triton's AMD backend links a code object, as ``compile_triton`` would set it up; or why it cannot."""
    if triton_found.version is None:
        return None, "Triton is not installed"
    from kernelpilot.errors import ToolNotFoundError
    from kernelpilot.toolchain.triton_compile import amd_linker_env

    try:
        from triton.backends import backends

        amd = backends.get("amd")
    except Exception as e:  # noqa: BLE001
        return None, f"Triton's backends did not load: {_first_line(e)}"
    if amd is None:
        return None, "this Triton has no AMD backend"
    try:
        env = amd_linker_env(amd.compiler)
    except ToolNotFoundError as e:
        return None, str(e)
    if env:
        return env["TRITON_HIP_LLD_PATH"], None
    if getattr(amd.compiler, "path_to_rocm_lld", None) is None:
        return "in-process", None
    return "Triton's own ld.lld", None


def detect() -> Inventory:
    """Look at this machine: every tool of ``find.TOOLS``, the optional Python modules, the GPUs (nvidia-smi,
    torch), the counter permission, the HIP headers and Triton's AMD linker. Never raises for what is missing
    or broken; each part records its error instead."""
    tools = _tools()
    modules = {name: _module(name, dist) for name, dist in PYTHON_MODULES.items()}
    smi, gpus, smi_error = _nvidia_smi()
    torch_gpu, torch_build, torch_error = _torch_gpu(modules["torch"])
    gpu = GpuInfo(smi, gpus, smi_error, torch_gpu, torch_build, torch_error)
    triton_amd, triton_amd_why = _triton_amd(modules["triton"])
    return Inventory(tools=tools, modules=modules, gpu=gpu, counters=_counters(gpu.driver_major),
                     hip_headers=_hip_headers(), triton_amd=triton_amd, triton_amd_why=triton_amd_why)
