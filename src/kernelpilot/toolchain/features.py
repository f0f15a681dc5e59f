"""What each kpilot feature needs, and which features the pieces found on a machine make usable.

Pure: ``evaluate`` takes the set of pieces found (keys such as ``tool:nvcc``, ``python:triton``,
``nvidia-gpu``; ``toolchain.inventory`` detects them) and returns, per feature, whether it is usable and,
where not, what is missing and the command that fixes it. `kpilot doctor` prints the result and fails
when a core feature is unusable.

The needs follow the code: CUDA C++ is compiled with nvcc and every cubin is read with cuobjdump
(``-res-usage`` and ``-elf`` always; ``-sass`` where nvdisasm is missing); HIP C++ is compiled to
assembler text with clang++ (no disassembler needed), while AMD code objects are disassembled with
llvm-objdump; Triton compiles in-process with its own ptxas (NVIDIA) or its AMD backend, which before
Triton 3.5 links with an external ld.lld.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable

from kernelpilot.toolchain.find import TOOLS

__all__ = [
    "Need",
    "Feature",
    "FeatureStatus",
    "FEATURES",
    "evaluate",
    "core_unusable",
    "features_using",
    "tool",
    "module",
    "NVIDIA_GPU",
    "NCU_COUNTERS",
    "TORCH_GPU",
    "HIP_HEADERS",
    "TRITON_AMD",
]


def tool(name: str) -> str:
    """The key of an external tool (a name of ``find.TOOLS``) that was found and is usable."""
    return f"tool:{name}"


def module(name: str) -> str:
    """The key of a Python module that imports."""
    return f"python:{name}"


NVIDIA_GPU = "nvidia-gpu"          # an NVIDIA GPU with its driver, visible to this process
NCU_COUNTERS = "ncu-counters"      # this user may read the GPU's performance counters (or it cannot be told)
TORCH_GPU = "torch-gpu"            # torch sees a GPU (CUDA, or ROCm's build answering to torch.cuda)
HIP_HEADERS = "hip-headers"        # hip/hip_runtime.h under ROCM_PATH, /opt/rocm or /usr
TRITON_AMD = "triton-amd"          # Triton's AMD backend can link a code object (in-process, or an ld.lld)


@dataclass(frozen=True)
class Need:
    """One piece a feature needs; any one of ``any_of`` (keys) provides it. ``what`` names it for people,
    ``fix`` is the command (or step) that provides it."""

    what: str
    any_of: tuple[str, ...]
    fix: str


@dataclass(frozen=True)
class Feature:
    """A thing kpilot does and what it needs. ``core`` features are what kernelpilot is for (static ISA
    analysis); doctor fails when one is unusable. ``fix``, where given, is one command that provides every
    need at once, used when several needs with different fixes are missing. ``better_with`` are pieces
    used when present, never required."""

    id: str
    title: str
    core: bool
    needs: tuple[Need, ...]
    fix: str | None = None
    better_with: tuple[Need, ...] = ()


@dataclass(frozen=True)
class FeatureStatus:
    """A feature on this machine: ``missing`` names the needs not met, ``fix`` says how to meet them all
    (None when usable); ``optional_missing`` names the ``better_with`` pieces not found."""

    feature: Feature
    missing: tuple[str, ...]
    fix: str | None
    optional_missing: tuple[str, ...] = ()

    @property
    def usable(self) -> bool:
        return not self.missing

    def to_json(self) -> dict[str, Any]:
        f = self.feature
        return {"id": f.id, "title": f.title, "core": f.core, "usable": self.usable, "missing": list(self.missing),
                "fix": self.fix, "optional_missing": list(self.optional_missing)}


_PIP_CUDA = "pip install 'kernelpilot[cuda]'"
_PIP_TRITON = "pip install 'kernelpilot[triton]'"
_PIP_EVAL = "pip install 'kernelpilot[eval]'"
_APT_HIP = "apt-get install clang-19 libamdhip64-dev (Debian; or install ROCm)"
_APT_LLVM = "apt-get install llvm-19 (Debian; or install ROCm)"

_NVCC = Need("nvcc", (tool("nvcc"),), _PIP_CUDA)
_CUOBJDUMP = Need("cuobjdump", (tool("cuobjdump"),), _PIP_CUDA)
_PTXAS = Need("ptxas", (tool("ptxas"),), _PIP_CUDA)
_NVDISASM = Need("nvdisasm (labels and source lines in the SASS; cuobjdump -sass serves without it)",
                 (tool("nvdisasm"),), _PIP_CUDA)
_TRITON = Need("the Python module triton", (module("triton"),), _PIP_TRITON)
_TORCH = Need("the Python module torch", (module("torch"),), _PIP_EVAL)
_TORCH_GPU = Need("a GPU that torch can use", (TORCH_GPU,),
                  "a machine with a GPU and a CUDA or ROCm build of torch (https://pytorch.org/get-started/locally/)")
_COUNTERS_FIX = (
    "run as root, or let every user read the counters: put `options nvidia NVreg_RestrictProfilingToAdminUsers=0` "
    "in /etc/modprobe.d/nvidia-profiling.conf and reload the nvidia driver or reboot "
    "(https://developer.nvidia.com/ERR_NVGPUCTRPERM); `kpilot profile --tool torch` times kernels without counters"
)

FEATURES: tuple[Feature, ...] = (
    Feature("isa-cuda", "ISA analysis of CUDA C++ (kpilot isa analyze x.cu)", True,
            (_NVCC, _CUOBJDUMP), fix=_PIP_CUDA, better_with=(_NVDISASM,)),
    Feature("isa-triton-nvidia", "ISA analysis of Triton kernels for NVIDIA (--arch sm_90)", True,
            (_TRITON, _PTXAS, _CUOBJDUMP), fix=_PIP_TRITON, better_with=(_NVDISASM,)),
    Feature("isa-hip", "ISA analysis of HIP C++ for AMD (--arch gfx942)", True,
            (Need("clang++ (LLVM 17 or newer, with the AMDGPU target)", (tool("clang++"),), _APT_HIP),
             Need("HIP headers (hip/hip_runtime.h)", (HIP_HEADERS,),
                  "apt-get install libamdhip64-dev (Debian; or install ROCm and set ROCM_PATH)")),
            fix=_APT_HIP),
    Feature("isa-triton-amd", "ISA analysis of Triton kernels for AMD (--arch gfx942)", True,
            (_TRITON,
             Need("Triton's AMD backend with a linker (an external ld.lld before Triton 3.5)", (TRITON_AMD,),
                  "pip install -U 'triton>=3.5' (links in-process; or apt-get install lld-19)")),
            fix=_PIP_TRITON),
    Feature("isa-ptx", "ISA analysis of PTX (.ptx)", False, (_PTXAS, _CUOBJDUMP), fix=_PIP_CUDA,
            better_with=(_NVDISASM,)),
    Feature("isa-cubin", "ISA analysis of NVIDIA binaries (.cubin, fatbins, executables)", False, (_CUOBJDUMP,),
            better_with=(_NVDISASM,)),
    Feature("isa-amd-code-object", "ISA analysis of AMD code objects (.hsaco, .co)", False,
            (Need("llvm-objdump (LLVM 17 or newer)", (tool("llvm-objdump"),), _APT_LLVM),),
            better_with=(Need("llvm-readelf (reads the metadata note only where the msgpack module is missing)",
                              (tool("llvm-readelf"),), _APT_LLVM),)),
    Feature("profile-nvidia", "Profiling on NVIDIA GPUs with Nsight Compute (kpilot profile -- CMD)", False,
            (Need("ncu", (tool("ncu"),), "install " + TOOLS["ncu"].package),
             Need("an NVIDIA GPU with its driver", (NVIDIA_GPU,),
                  "a machine with an NVIDIA GPU and its driver (nvidia-smi lists the GPUs)"),
             Need("permission to read the GPU's performance counters", (NCU_COUNTERS,), _COUNTERS_FIX))),
    Feature("ncu-report", "Reading .ncu-rep reports without running ncu (kpilot profile --import x.ncu-rep)", False,
            (Need("the Python module ncu_report, or ncu (its extras/python)", (module("ncu_report"), tool("ncu")),
                  "pip install 'kernelpilot[profile]'"),)),
    Feature("profile-amd", "Profiling on AMD GPUs (kpilot profile --tool rocprofv3; reading its CSV needs nothing)",
            False, (Need("rocprofv3", (tool("rocprofv3"),), "install " + TOOLS["rocprofv3"].package),)),
    Feature("eval", "Checking and benchmarking candidates on the CPU (kpilot check/bench/eval --device cpu)", False,
            (_TORCH,)),
    Feature("eval-gpu", "Checking and timing on a GPU (kpilot check/bench/eval; kpilot profile --tool torch)", False,
            (_TORCH, _TORCH_GPU)),
    Feature("llm", "LLM-driven optimization and answers (kpilot optimize --strategy llm, kpilot docs ask)", False,
            (Need("the Python module anthropic or openai", (module("anthropic"), module("openai")),
                  "pip install 'kernelpilot[llm]'"),)),
    Feature("mcp", "MCP server for coding agents (kpilot mcp)", False,
            (Need("the Python module mcp", (module("mcp"),), "pip install 'kernelpilot[mcp]'"),)),
    Feature("docs-pdf", "PDF manuals in the docs corpus (kpilot docs add x.pdf)", False,
            (Need("the Python module pypdf", (module("pypdf"),), "pip install 'kernelpilot[docs]'"),)),
)


def _met(need: Need, available: frozenset[str] | set[str]) -> bool:
    return any(k in available for k in need.any_of)


def _status(feature: Feature, available: frozenset[str] | set[str]) -> FeatureStatus:
    missing = [n for n in feature.needs if not _met(n, available)]
    optional = tuple(n.what for n in feature.better_with if not _met(n, available))
    if not missing:
        return FeatureStatus(feature, (), None, optional)
    fixes = list(dict.fromkeys(n.fix for n in missing))
    fix = fixes[0] if len(fixes) == 1 else feature.fix or "; ".join(fixes)
    return FeatureStatus(feature, tuple(n.what for n in missing), fix, optional)


def evaluate(available: Iterable[str], features: Iterable[Feature] = FEATURES) -> list[FeatureStatus]:
    """Each feature's status given the keys of the pieces found (``tool:NAME``, ``python:NAME`` and the
    facts above). The fix of an unusable feature is its missing need's fix; with several different ones,
    the feature's own ``fix`` where it has one, else each of them."""
    found = frozenset(available)
    return [_status(f, found) for f in features]


def core_unusable(statuses: Iterable[FeatureStatus]) -> list[FeatureStatus]:
    """The core features that are unusable: doctor fails when there is any."""
    return [s for s in statuses if s.feature.core and not s.usable]


def features_using(key: str, features: Iterable[Feature] = FEATURES) -> list[tuple[str, bool]]:
    """The features that ``key`` serves: (feature id, required) pairs; required is False for ``better_with``."""
    out = []
    for f in features:
        if any(key in n.any_of for n in f.needs):
            out.append((f.id, True))
        elif any(key in n.any_of for n in f.better_with):
            out.append((f.id, False))
    return out
