"""Every router of the case study as one CUDA C++ kernel (topk_router.cu) bound to PyTorch: plain and biased
sigmoid, softmax gating and DeepSeek-V3's grouped selection, for any expert count from 1 to 512 and any k up to
16 (and up to the experts), fp32/fp16/bf16 logits, on NVIDIA sm_80 and newer. Built on first use (cuda_build).

The shapes the sigmoid kernels of topk_sigmoid_cuda.py were tuned for (64, 128, 256 experts, k 4 or 8) go to
those; this kernel serves every other shape and the other two routers (dispatch.py).
"""

import sys
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import cuda_build  # noqa: E402

CUDA_FLAGS = cuda_build.CUDA_FLAGS
ROUTERS = {"plain": 0, "biased": 1, "softmax": 2, "grouped": 3}
MAX_EXPERTS, MAX_K = 512, 16

_PER_DTYPE = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAException.h>
#include "topk_router.cu"

namespace {
using T = DTYPE;

template <int W, int P>
void launch(int router, const torch::Tensor& x, const torch::Tensor& bias, torch::Tensor& w, torch::Tensor& ids,
            int k, int renormalize, int n_group, int topk_group) {
  const int tokens = (int)x.size(0), experts = (int)x.size(1);
  if (tokens == 0) return;
  const int blocks = (int)(((int64_t)tokens * W + 255) / 256);
  const T* xp = reinterpret_cast<const T*>(x.data_ptr());
  const float* bp = bias.numel() ? bias.data_ptr<float>() : nullptr;
  float* wp = w.data_ptr<float>();
  int* ip = ids.data_ptr<int>();
  auto stream = c10::cuda::getCurrentCUDAStream();
#define MOE_ROUTE(R) moe::topk_router<T, W, P, R><<<blocks, 256, 0, stream>>>(xp, bp, wp, ip, tokens, experts, k, \
                                                                             renormalize, n_group, topk_group)
  switch (router) {
    case moe::PLAIN: MOE_ROUTE(moe::PLAIN); break;
    case moe::BIASED: MOE_ROUTE(moe::BIASED); break;
    case moe::SOFTMAX: MOE_ROUTE(moe::SOFTMAX); break;
    case moe::GROUPED: MOE_ROUTE(moe::GROUPED); break;
    default: TORCH_CHECK(false, "unknown router ", router);
  }
#undef MOE_ROUTE
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}
}  // namespace

void route_NAME(int router, const torch::Tensor& x, const torch::Tensor& bias, torch::Tensor& w, torch::Tensor& ids,
                int k, int renormalize, int n_group, int topk_group) {
  const moe::RouterShape s = moe::router_shape((int)x.size(1));
  switch (s.w * 100 + s.p) {
    case 801: return launch<8, 1>(router, x, bias, w, ids, k, renormalize, n_group, topk_group);
    case 1601: return launch<16, 1>(router, x, bias, w, ids, k, renormalize, n_group, topk_group);
    case 3201: return launch<32, 1>(router, x, bias, w, ids, k, renormalize, n_group, topk_group);
    case 3202: return launch<32, 2>(router, x, bias, w, ids, k, renormalize, n_group, topk_group);
    case 3204: return launch<32, 4>(router, x, bias, w, ids, k, renormalize, n_group, topk_group);
    case 3206: return launch<32, 6>(router, x, bias, w, ids, k, renormalize, n_group, topk_group);
    case 3208: return launch<32, 8>(router, x, bias, w, ids, k, renormalize, n_group, topk_group);
    case 3212: return launch<32, 12>(router, x, bias, w, ids, k, renormalize, n_group, topk_group);
    case 3216: return launch<32, 16>(router, x, bias, w, ids, k, renormalize, n_group, topk_group);
    default: TORCH_CHECK(false, "experts must be 1 to 512, not ", x.size(1));
  }
}
"""

_MODULE = r"""
#include <torch/extension.h>

// host C++ only: the kernel file's router numbers (moe::Router) and lanes per token (moe::router_shape) restated
enum { PLAIN = 0, BIASED = 1, SOFTMAX = 2, GROUPED = 3 };
static int lanes_per_token(int64_t experts) { return experts <= 8 ? 8 : experts <= 16 ? 16 : 32; }

#define DECLARE(NAME) void route_##NAME(int router, const torch::Tensor& x, const torch::Tensor& bias, \
    torch::Tensor& w, torch::Tensor& ids, int k, int renormalize, int n_group, int topk_group);
