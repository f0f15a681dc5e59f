"""The case study's CUDA kernels run on the CPU: the router (kernels/topk_router.cu with its dispatch,
kernels/router_launch.h) and the sigmoid kernels of the tuned grid (topk_sigmoid_warp/keys/sort.cu with
kernels/sigmoid_launch.h), their own source compiled by g++ against simt_host.h, which runs every GPU thread as a
fiber and its warp collectives and barriers as switches between them. Same calls as routing_cuda.route and
topk_sigmoid_cuda.run, on CPU tensors.

For checking the kernels' logic without a GPU (tests/test_router_emulation.py): it says nothing of their speed,
and the host's exact exp2 and division stand for the GPU's approximate ones (last-bit differences in a sigmoid).
Built on first use (once a process for each kernels folder) into a folder named by a hash of its sources, so a
changed kernel file is a new build."""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
KERNELS = HERE.parent / "kernels"
sys.path.insert(0, str(KERNELS))

import cuda_build  # noqa: E402
import routing_cuda  # noqa: E402
KERNEL_FILES = ("topk_sigmoid_common.cuh", "topk_router.cu", "router_launch.h", "topk_sigmoid_keys.cu",
                "topk_sigmoid_sort.cu", "topk_sigmoid_warp.cu", "sigmoid_launch.h")
DTYPES = {torch.float32: 0, torch.float16: 1, torch.bfloat16: 2}
# -O1: a build of every kernel and shape takes about 45 s; -O2 more than twice that for a faster run of little use
# to a test. -fsanitize=alignment: misaligned vector accesses fail the call (simt_host.h's handler).
# -fvisibility=hidden: each library's statics its own (router_host.cpp exports its entry points), where g++ makes a
# template's function statics (the kernels' `__shared__` arrays) one object across every library of the process.
FLAGS = ("-std=c++17", "-O1", "-fPIC", "-shared", "-fvisibility=hidden", "-Wno-unknown-pragmas",
         "-fsanitize=alignment")


class EmulationError(RuntimeError):
    """The emulation could not be built, or failed a call."""


class EmulationUnavailable(EmulationError):
    """This machine lacks what builds the emulation: a C++ compiler or CUDA's headers."""


def cuda_include() -> Path:
    """The folder of cuda_bf16.h and cuda_fp16.h (their host conversions): CUDA_HOME's, nvcc's, or the
    nvidia-cuda-runtime wheel's."""
    candidates = []
    if os.environ.get("CUDA_HOME"):
        candidates.append(Path(os.environ["CUDA_HOME"]) / "include")
    nvcc = shutil.which("nvcc")
    if nvcc:
        candidates.append(Path(nvcc).resolve().parent.parent / "include")
    try:
        import nvidia

        candidates += [Path(p) / sub / "include" for p in nvidia.__path__ for sub in ("cu13", "cuda_runtime")]
    except ImportError:
        pass
    for c in candidates:
        if (c / "cuda_bf16.h").is_file() and (c / "vector_functions.h").is_file():
            return c
    raise EmulationUnavailable("no CUDA headers (cuda_bf16.h) found: set CUDA_HOME, put nvcc on PATH, or install "
                               "nvidia-cuda-runtime")


def library_path(kernels: Path = KERNELS) -> Path:
    """Build the emulation of the kernel files in ``kernels`` (this folder's by default; a variant's copy of them
    otherwise), if this version of its sources has not been, and return the shared library."""
    cxx = shutil.which(os.environ.get("CXX", "g++"))
    if not cxx:
        raise EmulationUnavailable("no C++ compiler: install g++ (or set CXX)")
    include = cuda_include()
    missing = [f for f in KERNEL_FILES if not (kernels / f).is_file()]
    if missing:
        raise EmulationError(f"{kernels} lacks {', '.join(missing)}")
    sources = [HERE / "simt_host.h", HERE / "device_memory.h", HERE / "router_host.cpp",
               *(kernels / f for f in KERNEL_FILES)]
    digest = hashlib.sha256(b"".join(p.read_bytes() for p in sources) + " ".join(FLAGS).encode()).hexdigest()[:12]
    out = cuda_build.build_root() / f"kpilot_moe_emulation_{digest}" / "router_host.so"
    if out.is_file():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".router_host.{os.getpid()}.so")
    cmd = [cxx, *FLAGS, f"-I{HERE}", f"-I{kernels}", f"-I{include}", str(HERE / "router_host.cpp"), "-o", str(tmp)]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise EmulationError(f"building the emulation failed:\n{done.stderr[-4000:]}")
    tmp.replace(out)
    return out


_libraries: dict[Path, ctypes.CDLL] = {}   # by kernels folder: built (or found) and loaded once a process


