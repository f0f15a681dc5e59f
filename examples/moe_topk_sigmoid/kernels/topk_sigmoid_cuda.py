"""The CUDA C++ warp-per-token kernel (topk_sigmoid_warp.cu) bound to PyTorch with load_inline: built on
first use for the GPU it runs on (sm_80 or newer), for 64, 128 or 256 experts, k 4 or 8, fp32/fp16/bf16."""

from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
EXPERTS = (64, 128, 256)
KS = (4, 8)

_BINDING = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAException.h>

template <typename T, int E, int NK, bool B>
static void launch(const torch::Tensor& x, const torch::Tensor& bias, torch::Tensor& w, torch::Tensor& ids) {
  const int tokens = (int)x.size(0);
  const int blocks = (tokens + 7) / 8;        // 8 warps per block, one token each
  if (blocks == 0) return;
  moe::topk_sigmoid_warp<T, E, NK, B><<<blocks, 256, 0, c10::cuda::getCurrentCUDAStream()>>>(
      reinterpret_cast<const T*>(x.data_ptr()), B ? bias.data_ptr<float>() : nullptr, w.data_ptr<float>(),
      ids.data_ptr<int>(), tokens);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

template <typename T, int E>
static void by_k(int64_t k, bool b, const torch::Tensor& x, const torch::Tensor& bias, torch::Tensor& w,
                 torch::Tensor& ids) {
  if (k == 4) { b ? launch<T, E, 4, true>(x, bias, w, ids) : launch<T, E, 4, false>(x, bias, w, ids); return; }
  if (k == 8) { b ? launch<T, E, 8, true>(x, bias, w, ids) : launch<T, E, 8, false>(x, bias, w, ids); return; }
  TORCH_CHECK(false, "k must be 4 or 8, not ", k);
}

template <typename T>
static void by_experts(int64_t k, bool b, const torch::Tensor& x, const torch::Tensor& bias, torch::Tensor& w,
                       torch::Tensor& ids) {
  switch (x.size(1)) {
    case 64: return by_k<T, 64>(k, b, x, bias, w, ids);
    case 128: return by_k<T, 128>(k, b, x, bias, w, ids);
    case 256: return by_k<T, 256>(k, b, x, bias, w, ids);
    default: TORCH_CHECK(false, "experts must be 64, 128 or 256, not ", x.size(1));
  }
}

std::vector<torch::Tensor> topk_sigmoid_warp(torch::Tensor x, torch::Tensor bias, bool has_bias, int64_t k) {
  TORCH_CHECK(x.is_cuda() && x.dim() == 2 && x.is_contiguous(), "logits: a contiguous [tokens, experts] CUDA tensor");
  TORCH_CHECK(reinterpret_cast<uintptr_t>(x.data_ptr()) % 16 == 0, "logits must be 16-byte aligned");
  if (has_bias) TORCH_CHECK(bias.is_cuda() && bias.scalar_type() == at::kFloat && bias.is_contiguous(),
                            "bias: a contiguous float32 CUDA tensor");
  auto w = torch::empty({x.size(0), k}, x.options().dtype(at::kFloat));
  auto ids = torch::empty({x.size(0), k}, x.options().dtype(at::kInt));
  switch (x.scalar_type()) {
    case at::kFloat: by_experts<float>(k, has_bias, x, bias, w, ids); break;
    case at::kHalf: by_experts<__half>(k, has_bias, x, bias, w, ids); break;
    case at::kBFloat16: by_experts<__nv_bfloat16>(k, has_bias, x, bias, w, ids); break;
    default: TORCH_CHECK(false, "logits must be float32, float16 or bfloat16");
  }
  return {w, ids};
}
"""

_ext = None


def _extension():
    global _ext
    if _ext is None:
        from torch.utils.cpp_extension import load_inline

        # load_inline binds the functions named in `functions`: their declarations go in cpp_sources
        decl = "std::vector<torch::Tensor> topk_sigmoid_warp(torch::Tensor x, torch::Tensor bias, bool has_bias, int64_t k);"
        _ext = load_inline(name="kpilot_moe_topk_sigmoid_warp", cpp_sources=decl,
                           cuda_sources=[(HERE / "topk_sigmoid_warp.cu").read_text() + _BINDING],
                           functions=["topk_sigmoid_warp"], extra_cuda_cflags=["-O3"], verbose=False)
    return _ext


def supported(logits: torch.Tensor, k: int) -> bool:
    return (logits.is_cuda and torch.version.hip is None and logits.dim() == 2 and logits.shape[1] in EXPERTS
            and k in KS and torch.cuda.get_device_capability(logits.device) >= (8, 0))


def topk_sigmoid(logits: torch.Tensor, bias, k: int):
    x = logits.contiguous()
    if x.data_ptr() % 16:
        x = x.clone()
    b = bias if bias is not None else x.new_empty(0, dtype=torch.float32)
    w, ids = _extension().topk_sigmoid_warp(x, b.contiguous(), bias is not None, int(k))
    return w, ids
