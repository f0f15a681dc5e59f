// The router kernels of topk_router.cu and their dispatch (router_launch.h), compiled as host C++ and run on the
// CPU by simt_host.h: one C entry point, kp_route, for router_emulation.py. A namespace per dtype and router
// stands for routing_cuda.py's translation units.
#include "simt_host.h"
#include "topk_router.cu"

// Blocks that "fit at once": 2, so that the biased and grouped kernels' warps stride over several tokens each,
// as they do on a GPU when the tokens outnumber the resident warps.
template <typename Kernel>
int resident_blocks(Kernel) {
  return 2;
}

#define MOE_LAUNCH(kernel, blocks, stream, ...) ::simt::launch((unsigned)(blocks), 256, [&] { kernel(__VA_ARGS__); })
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

#define ROUTE(INDEX, NS)                                                                                        \
  case INDEX:                                                                                                   \
    NS::dispatch(NS::Args{static_cast<const NS::T*>(x), bias, w, ids, tokens, experts, k, renormalize, n_group, \
                          topk_group},                                                                        \
                 nullptr);                                                                                      \
    return 0;

// Routes `tokens` rows of `experts` logits (dtype 0 float32, 1 float16, 2 bfloat16; router a moe::Router) as the
// CUDA extension's route does, into w and ids (tokens x k). Returns 0, or 1 with the reason in `error`.
extern "C" int kp_route(int dtype, int router, const void* x, const float* bias, float* w, int* ids, int tokens,
                        int experts, int k, int renormalize, int n_group, int topk_group, char* error,
                        int error_size) {
  try {
    if (tokens <= 0) return 0;
    switch (dtype * 4 + router) {
      ROUTE(0, f32_plain)
      ROUTE(1, f32_biased)
      ROUTE(2, f32_softmax)
      ROUTE(3, f32_grouped)
      ROUTE(4, f16_plain)
      ROUTE(5, f16_biased)
      ROUTE(6, f16_softmax)
      ROUTE(7, f16_grouped)
      ROUTE(8, bf16_plain)
      ROUTE(9, bf16_biased)
      ROUTE(10, bf16_softmax)
      ROUTE(11, bf16_grouped)
    }
    throw std::runtime_error("unknown dtype or router");
  } catch (const std::exception& e) {
    std::snprintf(error, (size_t)error_size, "%s", e.what());
    return 1;
  }
}
