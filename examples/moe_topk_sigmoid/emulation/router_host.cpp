// The case study's CUDA kernels and their dispatch, compiled as host C++ and run on the CPU by simt_host.h, with a
// C entry point each for router_emulation.py: kp_route (topk_router.cu through router_launch.h, as routing_cuda.py
// launches it; a namespace per dtype and router stands for its translation units) and kp_topk_sigmoid (the
// sigmoid kernels through sigmoid_launch.h, as topk_sigmoid_cuda.py launches them; a namespace per dtype). Each
// call's arrays are copied to guarded device memory (device_memory.h), so an access past them fails the call.
#include <memory>

#include "simt_host.h"
#include "device_memory.h"
#include "topk_router.cu"
#include "topk_sigmoid_keys.cu"
#include "topk_sigmoid_sort.cu"
#include "topk_sigmoid_warp.cu"

// The emulated device: 2 SMs, each fitting 1 block of a kernel at once, so that the persistent grids (the biased
// and grouped routers', the packed-key kernel's) are small and their warps stride over several tokens each, as
// they do on a GPU when the tokens outnumber the resident warps.
template <typename Kernel>
int resident_blocks(Kernel) {
  return 2;
}
template <auto KERNEL>
int resident_blocks(int) {
  return 1;
}
int sm_count() { return 2; }

#define MOE_LAUNCH(kernel, blocks, threads, stream, ...) \
  ::simt::launch((unsigned)(blocks), (unsigned)(threads), [&] { kernel(__VA_ARGS__); })
#define MOE_FAIL(message) throw std::runtime_error(message)

namespace f32_plain {
using T = float;
constexpr int ROUTER = moe::PLAIN;
#include "router_launch.h"
}
namespace f32_biased {
using T = float;
constexpr int ROUTER = moe::BIASED;
#include "router_launch.h"
}
namespace f32_softmax {
using T = float;
constexpr int ROUTER = moe::SOFTMAX;
#include "router_launch.h"
}
namespace f32_grouped {
using T = float;
constexpr int ROUTER = moe::GROUPED;
#include "router_launch.h"
}
namespace f16_plain {
using T = __half;
constexpr int ROUTER = moe::PLAIN;
#include "router_launch.h"
}
namespace f16_biased {
using T = __half;
constexpr int ROUTER = moe::BIASED;
#include "router_launch.h"
}
namespace f16_softmax {
using T = __half;
constexpr int ROUTER = moe::SOFTMAX;
#include "router_launch.h"
}
namespace f16_grouped {
using T = __half;
constexpr int ROUTER = moe::GROUPED;
#include "router_launch.h"
}
namespace bf16_plain {
using T = __nv_bfloat16;
constexpr int ROUTER = moe::PLAIN;
#include "router_launch.h"
}
namespace bf16_biased {
using T = __nv_bfloat16;
constexpr int ROUTER = moe::BIASED;
#include "router_launch.h"
}
namespace bf16_softmax {
using T = __nv_bfloat16;
constexpr int ROUTER = moe::SOFTMAX;
#include "router_launch.h"
}
namespace bf16_grouped {
using T = __nv_bfloat16;
constexpr int ROUTER = moe::GROUPED;
#include "router_launch.h"
}

namespace f32_sigmoid {
using T = float;
#include "sigmoid_launch.h"
}
namespace f16_sigmoid {
using T = __half;
#include "sigmoid_launch.h"
}
namespace bf16_sigmoid {
using T = __nv_bfloat16;
#include "sigmoid_launch.h"
}

// The library is built with hidden symbols (router_emulation.FLAGS) but for these entry points: the kernels'
// `__shared__` arrays are function statics, which g++ would otherwise make unique across the process, so that two
// trees' libraries loaded at once (a variant beside the tree) would share their "shared memory".
#define KP_EXPORT __attribute__((visibility("default")))

// Runs `call` (0 on success), turning what it throws into 1 and the reason in `error`: the entry points' convention.
template <typename Call>
int reported(char* error, int error_size, Call call) {
  try {
    return call();
  } catch (const std::exception& e) {
    std::snprintf(error, (size_t)error_size, "%s", e.what());
    return 1;
  }
}

// A call's arrays on the emulated device (device_memory.h): the logits and bias copied in, the weights and ids
// copied back out after the launch.
class DeviceCall {
 public:
  DeviceCall(int dtype, const void* x, const float* bias, int tokens, int experts, int k)
      : x_("the logits", x, (size_t)tokens * experts * (dtype == 0 ? 4 : 2)),
        bias_(bias ? std::make_unique<simt::DeviceArray>("the bias", bias, (size_t)experts * 4) : nullptr),
        w_("the weights", nullptr, (size_t)tokens * k * 4),
        ids_("the ids", nullptr, (size_t)tokens * k * 4) {}
  const void* x() const { return x_.data(); }
  const float* bias() const { return bias_ ? static_cast<const float*>(bias_->data()) : nullptr; }
  float* w() const { return static_cast<float*>(w_.data()); }
  int* ids() const { return static_cast<int*>(ids_.data()); }
  void copy_out(float* w, int* ids) const {
    w_.copy_to(w);
    ids_.copy_to(ids);
  }