DECLARE(f32)
DECLARE(f16)
DECLARE(bf16)

std::vector<torch::Tensor> route(torch::Tensor x, torch::Tensor bias, int64_t router, int64_t k, bool renormalize,
                                 int64_t n_group, int64_t topk_group) {
  TORCH_CHECK(x.is_cuda() && x.dim() == 2 && x.is_contiguous(), "logits: a contiguous [tokens, experts] CUDA tensor");
  const int64_t experts = x.size(1);
  TORCH_CHECK(experts >= 1 && experts <= 512, "experts must be 1 to 512, not ", experts);
  const int w_lanes = lanes_per_token(experts);
  TORCH_CHECK(k >= 1 && k <= 16 && k <= experts && k <= w_lanes, "k must be 1 to min(16, experts), not ", k);
  const bool biased = router == BIASED || router == GROUPED;
  if (biased) TORCH_CHECK(bias.is_cuda() && bias.scalar_type() == at::kFloat && bias.is_contiguous() &&
                          bias.numel() == experts, "bias: a contiguous float32 CUDA tensor of one value per expert");
  if (router == GROUPED) {
    TORCH_CHECK(n_group >= 1 && n_group <= w_lanes && experts % n_group == 0, "n_group must divide the experts (and "
                "be ", w_lanes, " or fewer), not ", n_group);
    TORCH_CHECK(topk_group >= 1 && topk_group <= n_group && k <= topk_group * (experts / n_group),
                "topk_group must be 1 to n_group, its groups holding k experts or more");
  }
  auto w = torch::empty({x.size(0), k}, x.options().dtype(at::kFloat));
  auto ids = torch::empty({x.size(0), k}, x.options().dtype(at::kInt));
  const int args[] = {(int)router, (int)k, (int)renormalize, (int)n_group, (int)topk_group};
  switch (x.scalar_type()) {
    case at::kFloat: route_f32(args[0], x, bias, w, ids, args[1], args[2], args[3], args[4]); break;
    case at::kHalf: route_f16(args[0], x, bias, w, ids, args[1], args[2], args[3], args[4]); break;
    case at::kBFloat16: route_bf16(args[0], x, bias, w, ids, args[1], args[2], args[3], args[4]); break;
    default: TORCH_CHECK(false, "logits must be float32, float16 or bfloat16");
  }
  return {w, ids};
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("route", &route); }
"""

# The extension: its sources (named by a hash of everything they hold) and its module, built on first use.
_EXTENSION = cuda_build.Extension("kpilot_moe_router", _PER_DTYPE, _MODULE, HERE,
                                  ("topk_sigmoid_common.cuh", "topk_router.cu"))
_sources = _EXTENSION.sources
_extension = _EXTENSION.module


def lanes(experts: int) -> int:
    """The lanes per token the kernel gives this many experts (moe::router_shape): 8, 16 or 32."""
    return 8 if experts <= 8 else 16 if experts <= 16 else 32


def supported(logits: torch.Tensor, k: int, n_group: int = 1) -> bool:
    experts = logits.shape[-1] if logits.dim() == 2 else 0
    return (cuda_build.runs_on(logits) and logits.dtype in (torch.float32, torch.float16, torch.bfloat16)
            and 1 <= experts <= MAX_EXPERTS and 1 <= k <= min(MAX_K, experts, lanes(experts))
            and n_group <= lanes(experts))


def route(router: str, logits: torch.Tensor, bias, k: int, renormalize: bool = False, n_group: int = 1,
          topk_group: int = 1):
    x = logits.contiguous()
    b = bias.float().contiguous() if bias is not None else x.new_empty(0, dtype=torch.float32)
    return tuple(_extension().route(x, b, ROUTERS[router], int(k), bool(renormalize), int(n_group), int(topk_group)))


def topk_sigmoid(logits: torch.Tensor, bias, k: int):
    return route("plain" if bias is None else "biased", logits, bias, k)


def topk_softmax(logits: torch.Tensor, k: int, renormalize: bool):
    return route("softmax", logits, None, k, renormalize)


def grouped_topk(logits: torch.Tensor, bias: torch.Tensor, k: int, n_group: int, topk_group: int):
    return route("grouped", logits, bias, k, n_group=n_group, topk_group=topk_group)
