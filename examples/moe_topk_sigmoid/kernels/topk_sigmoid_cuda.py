"""The CUDA C++ routing kernels bound to PyTorch: built on first use for the GPU it runs on (sm_80 or newer),
for 64, 128 or 256 experts, k 4 or 8, fp32/fp16/bf16 logits, one source file per dtype so that the build
runs in parallel. Their launch code is sigmoid_launch.h, shared with the CPU emulation (../emulation).

- ``keys`` (the default, topk_sigmoid_keys.cu): packed selection keys, EXPERTS/8 lanes per token (EXPERTS/16
  for 64 and 128 experts at k 4 with 16-bit logits and no bias), a grid that covers the tokens once.
- ``keys_persistent``: the same kernel on a grid of at most ``blocks_per_sm`` blocks per SM (12 by default,
  never more than fit at once), each warp taking token after token.
- ``warp`` (topk_sigmoid_warp.cu, the simplest): one warp per token, a REDUX and a ballot per round.
- ``sort`` (topk_sigmoid_sort.cu): sorting networks in each thread, EXPERTS/PT threads per token, PT experts per
  thread; ``sort8``, ``sort16``, ``sort32`` and ``sort64`` name a PT, ``sort`` the fastest for the case
  (sort_algo: a pruned one or not, by shape, tokens, logit size and bias). A larger PT means fewer threads per
  token, so fewer merges of lists across lanes, but longer sorts and more registers in each thread (fewer warps
  resident to hide the loads' latency); a smaller one the reverse.
- ``prune16``, ``prune32``, ``prune64``: the sorting-network kernel that first takes the maximum of each chunk of
  8 experts and then selects within the K chunks of the token's K largest maxima alone (the only ones that can
  hold its best K): the logits read again from L1 without a bias, the keys kept in shared memory with one.
"""

import sys
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import cuda_build  # noqa: E402
EXPERTS = (64, 128, 256)
KS = (4, 8)
ALGOS = {"warp": 0, "keys": 1, "keys_persistent": 2, "sort16": 3, "sort32": 4, "sort64": 5, "prune16": 6,
         "prune32": 7, "prune64": 8, "sort8": 9}
SHAPES = ((64, 4), (64, 8), (128, 4), (128, 8), (256, 4), (256, 8))   # (experts, k)
# The sorting-network kernel to run: by logit size in bytes and bias, then by token tier (tokens_tier), then for each
# of SHAPES, the fastest on an H200 of sort8, sort16, sort32, sort64, prune16, prune32 and prune64
# (results/moe_sort*.json: each case's kernels timed in turn over two rounds, outputs checked; fp16 and bf16 chose
# alike, so 16-bit logits share a table). A pruned kernel is named only where it was 2% or more faster than the
# best unpruned one, a margin for the timing's noise. What the table settles: the PT trade-off above (its larger
# PTs are at more experts and more tokens), and pruning, which skips the compare-exchanges of all but K chunks of 8
# experts at the cost of a pass over the chunks' maxima and of the chosen chunks' logits read again (from L1) or,
# with a bias, their keys kept in shared memory: it is picked only at 8,192 tokens or more with 128 or 256 experts
# (with a bias, only for 16-bit logits at 256 experts, k 8, 65,536 tokens).
SORT_ALGO = {
    (2, False): {1024: ("sort16",) * 6,
                 8192: ("sort16", "sort16", "prune32", "sort32", "prune64", "prune64"),
                 65536: ("sort16", "sort32", "sort32", "sort32", "prune64", "prune64")},
    (2, True): {1024: ("sort16",) * 6,
                8192: ("sort16", "sort16", "sort16", "sort32", "sort32", "sort64"),
                65536: ("sort16", "sort32", "sort32", "sort32", "sort64", "prune64")},
    (4, False): {1024: ("sort8", "sort8", "sort16", "sort8", "sort16", "sort16"),
                 8192: ("sort16", "sort16", "prune32", "sort32", "prune32", "prune32"),
                 65536: ("sort16", "sort16", "prune32", "prune32", "prune32", "prune32")},
    (4, True): {1024: ("sort16",) * 6,
                8192: ("sort16", "sort16", "sort16", "sort32", "sort16", "sort32"),
                65536: ("sort16", "sort16", "sort32", "sort32", "sort32", "sort32")},
}
ALGO = "keys"
# (algo, blocks_per_sm) runs that together reach every path of these kernels: every algorithm, the persistent grid
# small and full, the sorting-network kernel at each experts per thread, pruned or not. The GPU tests and the CPU
# emulation's run them all.
PATH_RUNS = (("keys", 12), ("keys_persistent", 1), ("keys_persistent", 12), ("warp", 12), ("sort8", 12),
             ("sort16", 12), ("sort32", 12), ("sort64", 12), ("prune16", 12), ("prune32", 12), ("prune64", 12))
