"""The MoE routing kernel for the GPU it runs on: the CUDA C++ packed-key kernel on NVIDIA sm_80 and newer,
the HIP DPP kernel on AMD GFX9 (gfx90a, gfx942, gfx950: not run here, there being no AMD GPU), and the
portable Triton kernel otherwise (other shapes, other GPUs, and the CPU through Triton's interpreter).

On NVIDIA the CUDA kernel is chosen by shape, from bench.py's H200 rows (bf16): up to 128 experts and 1,024
tokens the first kernel (one warp per token) was faster than the packed-key kernel on 30 of those 32 cases of
both variants at 6524ae2, and on 31 of 32 against version 4 at babaec9. At e9d9816 (16 experts per lane at k 4,
IMAD in the two-REDUX rounds; benchmarks/results/moe_small_e9d9816.json, two runs, algorithms timed in turn per
case) the persistent grid of the packed-key kernel is faster than the first kernel on 15 of the 16 cases of
128 experts with 16-bit logits and no bias up to 1,024 tokens, and even on the 16th (0.86x to 1.00x of the time,
0.94x by geometric mean), so those take it. With fp32 logits it is faster on 3 of 8 such cases, with a bias on
9 of 24 (1.00x and 1.01x by geometric mean), and at 64 experts on 1 of 48 (1.09x).

Above 1,024 tokens, the packed-key kernel: on its persistent grid up to 8,192 tokens, and on a grid that covers
the tokens once beyond (at 65,536 tokens the one-pass grid was faster on 10 of the 12 bf16 cases at babaec9, by
up to 6%; at 8,192 the two were within 2% but for one case, where the persistent grid was 5% faster)."""

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


SMALL = (128, 1024)   # experts, tokens: at most these, the one-warp-per-token CUDA kernel (but see cuda_algo)
PERSISTENT_UP_TO = 8192   # tokens: at most these (and above SMALL), the persistent grid


def cuda_algo(logits: torch.Tensor, bias=None) -> str:
    tokens, experts = logits.shape
    keys_at_128 = bias is None and logits.element_size() == 2   # 16-bit logits, no bias: the packed keys win
    if experts <= SMALL[0] and tokens <= SMALL[1] and not (experts == 128 and keys_at_128):
        return "warp"
    return "keys_persistent" if tokens <= PERSISTENT_UP_TO else "keys"


def topk_sigmoid(logits: torch.Tensor, bias, k: int):
    which = pick(logits, k)
    if which == "cuda":
        return topk_sigmoid_cuda.run(logits, bias, k, cuda_algo(logits, bias))
    if which == "hip":
        return topk_sigmoid_hip.topk_sigmoid(logits, bias, k)
    return topk_sigmoid_triton.topk_sigmoid(logits, bias, k)
