"""Every router of the case study in CUDA C++ (topk_router.cu) bound to PyTorch: plain and biased sigmoid, softmax
gating and DeepSeek-V3's grouped selection, for any expert count from 1 to 512 and any k up to 16 (and up to the
experts), fp32/fp16/bf16 logits, on NVIDIA sm_80 and newer. Built on first use (cuda_build). The merge kernel
(sorting networks) takes k 4 to 8 without groups from 4,096 tokens at the shapes moe::merge_shape gives; the
rounds kernel everything else.

The shapes the sigmoid kernels of topk_sigmoid_cuda.py were tuned for (64, 128, 256 experts, k 4 or 8) go to
those; these kernels serve every other shape and the other two routers (dispatch.py).
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
constexpr int ROUTER = UNIT_PART;   // this unit's router (moe::Router): a unit per dtype and router, built in parallel

struct Args {
  const T* x;
  const float* bias;
  float* w;
  int* ids;
  int tokens, experts, k, renormalize, n_group, topk_group;
};

// Blocks of 256 threads of a kernel that fit on the GPU at once.
template <typename Kernel>
int resident_blocks(Kernel kernel) {
  int per_sm = 0, sms = 0, device = 0;
  C10_CUDA_CHECK(cudaGetDevice(&device));
  C10_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  C10_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, 256, 0));
  return std::max(1, per_sm) * sms;
}

// The grid for KERNEL at W lanes a token: as many blocks as the tokens need; with a bias at most as many as fit
// on the GPU at once (the kernel's warps stride over the tokens, so that the bias's work is done once per block;
// the occupancy is looked up once per kernel). Without a bias there is no such work to share, and every warp takes
// its tokens once.
template <auto KERNEL, int W>
int grid_blocks(const Args& a) {
  const int blocks = (int)(((int64_t)a.tokens * W + 255) / 256);
  if constexpr (ROUTER == moe::BIASED || ROUTER == moe::GROUPED) {
    static const int fit = resident_blocks(KERNEL);   // on this device
    return std::min(blocks, fit);
  } else {
    return blocks;
  }
}

// The rounds kernel at (W, P), its rows' 16-byte loads where the lanes cover the experts exactly.
template <int W, int P>
void launch(const Args& a, cudaStream_t stream) {
  constexpr auto kernel = moe::topk_router<T, W, P, ROUTER>;
  const int vector_rows = W * P == a.experts && (a.experts * (int)sizeof(T)) % 16 == 0 &&
                          reinterpret_cast<uintptr_t>(a.x) % 16 == 0;
  kernel<<<grid_blocks<kernel, W>(a), 256, 0, stream>>>(a.x, a.bias, a.w, a.ids, a.tokens, a.experts, a.k,
                                                        a.renormalize, a.n_group, a.topk_group, vector_rows);
}

// The merge kernel (k up to 8, no groups) at (W, C), its rows' 16-byte loads where the experts are a multiple of 8
// and the logits 16-byte aligned.
template <int W, int C>
void launch_merge(const Args& a, cudaStream_t stream) {
  constexpr auto kernel = moe::topk_router_merge<T, W, C, ROUTER>;
  const int vector_rows = a.experts % 8 == 0 && reinterpret_cast<uintptr_t>(a.x) % 16 == 0;
  kernel<<<grid_blocks<kernel, W>(a), 256, 0, stream>>>(a.x, a.bias, a.w, a.ids, a.tokens, a.experts, a.k,
                                                        a.renormalize, vector_rows);
}

// The merge kernel at (W, C), built only where moe::merge_shape gives this unit's router that shape: false
// elsewhere.
template <int W, int C>
bool merge(const Args& a, cudaStream_t stream) {
  if constexpr (ROUTER != moe::GROUPED && C * 8 <= moe::merge_most((int)sizeof(T), ROUTER)) {
    launch_merge<W, C>(a, stream);
    return true;
  } else {
    return false;
  }
}

#define MERGE(W, C) \
  case W * 100 + C: return merge<W, C>(a, stream);

// The merge kernel at moe::merge_shape's shapes for this logit type (SIZE = sizeof(T), a template parameter so
// that the other sizes' shapes are not built): true if it took the call. It serves k 4 to 8 from 4,096 tokens:
// timed against the rounds on every router case (results/moe_routers_merge_ab.json) it lost at k 1 (its eight
// kept keys and networks for one) and on up to 3,000 tokens, and won on the large ones.
template <int SIZE>
bool route_merge(const Args& a, cudaStream_t stream) {
  if (ROUTER == moe::GROUPED || a.k < 4 || a.k > 8 || a.tokens < 4096) return false;
  const moe::RouterShape s = moe::merge_shape(a.experts, SIZE, ROUTER);
  if constexpr (SIZE == 4) {   // 4 lanes of up to 32 experts
    switch (s.w * 100 + s.p) { MERGE(4, 2) MERGE(4, 3) MERGE(4, 4) }
  } else {
    switch (s.w * 100 + s.p) {
      MERGE(4, 2) MERGE(4, 3) MERGE(4, 4) MERGE(4, 5) MERGE(4, 6) MERGE(4, 8) MERGE(8, 4) MERGE(8, 5) MERGE(8, 6)
      MERGE(8, 8) MERGE(16, 4)
    }
  }
  return false;
}
#undef MERGE
}  // namespace

void route_NAME(const torch::Tensor& x, const torch::Tensor& bias, torch::Tensor& w, torch::Tensor& ids,
                int k, int renormalize, int n_group, int topk_group) {
  const Args a{reinterpret_cast<const T*>(x.data_ptr()), bias.numel() ? bias.data_ptr<float>() : nullptr,
               w.data_ptr<float>(), ids.data_ptr<int>(), (int)x.size(0), (int)x.size(1), k, renormalize, n_group,
               topk_group};
  if (a.tokens == 0) return;
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  if (route_merge<(int)sizeof(T)>(a, stream)) return;
  const moe::RouterShape s = moe::router_shape(a.experts, ROUTER == moe::GROUPED ? n_group : 1);
  switch (s.w * 100 + s.p) {
    case 401: return launch<4, 1>(a, stream);
    case 402: return launch<4, 2>(a, stream);
    case 404: return launch<4, 4>(a, stream);
    case 408: return launch<4, 8>(a, stream);
    case 808: return launch<8, 8>(a, stream);
    case 810: return launch<8, 10>(a, stream);
    case 812: return launch<8, 12>(a, stream);
    case 816: return launch<8, 16>(a, stream);
    case 1610: return launch<16, 10>(a, stream);
    case 1612: return launch<16, 12>(a, stream);
    case 1616: return launch<16, 16>(a, stream);
    case 1620: return launch<16, 20>(a, stream);
    case 1624: return launch<16, 24>(a, stream);
    case 1632: return launch<16, 32>(a, stream);
  }
  if constexpr (ROUTER == moe::GROUPED) {
    switch (s.w * 100 + s.p) {   // groups wider than router_shape's W for the experts
      case 801: return launch<8, 1>(a, stream);
      case 802: return launch<8, 2>(a, stream);
      case 804: return launch<8, 4>(a, stream);
      case 1601: return launch<16, 1>(a, stream);
      case 1602: return launch<16, 2>(a, stream);
      case 1604: return launch<16, 4>(a, stream);
      case 1608: return launch<16, 8>(a, stream);
    }
    TORCH_CHECK(false, "no grouped kernel for this expert count and n_group");
  } else {
    TORCH_CHECK(false, "no kernel for this expert count");
  }
}
"""