CUDA_FLAGS = cuda_build.CUDA_FLAGS

_PER_DTYPE = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAException.h>
#include <algorithm>
#include "topk_sigmoid_warp.cu"
#include "topk_sigmoid_keys.cu"
#include "topk_sigmoid_sort.cu"

namespace {
using T = DTYPE;

int current_device() {
  int dev = 0;
  C10_CUDA_CHECK(cudaGetDevice(&dev));
  return dev;
}

template <typename Ask>
int once_per_device(int (&cache)[64], int dev, Ask ask) {   // ask() once per device (the first 64 kept)
  int n = dev < 64 ? cache[dev] : 0;
  if (!n) {
    n = ask();
    if (dev < 64) cache[dev] = n;
  }
  return n;
}

int sm_count() {
  static int count[64] = {0};
  const int dev = current_device();
  return once_per_device(count, dev, [dev] {
    int n = 0;
    C10_CUDA_CHECK(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev));
    return n;
  });
}

// KERNEL's blocks of `threads` that fit on one SM, per device. A template on the kernel itself: one count per
// instantiation (every topk_sigmoid_keys of one dtype has the same function type, so a count per type would give
// them all the occupancy of whichever shape ran first).
template <auto KERNEL>
int resident_blocks(int threads) {
  static int count[64] = {0};
  return once_per_device(count, current_device(), [threads] {
    int n = 0;
    C10_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, KERNEL, threads, 0));
    return std::max(n, 1);
  });
}

#define MOE_LAUNCH(kernel, blocks, threads, stream, ...) kernel<<<blocks, threads, 0, stream>>>(__VA_ARGS__)
#define MOE_FAIL(message) TORCH_CHECK(false, message)
#include "sigmoid_launch.h"
}  // namespace

void topk_sigmoid_NAME(int algo, int bps, int64_t k, bool b, const torch::Tensor& x, const torch::Tensor& bias,
                       torch::Tensor& w, torch::Tensor& ids) {
  const SigmoidArgs a{reinterpret_cast<const T*>(x.data_ptr()), b ? bias.data_ptr<float>() : nullptr,
                      w.data_ptr<float>(), ids.data_ptr<int>(), (int)x.size(0)};
  dispatch_sigmoid(algo, bps, (int)x.size(1), (int)k, b, a, c10::cuda::getCurrentCUDAStream());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}
"""

_MODULE = r"""
#include <torch/extension.h>

#define DECLARE(NAME) void topk_sigmoid_##NAME(int algo, int bps, int64_t k, bool b, const torch::Tensor& x, \
    const torch::Tensor& bias, torch::Tensor& w, torch::Tensor& ids);
DECLARE(f32)
DECLARE(f16)
DECLARE(bf16)

