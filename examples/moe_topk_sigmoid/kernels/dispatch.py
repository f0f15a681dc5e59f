"""The MoE routing kernel for the GPU it runs on: the CUDA C++ kernels on NVIDIA sm_80 and newer,
the HIP DPP kernel on AMD GFX9 (gfx90a, gfx942, gfx950: not run here, there being no AMD GPU), and the
portable Triton kernel otherwise (other shapes, other GPUs, and the CPU through Triton's interpreter).

On NVIDIA the CUDA kernel is the one measured fastest on the H200 for the case's tokens, experts, k, logit size
and bias (benchmarks/results/moe_sort*.json: each case's algorithms timed in turn, two rounds): the
sorting-network kernel at the experts per thread topk_sigmoid_cuda.sort_algo gives, but where another kernel
was faster (OTHER):

- a bias, 64 experts, k 4, up to 1,024 tokens: the first kernel (one warp per token), by 2% to 7% at 16 and
  1,024 tokens on all three dtypes;
- fp32 logits without a bias at 256 experts (8,192 and 65,536 tokens) and 128 experts with k 8 at 8,192 tokens:
  the packed-key kernel (persistent grid up to 8,192 tokens, one pass beyond), by 1% to 19%; the sorting
  network's 32-byte chunks hold more registers and its selection tracks the best key left out to see ties;
- fp32 logits with a bias at 256 experts, k 8, 65,536 tokens: the packed-key kernel, by 1%.

Elsewhere the sorting-network kernel took 0.72x to 1.00x of the packed-key kernel's time (0.89x by geometric
mean, 150 timings) and 0.71x to 1.05x of the first kernel's up to 1,024 tokens (0.87x, 78; the slowest, fp32
logits without a bias at 1,024 tokens, 64 and 128 experts with k 8, where it is faster at 1 to 128 tokens)."""

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
OTHER = {
    **{(size, True, 1024, 64, 4): "warp" for size in (2, 4)},
    **{(4, False, 8192, e, k): "keys_persistent" for e, k in ((128, 8), (256, 4), (256, 8))},
    **{(4, False, 65536, 256, k): "keys" for k in (4, 8)},
    (4, True, 65536, 256, 8): "keys",
}


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