_MODULE = r"""
#include <torch/extension.h>

// host C++ only: the kernel file's router numbers (moe::Router) restated. The checks repeat routing_cuda.refusal's
// (which runs first) with constant messages.
enum { PLAIN = 0, BIASED = 1, SOFTMAX = 2, GROUPED = 3 };

// One translation unit per dtype and router (cuda_build's parts), each defining route_<dtype>_<router>.
#define DECLARE(NAME) void route_##NAME(const torch::Tensor& x, const torch::Tensor& bias, torch::Tensor& w, \
    torch::Tensor& ids, int k, int renormalize, int n_group, int topk_group);
#define DECLARE_ROUTERS(D) DECLARE(D##_plain) DECLARE(D##_biased) DECLARE(D##_softmax) DECLARE(D##_grouped)
DECLARE_ROUTERS(f32)
DECLARE_ROUTERS(f16)
DECLARE_ROUTERS(bf16)
using Route = void (*)(const torch::Tensor&, const torch::Tensor&, torch::Tensor&, torch::Tensor&, int, int, int, int);
#define ROUTES(D) {route_##D##_plain, route_##D##_biased, route_##D##_softmax, route_##D##_grouped}
const Route kRoutes[3][4] = {ROUTES(f32), ROUTES(f16), ROUTES(bf16)};   // [dtype][router]

std::vector<torch::Tensor> route(torch::Tensor x, torch::Tensor bias, int64_t router, int64_t k, bool renormalize,
                                 int64_t n_group, int64_t topk_group) {
  TORCH_CHECK(x.is_cuda() && x.dim() == 2 && x.is_contiguous(), "logits: a contiguous [tokens, experts] CUDA tensor");
  const int64_t experts = x.size(1);
  TORCH_CHECK(experts >= 1 && experts <= 512, "experts must be 1 to 512");
  TORCH_CHECK(k >= 1 && k <= 16 && k <= experts, "k must be 1 to min(16, experts)");
  const bool biased = router == BIASED || router == GROUPED;
  if (biased) TORCH_CHECK(bias.is_cuda() && bias.scalar_type() == at::kFloat && bias.is_contiguous() &&
                          bias.numel() == experts, "bias: a contiguous float32 CUDA tensor of one value per expert");
  if (router == GROUPED) {
    TORCH_CHECK(n_group >= 1 && n_group <= 16 && experts % n_group == 0, "n_group must divide the experts (16 at most)");
    TORCH_CHECK(topk_group >= 1 && topk_group <= n_group && k <= topk_group * (experts / n_group),
                "topk_group must be 1 to n_group, its groups holding k experts or more");
  }
  auto w = torch::empty({x.size(0), k}, x.options().dtype(at::kFloat));
  auto ids = torch::empty({x.size(0), k}, x.options().dtype(at::kInt));
  TORCH_CHECK(router >= PLAIN && router <= GROUPED, "unknown router");
  const int dtype = x.scalar_type() == at::kFloat ? 0 : x.scalar_type() == at::kHalf ? 1 :
                    x.scalar_type() == at::kBFloat16 ? 2 : -1;
  TORCH_CHECK(dtype >= 0, "logits must be float32, float16 or bfloat16");
  kRoutes[dtype][router](x, bias, w, ids, (int)k, (int)renormalize, (int)n_group, (int)topk_group);
  return {w, ids};
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("route", &route); }
"""

