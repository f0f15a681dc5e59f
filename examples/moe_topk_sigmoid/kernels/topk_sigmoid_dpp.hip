// MoE top-k sigmoid routing for gfx942 (MI300X) and other GFX9 GPUs: one wave64 per token, selection with
// DPP cross-lane steps instead of LDS shuffles (ds_bpermute).
//
// Lane l holds experts [l*P, l*P + P), P = EXPERTS / 64. Each of the K rounds:
//   1. every lane scans its own experts still in play with a strict '>', keeping the lowest index of its
//      maximum score (score: the logit, or sigmoid(logit) + bias[e] with HAS_BIAS);
//   2. the wave's maximum of the lanes' int32 order keys comes from six DPP max steps (quad_perm x2,
//      row_shr:4, row_shr:8, row_bcast:15, row_bcast:31: examples/kernels/wave_argmax_dpp.hip explains
//      them) and one readlane of lane 63;
//   3. a ballot names the lowest lane holding it (lanes own increasing indices, so this is the lowest
//      expert index among equal scores): that lane records the round for its expert.
// After the K rounds each lane writes the experts it won, at their rounds' positions: ids (int32) and
// weights (fp32; with HAS_BIAS divided by their sum, one more DPP reduction). One readlane per round and
// one for the sum: no LDS, no ds_bpermute.
//
// Build (analysis): clang++-19 -x hip --offload-arch=gfx942 --cuda-device-only -nogpulib -O3 -S
//                   -DEXPERTS=256 -DK=8 -DHAS_BIAS=1 topk_sigmoid_dpp.hip
// Launch: blockDim.x = 256 (4 waves, 4 tokens per block); gridDim.x = ceil(tokens / 4).
#include <hip/hip_runtime.h>

#ifndef EXPERTS
#define EXPERTS 256
#endif
#ifndef K
#define K 8
#endif
#ifndef HAS_BIAS
#define HAS_BIAS 0
#endif
static_assert(EXPERTS % 64 == 0 && EXPERTS >= 64 && EXPERTS <= 256, "EXPERTS must be 64, 128, 192 or 256");
static_assert(K >= 1 && K <= 64, "K must be 1..64");
constexpr int WAVE = 64;
constexpr int P = EXPERTS / WAVE;

constexpr int DPP_QUAD_1032 = 0xB1;      // quad_perm:[1,0,3,2]
constexpr int DPP_QUAD_2301 = 0x4E;      // quad_perm:[2,3,0,1]
constexpr int DPP_ROW_SHR4 = 0x114;      // row_shr:4
constexpr int DPP_ROW_SHR8 = 0x118;      // row_shr:8
constexpr int DPP_ROW_BCAST15 = 0x142;   // row_bcast:15
constexpr int DPP_ROW_BCAST31 = 0x143;   // row_bcast:31
constexpr int KEY_IDENTITY = (int)0x80000000;

__device__ inline int order_key(float f) {
  const int b = __float_as_int(f + 0.0f);   // -0.0 + 0.0 == +0.0
  return b ^ ((b >> 31) & 0x7fffffff);
}

template <int CTRL, int ROW_MASK>
__device__ inline int max_dpp(int v) {
  const int o = __builtin_amdgcn_update_dpp(KEY_IDENTITY, v, CTRL, ROW_MASK, 0xf, false);
  return o > v ? o : v;
}

__device__ inline int wave_max(int key) {
  key = max_dpp<DPP_QUAD_1032, 0xf>(key);
  key = max_dpp<DPP_QUAD_2301, 0xf>(key);
  key = max_dpp<DPP_ROW_SHR4, 0xf>(key);
  key = max_dpp<DPP_ROW_SHR8, 0xf>(key);
  key = max_dpp<DPP_ROW_BCAST15, 0xa>(key);
  key = max_dpp<DPP_ROW_BCAST31, 0xc>(key);
  return __builtin_amdgcn_readlane(key, 63);
}

template <int CTRL, int ROW_MASK>
__device__ inline float add_dpp(float v) {
  return v + __int_as_float(__builtin_amdgcn_update_dpp(0, __float_as_int(v), CTRL, ROW_MASK, 0xf, false));
}

// The sum over the wave (lanes with no DPP source add 0.0: update_dpp's `old`).
__device__ inline float wave_sum(float v) {
  v = add_dpp<DPP_QUAD_1032, 0xf>(v);
  v = add_dpp<DPP_QUAD_2301, 0xf>(v);
  v = add_dpp<DPP_ROW_SHR4, 0xf>(v);
  v = add_dpp<DPP_ROW_SHR8, 0xf>(v);
  v = add_dpp<DPP_ROW_BCAST15, 0xa>(v);
  v = add_dpp<DPP_ROW_BCAST31, 0xc>(v);
  return __int_as_float(__builtin_amdgcn_readlane(__float_as_int(v), 63));
}

extern "C" __global__ __launch_bounds__(256) void topk_sigmoid_dpp(
    const float* __restrict__ logits, const float* __restrict__ bias, float* __restrict__ weights,
    int* __restrict__ ids, int tokens) {
  const int tid = __builtin_amdgcn_workitem_id_x();
  const int lane = tid % WAVE;
  const int token = __builtin_amdgcn_workgroup_id_x() * (256 / WAVE) + tid / WAVE;
  if (token >= tokens) return;   // whole waves leave together (token is uniform in a wave)

  const float* x = logits + (size_t)token * EXPERTS + lane * P;
  float sig[P], score[P];
#pragma unroll
  for (int j = 0; j < P; ++j) {
    const float v = x[j];
    sig[j] = 1.0f / (1.0f + __expf(-v));
#if HAS_BIAS
    score[j] = sig[j] + bias[lane * P + j];
#else
    score[j] = v;
#endif
  }
  int round_of[P];               // the round in which this lane's expert j was selected, or -1
#pragma unroll
  for (int j = 0; j < P; ++j) round_of[j] = -1;
#pragma unroll
  for (int r = 0; r < K; ++r) {
    float best = -__builtin_inff();
    int best_j = 0;
#pragma unroll
    for (int j = 0; j < P; ++j) {
      if (round_of[j] < 0 && score[j] > best) { best = score[j]; best_j = j; }
    }
    const int mine = order_key(best);
    const int top = wave_max(mine);
    const unsigned long long hits = __ballot(mine == top);
    if (lane == __builtin_ctzll(hits)) {
#pragma unroll
      for (int j = 0; j < P; ++j) round_of[j] = (j == best_j) ? r : round_of[j];
    }
  }
  float inv = 1.0f;
#if HAS_BIAS
  float mine_sum = 0.0f;
#pragma unroll
  for (int j = 0; j < P; ++j) mine_sum += round_of[j] >= 0 ? sig[j] : 0.0f;
  inv = 1.0f / wave_sum(mine_sum);
#endif
#pragma unroll
  for (int j = 0; j < P; ++j) {
    if (round_of[j] >= 0) {
      weights[(size_t)token * K + round_of[j]] = sig[j] * inv;
      ids[(size_t)token * K + round_of[j]] = lane * P + j;
    }
  }
}
