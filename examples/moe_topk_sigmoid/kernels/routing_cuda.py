"""Every router of the case study in CUDA C++ (topk_router.cu) bound to PyTorch: plain and biased sigmoid, softmax
gating and DeepSeek-V3's grouped selection, for any expert count from 1 to 512 and any k up to 16 (and up to the
experts), fp32/fp16/bf16 logits, on NVIDIA sm_80 and newer. Built on first use (cuda_build). The merge kernel
(sorting networks) takes k 4 to 8 from 4,096 tokens (up to 32 experts, one lane a token, k 1 to 8 from 8,192; rows
wider than 32 bytes from 65,536) at the shapes moe::merge_shape (and, with groups, moe::grouped_merge_shape) gives;
the rounds kernel everything else (router_launch.h: the dispatch, shared with the CPU emulation in ../emulation).

The shapes the sigmoid kernels of topk_sigmoid_cuda.py were tuned for (64, 128, 256 experts, k 4 or 8) go to
those; these kernels serve every other shape and the other two routers (dispatch.py).
"""

import functools
import re
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

// Blocks of moe::kRouterThreads threads of a kernel that fit on the GPU at once.
template <typename Kernel>
int resident_blocks(Kernel kernel) {
  int per_sm = 0, sms = 0, device = 0;
  C10_CUDA_CHECK(cudaGetDevice(&device));
  C10_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  C10_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, moe::kRouterThreads, 0));
  return std::max(1, per_sm) * sms;
}

#define MOE_LAUNCH(kernel, blocks, threads, stream, ...) kernel<<<blocks, threads, 0, stream>>>(__VA_ARGS__)
#define MOE_FAIL(message) TORCH_CHECK(false, message)
#include "router_launch.h"
}  // namespace

void route_NAME(const torch::Tensor& x, const torch::Tensor& bias, torch::Tensor& w, torch::Tensor& ids,
                int k, int renormalize, int n_group, int topk_group) {
  const Args a{reinterpret_cast<const T*>(x.data_ptr()), bias.numel() ? bias.data_ptr<float>() : nullptr,
               w.data_ptr<float>(), ids.data_ptr<int>(), (int)x.size(0), (int)x.size(1), k, renormalize, n_group,
               topk_group};
  if (a.tokens > 0) dispatch(a, c10::cuda::getCurrentCUDAStream());
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
                                  ("topk_sigmoid_common.cuh", "topk_router.cu", "router_launch.h"),
                                  parts={name: str(number) for name, number in ROUTERS.items()})
_sources = _EXTENSION.sources
_extension = _EXTENSION.module


MAX_GROUPS = 16


def refusal(router: str, logits: torch.Tensor, bias, k: int, n_group: int = 1, topk_group: int = 1,
            on_gpu: bool = True) -> str | None:
    """Why the kernel cannot route these arguments, or None. Checked here, before the extension is called, so a
    bad argument is one clear Python error; the extension checks the same again. ``on_gpu=False``: the same
    checks but for the device (the CPU emulation's)."""
    if router not in ROUTERS:
        return f"router must be one of {', '.join(ROUTERS)}, not {router!r}"
    if not ((logits.is_cuda or not on_gpu) and logits.dim() == 2):
        return "logits: a [tokens, experts] CUDA tensor" if on_gpu else "logits: a [tokens, experts] tensor"
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


def path_shapes() -> list[tuple[str, int, int, dict]]:
    """(router, experts, k, extra) that together reach every path of these kernels and their dispatch: 8 to 512
    experts, k 1 to 16, each router; grouped selections whose groups are whole lanes and ones whose groups are not
    (96 in 16 groups, 120 in 8). At merge_token_counts' tokens, those of k 4 to 8 reach the merge kernel, in each
    of its loads: whole vectors (160, 384), pieces of 4 experts (60, 100; 8 groups of 4, 12 and 20), elements (50),
    and up to 32 experts those of k 1 to 8 (one lane a token: one chunk of 8, 12 in pieces, 24, 32); grouped, a
    group a lane or more (256, 384; with router_launch.h's kGroupedPieceGroupsALane at 1, also 32, 96 and 160 in 8
    groups) and two groups a lane (64 in 8 groups; at 2, the tree's setting, also 32, 96 and 160); groups of 15 (120
    in 8) stay on the rounds kernel. The tests run them on the GPU and in the CPU emulation."""
    out = []
    for experts, ks in ((8, (1, 2, 8)), (12, (3,)), (16, (16,)), (24, (5,)), (32, (4,)), (50, (5,)), (60, (4,)),
                        (64, (1, 16)), (100, (7,)), (160, (6, 8)), (256, (2, 16)), (384, (8,)), (512, (16,))):
        for k in ks:
            out += [("plain", experts, k, {}), ("biased", experts, k, {}), ("softmax", experts, k, {"renormalize": True}),
                    ("softmax", experts, k, {"renormalize": False})]
    out += [("grouped", e, k, {"n_group": g, "topk_group": t}) for e, g, t, k in
            ((256, 8, 4, 8), (160, 8, 3, 6), (384, 8, 4, 8), (64, 8, 4, 6), (16, 4, 2, 3), (512, 16, 8, 16), (8, 8, 8, 2),
             (96, 16, 6, 16), (120, 8, 4, 8), (96, 8, 4, 8), (32, 8, 2, 4))]
    return out


@functools.cache
def _launch_constants(kernels: Path) -> dict[str, int]:
    """The integer constants of kernels/router_launch.h (``constexpr int NAME = value;``), read once a folder."""
    text = (kernels / "router_launch.h").read_text()
    return {name: int(value) for name, value in re.findall(r"constexpr int (\w+) = (\d+);", text)}


def _launch_constant(name: str, kernels: Path) -> int:
    """One of _launch_constants; RuntimeError where router_launch.h does not define it."""
    try:
        return _launch_constants(kernels)[name]
    except KeyError:
        raise RuntimeError(f"router_launch.h defines no constexpr int {name}") from None


def merge_token_counts(router: str, experts: int, k: int, kernels: Path = HERE) -> tuple[int, ...]:
    """Token counts, each just above a threshold of router_launch.h's merge_serves (that of the folder `kernels`),
    at which the merge kernel takes a call of (router, experts, k) in some logit type: what the tests route to reach
    it (and, where kMergeWideTokens is set, just above it too: below it the wider shapes); () where it never does.
    The rule is restated here from the header's; test_router_emulation.py checks every path shape's counts against
    merge_serves itself, compiled."""
    if k > 8:
        return ()
    if router == "grouped" or experts > 32:
        if k < 4:
            return ()
        wide = _launch_constant("kMergeWideTokens", kernels)   # below it, wider shapes: both reached
        return (_launch_constant("kMergeTokens", kernels) + 3,) + ((wide + 3,) if wide > 0 else ())
    # One lane a token: a row of at most 32 bytes from kOneLaneTokens, a wider one from kOneLaneWideRowTokens, the
    # logits taking 2 (16-bit) or 4 (fp32) bytes an expert.
    counts = []
    if experts * 2 <= 32:
        counts.append(_launch_constant("kOneLaneTokens", kernels) + 3)
    if experts * 4 > 32:
        counts.append(_launch_constant("kOneLaneWideRowTokens", kernels) + 3)
    return tuple(counts)


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