 private:
  simt::DeviceArray x_;
  std::unique_ptr<simt::DeviceArray> bias_;
  simt::DeviceArray w_, ids_;
};

// Runs `launch(d)` on a DeviceCall d of the call's arrays, with faults on their guard pages caught
// (simt::guarded), then copies the weights and ids out to w and ids: what both entry points do once their
// arguments are checked.
template <typename Launch>
void on_device(int dtype, const void* x, const float* bias, float* w, int* ids, int tokens, int experts, int k,
               Launch launch) {
  const DeviceCall d(dtype, x, bias, tokens, experts, k);
  simt::guarded([&] { launch(d); });
  d.copy_out(w, ids);
}

// Every router namespace above, by its index in the entry points' switches: dtype * 4 + router (dtype 0 float32,
// 1 float16, 2 bfloat16; router a moe::Router).
#define FOR_EACH_ROUTER(CASE)                                                                           \
  CASE(0, f32_plain) CASE(1, f32_biased) CASE(2, f32_softmax) CASE(3, f32_grouped) CASE(4, f16_plain)   \
  CASE(5, f16_biased) CASE(6, f16_softmax) CASE(7, f16_grouped) CASE(8, bf16_plain) CASE(9, bf16_biased) \
  CASE(10, bf16_softmax) CASE(11, bf16_grouped)

inline bool known_router(int dtype, int router) { return dtype >= 0 && dtype <= 2 && router >= 0 && router <= 3; }

#define ROUTE(INDEX, NS)                                                                                         \
  case INDEX:                                                                                                    \
    return NS::dispatch(NS::Args{static_cast<const NS::T*>(d.x()), d.bias(), d.w(), d.ids(), tokens, experts, k, \
                                 renormalize, n_group, topk_group},                                             \
                        nullptr);

// Routes `tokens` rows of `experts` logits (dtype 0 float32, 1 float16, 2 bfloat16; router a moe::Router) as the
// CUDA extension's route does, into w and ids (tokens x k). Returns 0, or 1 with the reason in `error`.
extern "C" KP_EXPORT int kp_route(int dtype, int router, const void* x, const float* bias, float* w, int* ids,
                                  int tokens, int experts, int k, int renormalize, int n_group, int topk_group,
                                  char* error, int error_size) {
  return reported(error, error_size, [&] {
    if (tokens <= 0) return 0;
    if (!known_router(dtype, router)) throw std::runtime_error("unknown dtype or router");
    on_device(dtype, x, bias, w, ids, tokens, experts, k, [&](const DeviceCall& d) {
      switch (dtype * 4 + router) { FOR_EACH_ROUTER(ROUTE) }
    });
    return 0;
  });
}

#define SERVES(INDEX, NS) \
  case INDEX:              \
    return NS::merge_serves(NS::Args{nullptr, nullptr, nullptr, nullptr, tokens, experts, k, 0, 1, 1}, sizeof(NS::T));

// Whether router_launch.h's merge_serves gives a call of `tokens` rows of `experts` logits (dtype and router as
// kp_route's) at k to the merge kernel: 1 or 0; -1 for an unknown dtype or router.
extern "C" KP_EXPORT int kp_merge_serves(int dtype, int router, int tokens, int experts, int k) {
  if (!known_router(dtype, router)) return -1;
  switch (dtype * 4 + router) { FOR_EACH_ROUTER(SERVES) }
  return -1;
}

#define SIGMOID(INDEX, NS)                                                                                        \
  case INDEX:                                                                                                     \
    return NS::dispatch_sigmoid(algo, blocks_per_sm, experts, k, bias != nullptr,                                 \
                                NS::SigmoidArgs{static_cast<const NS::T*>(d.x()), d.bias(), d.w(), d.ids(), tokens}, \
                                nullptr);

// Routes `tokens` rows of `experts` logits (dtype as kp_route's) by sigmoid kernel `algo` (topk_sigmoid_cuda.ALGOS),
// with a bias where `bias` is not null, as the CUDA extension's topk_sigmoid does. Returns 0, or 1 with the reason
// in `error`.
extern "C" KP_EXPORT int kp_topk_sigmoid(int dtype, int algo, const void* x, const float* bias, float* w, int* ids,
                                         int tokens, int experts, int k, int blocks_per_sm, char* error,
                                         int error_size) {
  return reported(error, error_size, [&] {
    if (tokens <= 0) return 0;
    if (dtype < 0 || dtype > 2) throw std::runtime_error("unknown dtype");
    on_device(dtype, x, bias, w, ids, tokens, experts, k, [&](const DeviceCall& d) {
      switch (dtype) {
        SIGMOID(0, f32_sigmoid)
        SIGMOID(1, f16_sigmoid)
        SIGMOID(2, bf16_sigmoid)
      }
    });
    return 0;
  });
}