# The extension: its sources (named by a hash of everything they hold) and its module, built on first use.
_EXTENSION = cuda_build.Extension("kpilot_moe_router", _PER_DTYPE, _MODULE, HERE,
                                  ("topk_sigmoid_common.cuh", "topk_router.cu"),
                                  parts={name: str(number) for name, number in ROUTERS.items()})
_sources = _EXTENSION.sources
_extension = _EXTENSION.module


MAX_GROUPS = 16


def refusal(router: str, logits: torch.Tensor, bias, k: int, n_group: int = 1, topk_group: int = 1) -> str | None:
    """Why the kernel cannot route these arguments, or None. Checked here, before the extension is called, so a
    bad argument is one clear Python error; the extension checks the same again."""
    if router not in ROUTERS:
        return f"router must be one of {', '.join(ROUTERS)}, not {router!r}"
    if not (logits.is_cuda and logits.dim() == 2):
        return "logits: a [tokens, experts] CUDA tensor"
    if logits.dtype not in (torch.float32, torch.float16, torch.bfloat16):
        return f"logits must be float32, float16 or bfloat16, not {logits.dtype}"
    experts = logits.shape[1]
    if not 1 <= experts <= MAX_EXPERTS:
        return f"experts must be 1 to {MAX_EXPERTS}, not {experts}"
    if not 1 <= k <= min(MAX_K, experts):
        return f"k must be 1 to min({MAX_K}, experts), not {k}"
    if router in ("biased", "grouped") and (bias is None or bias.shape != (experts,) or bias.device != logits.device):
        return "bias: one value per expert, on the logits' device"
    if router == "grouped":
        if not (1 <= n_group <= MAX_GROUPS and experts % n_group == 0):
            return f"n_group must divide the experts (and be {MAX_GROUPS} or fewer), not {n_group}"
        if not (1 <= topk_group <= n_group and k <= topk_group * (experts // n_group)):
            return "topk_group must be 1 to n_group, its groups holding k experts or more"
    return None


def supported(logits: torch.Tensor, k: int, n_group: int = 1) -> bool:
    """Whether the kernel serves this shape on this GPU (dispatch.py's choice; the arguments' own errors are
    left to ``route``)."""
    return (cuda_build.runs_on(logits) and refusal("plain", logits, None, k) is None
            and n_group <= MAX_GROUPS)


def route(router: str, logits: torch.Tensor, bias, k: int, renormalize: bool = False, n_group: int = 1,
          topk_group: int = 1):
    why = refusal(router, logits, bias, k, n_group, topk_group)
    if why:
        raise ValueError(why)
    x = logits.contiguous()
    b = bias.float().contiguous() if bias is not None else x.new_empty(0, dtype=torch.float32)
    return tuple(_extension().route(x, b, ROUTERS[router], int(k), bool(renormalize), int(n_group), int(topk_group)))


def topk_sigmoid(logits: torch.Tensor, bias, k: int):
    return route("plain" if bias is None else "biased", logits, bias, k)


def topk_softmax(logits: torch.Tensor, k: int, renormalize: bool):
    return route("softmax", logits, None, k, renormalize)


def grouped_topk(logits: torch.Tensor, bias: torch.Tensor, k: int, n_group: int, topk_group: int):
    return route("grouped", logits, bias, k, n_group=n_group, topk_group=topk_group)
