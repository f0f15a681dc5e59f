"""The MoE routing kernel for the GPU it runs on: the CUDA C++ kernels on NVIDIA sm_80 and newer,
the HIP DPP kernel on AMD GFX9 (gfx90a, gfx942, gfx950: not run here, there being no AMD GPU), and the
portable Triton kernel otherwise (other shapes, other GPUs, and the CPU through Triton's interpreter).

On NVIDIA the CUDA kernel is the one measured fastest on the H200 for the case's tokens, experts, k, logit size
and bias (benchmarks/results/moe_sort*.json: each case's algorithms timed in turn, two rounds): the
sorting-network kernel topk_sigmoid_cuda.sort_algo gives (its experts per thread, pruned to the K chunks of
largest maxima or not), but where another kernel was faster (OTHER): with a bias at 64 experts, k 4, up to 1,024
tokens, the first kernel (one warp per token), by 2% to 7% at 16 and 1,024 tokens on all three dtypes.

The packed-key kernel on a persistent grid served fp32 logits without a bias at 8,192 tokens: 256 experts with k 8
and 128 experts with k 8 (by 0.3% to 13%) until the sorting-network kernel's second selection, for warps whose
24-bit keys tie, ran on 32-bit keys rather than 64-bit ones (39d1c1f: at 128 experts, k 8, 6.11 us against 6.81,
benchmarks/results/moe_variants_refine.json), and 256 experts with k 4 until the pruned sorting-network kernel took
0.973x of its time there at fa03e56 (6.90 us against 7.09, moe_sort_float32_t8192_t65536_sort8_sort16_sort32_
prune16_prune32_fa03e56.json).

The packed-key kernel (one pass) was also picked for fp32 logits with a bias at 256 experts, k 8, 65,536 tokens (by
1%) until the sorting-network kernel took 0.923x of its time there at f527e90 (benchmarks/results/
moe_sort_biased_t8192_t65536_sort16_sort32_sort64_prune16_prune32_prune64_f527e90.json).

Measured at 8,192 and 65,536 tokens on all three dtypes, both variants (moe_sort_t8192_t65536_sort16_sort32_sort64_
prune16_prune32_prune64.json and its _biased twin), the kernel picked took 0.72x to 1.00x of the packed-key
kernel's time; the pruned kernel took 0.83x of the fastest unpruned one's at 256 experts, k 8, 65,536 tokens
without a bias (bf16, fp16 and fp32 alike), 0.93x to 1.00x on the other plain cases it serves, and 0.96x to 0.97x
with a bias (256 experts, k 8, 65,536 tokens, fp16 and bf16)."""

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


# Where another CUDA kernel was faster than the sorting-network one: (logit size in bytes, bias, tokens tier
# (topk_sigmoid_cuda.tokens_tier), experts, k) -> the algorithm.
OTHER = {(size, True, 1024, 64, 4): "warp" for size in (2, 4)}


def cuda_algo(logits: torch.Tensor, bias, k: int) -> str:
    tokens, experts = logits.shape
    size, biased = logits.element_size(), bias is not None
    return (OTHER.get((size, biased, topk_sigmoid_cuda.tokens_tier(tokens), experts, k))
            or topk_sigmoid_cuda.sort_algo(tokens, experts, k, size, biased))


def topk_sigmoid(logits: torch.Tensor, bias, k: int):
    which = pick(logits, k)
    if which == "cuda":
        return topk_sigmoid_cuda.run(logits, bias, k, cuda_algo(logits, bias, k))
    if which == "hip":
        return topk_sigmoid_hip.topk_sigmoid(logits, bias, k)
    return topk_sigmoid_triton.topk_sigmoid(logits, bias, k)
