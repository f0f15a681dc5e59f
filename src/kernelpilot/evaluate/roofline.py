"""The hardware floor of a case: bytes over peak memory bandwidth and FLOPs over peak rate, from the
arch data. A measured time below it is impossible."""

from __future__ import annotations

import re
from typing import Any

from kernelpilot.arch.registry import GPUSpec, get_gpu, list_gpus
from kernelpilot.errors import KernelpilotError
from kernelpilot.evaluate.cost import evaluate_cost

__all__ = ["gpu_from_device_name", "floor"]

_PEAK_BY_DTYPE = {"float32": "peak_fp32_tflops", "float16": "peak_fp16_tflops", "bfloat16": "peak_bf16_tflops",
                  "float8_e4m3fn": "peak_fp8_tflops", "float8_e5m2": "peak_fp8_tflops"}


def gpu_from_device_name(name: str | None) -> GPUSpec | None:
    """The product behind a device name as the driver reports it ("NVIDIA H200", "AMD Instinct MI300X")."""
    if not name:
        return None
    words = [w for w in re.split(r"[\s_]+", name.lower()) if w not in ("nvidia", "amd", "instinct", "tesla")]
    tries = ["-".join(words)] + ["-".join(words[i:i + 2]) for i in range(len(words))] + words
    for t in tries:
        try:
            return get_gpu(t)
        except KernelpilotError:
            continue
    for g in list_gpus():
        if g.name.lower() in name.lower():
            return g
    return None


def floor(cost: dict[str, str], params: dict[str, Any], gpu: GPUSpec | None) -> dict[str, Any] | None:
    """``{"bytes", "flops", "floor_us", "bound", "gpu"}`` for a case, or None when the problem gives no cost."""
    if not cost:
        return None
    nbytes = evaluate_cost(cost["bytes"], params) if "bytes" in cost else None
    flops = evaluate_cost(cost["flops"], params) if "flops" in cost else None
    out: dict[str, Any] = {"bytes": nbytes, "flops": flops, "gpu": gpu.name if gpu else None, "floor_us": None}
    if gpu is None:
        return out
    t_mem = nbytes / (gpu.memory_bandwidth_tbps * 1e12) * 1e6 if nbytes else 0.0
    dtype = str(params.get("dtype", "float32")).replace("torch.", "")
    peak = getattr(gpu, _PEAK_BY_DTYPE.get(dtype, "peak_fp32_tflops"), None)
    t_math = flops / (peak * 1e12) * 1e6 if flops and peak else 0.0
    out["floor_us"] = round(max(t_mem, t_math), 4)
    out["bound"] = "memory" if t_mem >= t_math else "compute"
    out["peak"] = {"bandwidth_tbps": gpu.memory_bandwidth_tbps, "tflops": peak, "dtype": dtype}
    return out
