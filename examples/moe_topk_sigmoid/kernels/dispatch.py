"""The MoE routing kernel for the GPU it runs on: the CUDA C++ kernels on NVIDIA sm_80 and newer,
the HIP DPP kernel on AMD GFX9 (gfx90a, gfx942, gfx950: not run here, there being no AMD GPU), and the
portable Triton kernel otherwise (other shapes, other GPUs, and the CPU through Triton's interpreter).

On NVIDIA the CUDA kernel is chosen by the logits' dtype, the bias and the shape, from H200 timings:

- fp16 or bf16 logits without a bias: the sorting-network kernel at every size. It took 0.74x to 1.00x of the
  time of the packed-key kernel (persistent grid up to 8,192 tokens, one-pass grid above; 0.88x by geometric
  mean) on the 36 bf16 cases of 1 to 65,536 tokens and the 12 fp16 cases of 8,192 and 65,536 tokens, and 0.71x
  to 0.94x of the first kernel's on the 24 bf16 cases up to 1,024 tokens (benchmarks/results/moe_sort.json, each
  case's algorithms timed in turn in two rounds).
- fp32 logits or a bias, up to 128 experts and 1,024 tokens: the first kernel (one warp per token). The packed-key
  kernel's persistent grid was faster there on 3 of 8 cases of 128 experts with fp32 logits, 9 of 24 with a bias
  (1.00x and 1.01x by geometric mean) and 1 of 48 at 64 experts (benchmarks/results/moe_small_e9d9816.json).
- Otherwise the packed-key kernel: on its persistent grid up to 8,192 tokens, and on a grid that covers the tokens
  once beyond (at 65,536 tokens the one-pass grid was faster on 10 of the 12 bf16 cases at babaec9, by up to 6%;
  at 8,192 the two were within 2% but for one case, where the persistent grid was 5% faster)."""

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


SMALL = (128, 1024)   # experts, tokens: at most these, the one-warp-per-token CUDA kernel (fp32 logits or a bias)
PERSISTENT_UP_TO = 8192   # tokens: at most these (and above SMALL), the persistent grid


def cuda_algo(logits: torch.Tensor, bias=None) -> str:
    tokens, experts = logits.shape
    if bias is None and logits.element_size() == 2:   # the sorting-network kernel's measured cases (it takes a bias too)
        return "sort"
    if experts <= SMALL[0] and tokens <= SMALL[1]:
        return "warp"
    return "keys_persistent" if tokens <= PERSISTENT_UP_TO else "keys"


def topk_sigmoid(logits: torch.Tensor, bias, k: int):
    which = pick(logits, k)
    if which == "cuda":
        return topk_sigmoid_cuda.run(logits, bias, k, cuda_algo(logits, bias))
    if which == "hip":
        return topk_sigmoid_hip.topk_sigmoid(logits, bias, k)
    return topk_sigmoid_triton.topk_sigmoid(logits, bias, k)
