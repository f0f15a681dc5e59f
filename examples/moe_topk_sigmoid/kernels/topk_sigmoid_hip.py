"""The HIP DPP kernel (topk_sigmoid_dpp.hip) for PyTorch on ROCm, through hipModuleLoad of a code object
built with hipcc for the GPU's arch on first use. Written for gfx90a/gfx942/gfx950; untested: no AMD GPU
was available, so only its ISA is checked (tests/test_moe_problem.py here)."""

import ctypes
import subprocess
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
EXPERTS = (64, 128, 256)
KS = (4, 8)
_modules: dict = {}


def _arch() -> str | None:
    if torch.version.hip is None or not torch.cuda.is_available():
        return None
    return torch.cuda.get_device_properties(0).gcnArchName.split(":")[0]


def supported(logits: torch.Tensor, k: int) -> bool:
    arch = _arch()
    return (arch is not None and arch.startswith("gfx9") and logits.is_cuda and logits.dim() == 2
            and logits.dtype == torch.float32 and logits.shape[1] in EXPERTS and k in KS)


def _kernel(experts: int, k: int, has_bias: bool):
    key = (experts, k, has_bias)
    if key not in _modules:
        hip = ctypes.CDLL("libamdhip64.so")
        out = Path.home() / ".cache" / "kpilot" / f"topk_dpp_{_arch()}_{experts}_{k}_{int(has_bias)}.hsaco"
        out.parent.mkdir(parents=True, exist_ok=True)
        if not out.exists():
            subprocess.run(["hipcc", "--genco", f"--offload-arch={_arch()}", "-O3", f"-DEXPERTS={experts}", f"-DK={k}",
                            f"-DHAS_BIAS={int(has_bias)}", "-o", str(out), str(HERE / "topk_sigmoid_dpp.hip")],
                           check=True)
        module, fn = ctypes.c_void_p(), ctypes.c_void_p()
        assert hip.hipModuleLoad(ctypes.byref(module), str(out).encode()) == 0
        assert hip.hipModuleGetFunction(ctypes.byref(fn), module, b"topk_sigmoid_dpp") == 0
        _modules[key] = (hip, fn)
    return _modules[key]


def topk_sigmoid(logits: torch.Tensor, bias, k: int):
    x = logits.contiguous()
    tokens, experts = x.shape
    w = torch.empty(tokens, k, device=x.device, dtype=torch.float32)
    ids = torch.empty(tokens, k, device=x.device, dtype=torch.int32)
    hip, fn = _kernel(experts, k, bias is not None)
    b = bias.contiguous() if bias is not None else w
    args = [ctypes.c_void_p(x.data_ptr()), ctypes.c_void_p(b.data_ptr()), ctypes.c_void_p(w.data_ptr()),
            ctypes.c_void_p(ids.data_ptr()), ctypes.c_int(tokens)]
    ptrs = (ctypes.c_void_p * len(args))(*[ctypes.cast(ctypes.pointer(a), ctypes.c_void_p) for a in args])
    stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
    blocks = (tokens + 3) // 4
    if blocks:
        assert hip.hipModuleLaunchKernel(fn, blocks, 1, 1, 256, 1, 1, 0, stream, ptrs, None) == 0
    return w, ids