def _library(kernels: Path):
    if kernels not in _libraries:
        lib = ctypes.CDLL(str(library_path(kernels)))
        lib.kp_route.restype = ctypes.c_int
        lib.kp_route.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                                 ctypes.c_void_p, *[ctypes.c_int] * 6, ctypes.c_char_p, ctypes.c_int]
        lib.kp_topk_sigmoid.restype = ctypes.c_int
        lib.kp_topk_sigmoid.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                                        ctypes.c_void_p, *[ctypes.c_int] * 4, ctypes.c_char_p, ctypes.c_int]
        lib.kp_merge_serves.restype = ctypes.c_int
        lib.kp_merge_serves.argtypes = [ctypes.c_int] * 5
        _libraries[kernels] = lib
    return _libraries[kernels]


def route(router: str, logits: torch.Tensor, bias, k: int, renormalize: bool = False, n_group: int = 1,
          topk_group: int = 1, kernels: Path = KERNELS):
    """(weights, ids) for CPU logits [tokens, experts], as routing_cuda.route gives them on a GPU (with the kernel
    files of ``kernels``). The arguments are checked as routing_cuda checks them (its refusal), but for the
    device."""
    why = routing_cuda.refusal(router, logits, bias, k, n_group, topk_group, on_gpu=False)
    if why:
        raise ValueError(why)
    return _call(kernels, "kp_route", routing_cuda.ROUTERS[router], logits, bias, k, int(bool(renormalize)),
                 int(n_group), int(topk_group))


def merge_serves(router: str, dtype: torch.dtype, tokens: int, experts: int, k: int,
                 kernels: Path = KERNELS) -> bool:
    """Whether router_launch.h's merge_serves (of the folder ``kernels``) gives such a call to the merge kernel:
    the rule itself, compiled, for what routing_cuda.merge_token_counts says of it."""
    served = _library(Path(kernels)).kp_merge_serves(DTYPES[dtype], routing_cuda.ROUTERS[router], tokens, experts, k)
    if served < 0:
        raise EmulationError(f"no router {router!r} in {dtype}")
    return bool(served)


def _call(kernels: Path, entry: str, selector: int, logits: torch.Tensor, bias, k: int, *extra: int):
    """The library's `entry` (kp_route or kp_topk_sigmoid: dtype, selector, logits, bias, weights, ids, tokens,
    experts, k, extra..., error buffer) on CPU copies of the arguments; (weights, ids), or EmulationError with the
    reason the call gave."""
    x = logits.cpu().contiguous()
    b = bias.float().cpu().contiguous() if bias is not None else None
    tokens, experts = x.shape
    w = torch.empty(tokens, k, dtype=torch.float32)
    ids = torch.empty(tokens, k, dtype=torch.int32)
    error = ctypes.create_string_buffer(512)
    rc = getattr(_library(Path(kernels)), entry)(
        DTYPES[x.dtype], selector, x.data_ptr(), b.data_ptr() if b is not None else None, w.data_ptr(),
        ids.data_ptr(), tokens, experts, int(k), *extra, error, len(error))
    if rc != 0:
        raise EmulationError(error.value.decode())
    return w, ids


def topk_sigmoid(logits: torch.Tensor, bias, k: int, algo: str, blocks_per_sm: int = 12, kernels: Path = KERNELS):
    """(weights, ids) of sigmoid kernel ``algo`` (topk_sigmoid_cuda.ALGOS, or "sort": the sorting-network kernel
    topk_sigmoid_cuda.sort_algo picks) for CPU logits, as topk_sigmoid_cuda.run gives them on a GPU: 64, 128 or
    256 experts, k 4 or 8."""
    import topk_sigmoid_cuda

    if logits.dim() != 2 or logits.shape[1] not in topk_sigmoid_cuda.EXPERTS or k not in topk_sigmoid_cuda.KS:
        raise ValueError(f"these kernels route {topk_sigmoid_cuda.EXPERTS} experts with k in {topk_sigmoid_cuda.KS}, "
                         f"not logits {tuple(logits.shape)} with k {k}")
    if logits.dtype not in DTYPES:
        raise ValueError(f"logits must be float32, float16 or bfloat16, not {logits.dtype}")
    if algo == "sort":
        algo = topk_sigmoid_cuda.sort_algo(logits.shape[0], logits.shape[1], k, logits.element_size(),
                                           bias is not None)
    if algo not in topk_sigmoid_cuda.ALGOS or blocks_per_sm < 1:
        raise ValueError(f"algo must be one of {', '.join(topk_sigmoid_cuda.ALGOS)} or sort, blocks_per_sm 1 or more")
    return _call(kernels, "kp_topk_sigmoid", topk_sigmoid_cuda.ALGOS[algo], logits, bias, k, int(blocks_per_sm))
