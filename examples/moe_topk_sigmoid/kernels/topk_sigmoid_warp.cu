// MoE top-k sigmoid routing for NVIDIA sm_80+ (written for the H100/H200, sm_90): one warp per token.
//
// Lane l holds experts [l*P, l*P + P), P = EXPERTS / 32, loaded with 16-byte vector loads. Each of the K
// rounds: every lane scans its experts still in play with a strict '>' (the lowest index of its maximum),
// the warp's maximum of the lanes' order keys is one __reduce_max_sync (REDUX), and a ballot names the
// lowest lane holding it (lanes own increasing indices: the lowest expert index among equal scores). That
// lane records the round for its expert. At the end each lane writes the experts it won at their rounds'
// positions: ids (int32) and weights (fp32, sigmoid; divided by their sum with HAS_BIAS).
//
// Score: the logit (no bias), or sigmoid(logit) + bias[e] (DeepSeek-V3 routing).
// Analysis build: nvcc -arch=sm_90 -O3 -cubin -DMOE_EXPERTS=256 -DMOE_K=8 -DMOE_BIAS=0 [-DMOE_DTYPE=__nv_bfloat16] topk_sigmoid_warp.cu
// The PyTorch binding (topk_sigmoid_cuda.py) includes this file and instantiates every supported shape.
#include "topk_sigmoid_common.cuh"

namespace moe {

template <typename T, int EXPERTS, int K, bool HAS_BIAS>
__global__ __launch_bounds__(256) void topk_sigmoid_warp(const T* __restrict__ logits, const float* __restrict__ bias,
                                                          float* __restrict__ weights, int* __restrict__ ids,
                                                          int tokens) {
  static_assert(EXPERTS % 32 == 0 && EXPERTS >= 32 && EXPERTS <= 512, "EXPERTS must be a multiple of 32");
  static_assert(K >= 1 && K <= 32, "K must be 1..32");
  constexpr int P = EXPERTS / 32;
  const int lane = threadIdx.x % 32;
  const int token = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  if (token >= tokens) return;   // whole warps leave together

  float x[P], sig[P], score[P], b[P];
  load_row<T, P>(logits + (size_t)token * EXPERTS + lane * P, x);
  if (HAS_BIAS) load_row<float, P>(bias + lane * P, b);
#pragma unroll
  for (int j = 0; j < P; ++j) {
    sig[j] = 1.0f / (1.0f + __expf(-x[j]));
    score[j] = HAS_BIAS ? sig[j] + b[j] : x[j];
  }
  int round_of[P];
#pragma unroll
  for (int j = 0; j < P; ++j) round_of[j] = -1;
#pragma unroll
  for (int r = 0; r < K; ++r) {
    float best = -__int_as_float(0x7f800000);
    int best_j = 0;
#pragma unroll
    for (int j = 0; j < P; ++j) {
      if (round_of[j] < 0 && score[j] > best) { best = score[j]; best_j = j; }
    }
    const unsigned mine = order_key(best);
    const unsigned top = __reduce_max_sync(0xffffffffu, mine);
    const unsigned hits = __ballot_sync(0xffffffffu, mine == top);
    if (lane == __ffs(hits) - 1) {
#pragma unroll
      for (int j = 0; j < P; ++j) round_of[j] = (j == best_j) ? r : round_of[j];
    }
  }
  float inv = 1.0f;
  if (HAS_BIAS) {
    float s = 0.0f;
#pragma unroll
    for (int j = 0; j < P; ++j) s += round_of[j] >= 0 ? sig[j] : 0.0f;
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) s += __shfl_xor_sync(0xffffffffu, s, off);
    inv = 1.0f / s;
  }
#pragma unroll
  for (int j = 0; j < P; ++j) {
    if (round_of[j] >= 0) {
      weights[(size_t)token * K + round_of[j]] = sig[j] * inv;
      ids[(size_t)token * K + round_of[j]] = lane * P + j;
    }
  }
}

}  // namespace moe

#ifdef MOE_EXPERTS   // one instantiation for `kpilot isa analyze` (-D MOE_EXPERTS, MOE_K, MOE_BIAS, MOE_DTYPE)
template __global__ void moe::topk_sigmoid_warp<MOE_DTYPE, MOE_EXPERTS, MOE_K, (bool)MOE_BIAS>(const MOE_DTYPE*, const float*,
                                                                                    float*, int*, int);
#endif
