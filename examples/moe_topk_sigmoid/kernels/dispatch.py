"""The MoE routing kernel for the GPU it runs on: the CUDA C++ packed-key kernel on NVIDIA sm_80 and newer,
the HIP DPP kernel on AMD GFX9 (gfx90a, gfx942, gfx950: not run here, there being no AMD GPU), and the
portable Triton kernel otherwise (other shapes, other GPUs, and the CPU through Triton's interpreter)."""

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

import topk_sigmoid_cuda  # noqa: E402
import topk_sigmoid_hip  # noqa: E402
import topk_sigmoid_triton  # noqa: E402


def pick(logits: torch.Tensor, k: int) -> str:
    if topk_sigmoid_cuda.supported(logits, k):
        return "cuda"
    if topk_sigmoid_hip.supported(logits, k):
        return "hip"
    return "triton"


def topk_sigmoid(logits: torch.Tensor, bias, k: int):
    which = pick(logits, k)
    if which == "cuda":
        return topk_sigmoid_cuda.topk_sigmoid(logits, bias, k)
    if which == "hip":
        return topk_sigmoid_hip.topk_sigmoid(logits, bias, k)
    return topk_sigmoid_triton.topk_sigmoid(logits, bias, k)
