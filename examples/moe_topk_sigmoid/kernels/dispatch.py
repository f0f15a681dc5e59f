"""The MoE routing kernel for the GPU it runs on: the CUDA C++ packed-key kernel on NVIDIA sm_80 and newer,
the HIP DPP kernel on AMD GFX9 (gfx90a, gfx942, gfx950: not run here, there being no AMD GPU), and the
portable Triton kernel otherwise (other shapes, other GPUs, and the CPU through Triton's interpreter).

On NVIDIA the CUDA kernel is chosen by shape, from bench.py's H200 rows (bf16): up to 128 experts and 1,024
tokens the first kernel (one warp per token) was faster than the packed-key kernel on 30 of those 32 cases of
both variants at 6524ae2, and on 31 of 32 against version 4 at babaec9. Measured again at 81d1069 (bf16 and
fp32, moe_large.py): the first kernel is faster on 30 of the 32 64-expert cases, and at 128 experts the two
split 17 to 15, within 2% of each other by geometric mean. Above that, the packed-key kernel: on
its persistent grid up to 8,192 tokens, and on a grid that covers the tokens once beyond (at 65,536 tokens the
one-pass grid was faster on 10 of the 12 bf16 cases at babaec9, by up to 6%; at 8,192 the two were within 2%
but for one case, where the persistent grid was 5% faster)."""

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


SMALL = (128, 1024)   # experts, tokens: at most these, the one-warp-per-token CUDA kernel
PERSISTENT_UP_TO = 8192   # tokens: at most these (and above SMALL), the persistent grid


def cuda_algo(logits: torch.Tensor) -> str:
    tokens, experts = logits.shape
    if experts <= SMALL[0] and tokens <= SMALL[1]:
        return "warp"
    return "keys_persistent" if tokens <= PERSISTENT_UP_TO else "keys"


def topk_sigmoid(logits: torch.Tensor, bias, k: int):
    which = pick(logits, k)
    if which == "cuda":
        return topk_sigmoid_cuda.run(logits, bias, k, cuda_algo(logits))
    if which == "hip":
        return topk_sigmoid_hip.topk_sigmoid(logits, bias, k)
    return topk_sigmoid_triton.topk_sigmoid(logits, bias, k)
