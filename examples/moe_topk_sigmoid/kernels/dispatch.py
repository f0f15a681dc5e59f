"""The MoE routing kernel for the GPU it runs on: the CUDA C++ kernels on NVIDIA sm_80 and newer (the tuned sigmoid
kernels for 64, 128 and 256 experts at k 4 and 8, routing_cuda's kernel for every other shape and router), the HIP DPP
kernel on AMD GFX9 (gfx90a, gfx942, gfx950: written for them and checked at the ISA level, not run, there being no
AMD GPU here), and the portable Triton kernel otherwise (other shapes, other GPUs, and the CPU through Triton's
interpreter).

On NVIDIA no one CUDA kernel is fastest on every case, since what a case costs depends on
- its tokens: whether the grid fills the GPU, or a launch's fixed cost and a few warps' latency decide;
- its experts and k: the compare-exchanges and registers of each thread's selection, and how many lanes share it;
- its logit size: the bytes read, and whether a 32-bit key holds the logit exactly (16-bit logits) or not (fp32);
- its bias: the score is no longer the logit, so the weights need the logits again and the keys more work.
So cuda_algo looks the case up in a table of the kernel measured fastest for it on an H200: the sorting-network
kernel that topk_sigmoid_cuda.sort_algo names (its experts per thread, and whether pruned to the K chunks of
largest maxima), or, where another kernel was faster than that one, the other kernel (OTHER). The measurements
are results/moe_sort*.json (each case's kernels timed in turn over two rounds, outputs checked). On another
GPU every entry is still correct, only perhaps not the fastest there."""

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

import routing_cuda  # noqa: E402
import routing_triton  # noqa: E402
import topk_sigmoid_cuda  # noqa: E402
import topk_sigmoid_hip  # noqa: E402
import topk_sigmoid_triton  # noqa: E402


def pick(logits: torch.Tensor, k: int) -> str:
    if topk_sigmoid_cuda.supported(logits, k):
        return "cuda"
    if routing_cuda.supported(logits, k):
        return "router"
    if topk_sigmoid_hip.supported(logits, k):
        return "hip"
    return "triton"


# Where another CUDA kernel was faster than the sorting-network kernel sort_algo names: (logit size in bytes, bias,
# tokens tier (topk_sigmoid_cuda.tokens_tier), experts, k) -> the algorithm. With a bias at 64 experts, k 4, up to
# 1,024 tokens, the one-warp-per-token kernel (results/moe_sort_biased_float16_float32_t8192_t1024_t16.json and
# results/moe_sort_biased_bfloat16_float32_t1024_sort16_sort32_prune16_prune32_prune64.json).
OTHER = {(size, True, 1024, 64, 4): "warp" for size in (2, 4)}


def cuda_algo(logits: torch.Tensor, bias, k: int) -> str:
    tokens, experts = logits.shape
    size, biased = logits.element_size(), bias is not None
    return (OTHER.get((size, biased, topk_sigmoid_cuda.tokens_tier(tokens), experts, k))
            or topk_sigmoid_cuda.sort_algo(tokens, experts, k, size, biased))


def topk_sigmoid(logits: torch.Tensor, bias, k: int):
    which = pick(logits, k)
    if which == "cuda":
        return topk_sigmoid_cuda.launch(logits, bias, k, cuda_algo(logits, bias, k))   # pick() checked it
    if which == "router":
        return routing_cuda.topk_sigmoid(logits, bias, k)
    if which == "hip":
        return topk_sigmoid_hip.topk_sigmoid(logits, bias, k)
    return topk_sigmoid_triton.topk_sigmoid(logits, bias, k)


def topk_softmax(logits: torch.Tensor, k: int, renormalize: bool):
    """Softmax gating: the CUDA router on NVIDIA, the Triton kernel elsewhere (and on the CPU through Triton's
    interpreter)."""
    if routing_cuda.supported(logits, k):
        return routing_cuda.topk_softmax(logits, k, renormalize)
    return routing_triton.topk_softmax(logits, k, renormalize)


def grouped_topk(logits: torch.Tensor, bias: torch.Tensor, k: int, n_group: int, topk_group: int):
    """DeepSeek-V3's grouped selection: the CUDA router on NVIDIA, the Triton kernel elsewhere (and on the CPU
    through Triton's interpreter)."""
    if routing_cuda.supported(logits, k, n_group):
        return routing_cuda.grouped_topk(logits, bias, k, n_group, topk_group)
    return routing_triton.grouped_topk(logits, bias, k, n_group, topk_group)