std::vector<torch::Tensor> topk_sigmoid(torch::Tensor x, torch::Tensor bias, bool has_bias, int64_t k, int64_t algo,
                                        int64_t blocks_per_sm) {
  TORCH_CHECK(blocks_per_sm >= 1, "blocks_per_sm must be 1 or more, not ", blocks_per_sm);
  TORCH_CHECK(x.is_cuda() && x.dim() == 2 && x.is_contiguous(), "logits: a contiguous [tokens, experts] CUDA tensor");
  TORCH_CHECK(reinterpret_cast<uintptr_t>(x.data_ptr()) % 16 == 0, "logits must be 16-byte aligned");
  if (has_bias) TORCH_CHECK(bias.is_cuda() && bias.scalar_type() == at::kFloat && bias.is_contiguous() &&
                            bias.numel() == x.size(1), "bias: a contiguous float32 CUDA tensor of one value per expert");
  auto w = torch::empty({x.size(0), k}, x.options().dtype(at::kFloat));
  auto ids = torch::empty({x.size(0), k}, x.options().dtype(at::kInt));
  switch (x.scalar_type()) {
    case at::kFloat: topk_sigmoid_f32((int)algo, (int)blocks_per_sm, k, has_bias, x, bias, w, ids); break;
    case at::kHalf: topk_sigmoid_f16((int)algo, (int)blocks_per_sm, k, has_bias, x, bias, w, ids); break;
    case at::kBFloat16: topk_sigmoid_bf16((int)algo, (int)blocks_per_sm, k, has_bias, x, bias, w, ids); break;
    default: TORCH_CHECK(false, "logits must be float32, float16 or bfloat16");
  }
  return {w, ids};
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("topk_sigmoid", &topk_sigmoid); }
"""

# The extension: its sources (named by a hash of everything they hold) and its module, built on first use.
_EXTENSION = cuda_build.Extension("kpilot_moe_topk_sigmoid", _PER_DTYPE, _MODULE, HERE,
                                  ("topk_sigmoid_common.cuh", "topk_sigmoid_warp.cu", "topk_sigmoid_keys.cu",
                                   "topk_sigmoid_sort.cu", "sigmoid_launch.h"))
_sources = _EXTENSION.sources
_extension = _EXTENSION.module


def supported(logits: torch.Tensor, k: int) -> bool:
    return cuda_build.runs_on(logits) and logits.shape[1] in EXPERTS and k in KS


def tokens_tier(tokens: int) -> int:
    """The measured token count whose choices serve `tokens`: 1,024 up to it, 8,192 below 65,536, then 65,536."""
    return 1024 if tokens <= 1024 else 8192 if tokens < 65536 else 65536


def sort_algo(tokens: int, experts: int, k: int, element_size: int = 2, biased: bool = False) -> str:
    """The sorting-network kernel measured fastest for this case (SORT_ALGO)."""
    return SORT_ALGO[(element_size, biased)][tokens_tier(tokens)][SHAPES.index((experts, k))]


def run(logits: torch.Tensor, bias, k: int, algo: str, blocks_per_sm: int = 12):
    """``blocks_per_sm``: with "keys_persistent", the grid's blocks per SM (at most). "sort": the sorting-network
    kernel with the experts per thread for the shape."""
    if not supported(logits, k) or algo not in (*ALGOS, "sort"):
        # refused here: the extension's own checks would stop it too, but a check whose message carries values
        # has crashed the process on the GPU machine's build instead of raising
        raise ValueError(f"this kernel routes {', '.join(map(str, EXPERTS))} experts with k in {KS} on NVIDIA "
                         f"sm_80+ ({', '.join(ALGOS)} or sort), not logits {tuple(logits.shape)} on "
                         f"{logits.device}, k {k}, {algo!r}")
    return launch(logits, bias, k, algo, blocks_per_sm)


def launch(logits: torch.Tensor, bias, k: int, algo: str, blocks_per_sm: int = 12):
    """``run`` without its checks, for a caller that has asked ``supported`` already and names an algorithm of
    ``ALGOS`` (dispatch.py, on every call it times)."""
    if algo == "sort":
        algo = sort_algo(logits.shape[0], logits.shape[1], k, logits.element_size(), bias is not None)
    x = logits.contiguous()
    if x.data_ptr() % 16:
        x = x.clone()
    b = bias.float().contiguous() if bias is not None else x.new_empty(0, dtype=torch.float32)
    return tuple(_extension().topk_sigmoid(x, b, bias is not None, int(k), ALGOS[algo], int(blocks_per_sm)))


def topk_sigmoid(logits: torch.Tensor, bias, k: int):
    return run(logits, bias, k, ALGO)
