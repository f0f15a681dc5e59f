// MoE top-k sigmoid routing for NVIDIA sm_80+ (built for the H200, sm_90) with packed selection keys: a group
// of G = EXPERTS / 8 lanes per token (8, 16 or 32 lanes: four, two or one token per warp).
//
// Each lane loads 8 experts (one 16-byte load for fp16/bf16, two for fp32) and makes one unsigned key per
// expert whose order is the selection order: the score in the high bits, 255 - expert in the low 8 (equal
// scores: the lower expert first). A lane keeps its best two keys. Each of the K rounds takes the group's
// largest best key (one REDUX for a whole warp, xor shuffles for smaller groups); the lane holding it moves
// its second key up, and lane r of the group keeps round r's key. A lane whose two kept keys are both taken
// refills from the keys below the last one taken (rare: three of the top k among one lane's 8 experts).
// Lane r then writes expert r and its weight, the sigmoid of the logit (divided by the k weights' sum with a
// bias). The key carries the expert, so no lane needs another lane's scores.
//
// The keys:
// - fp16/bf16 logits, no bias: 32 bits, exact. The float order key of the logit keeps its sign, exponent and
//   15 mantissa bits in the high 24, every bit a 16-bit float has.
// - a bias spanning less than 1.5 (DeepSeek-V3's is about 0.1): 32 bits. The score sigmoid(x) + bias is moved
//   into [1, 4) by adding 1 - min(bias); the float bits of that, less 1.0's, fit 24 bits and order like the
//   scores, to about 2.4e-7 (the problem lets scores within 1e-6 come in either order).
// - fp32 logits without a bias, or a wider bias: 64 bits, exact: the score's order key, then the index.
//
// Analysis build: nvcc -arch=sm_90 -O3 -cubin -DMOE_EXPERTS=256 -DMOE_K=8 -DMOE_BIAS=0 -DMOE_DTYPE=__nv_bfloat16 topk_sigmoid_keys.cu
// The PyTorch binding (topk_sigmoid_cuda.py) includes this file and instantiates every supported shape.
#include "topk_sigmoid_common.cuh"

namespace moe {

constexpr unsigned FULL = 0xffffffffu;

// The largest key among the G lanes of this lane's group (groups are aligned runs of G lanes).
template <int G>
__device__ inline unsigned group_max(unsigned v) {
  if constexpr (G == 32) {
    return __reduce_max_sync(FULL, v);
  } else {
#pragma unroll
    for (int off = G / 2; off > 0; off >>= 1) v = max(v, __shfl_xor_sync(FULL, v, off));
    return v;
  }
}

template <int G>
__device__ inline unsigned long long group_max(unsigned long long v) {
  if constexpr (G == 32) {   // high words first, then the low words of the lanes that hold the highest
    const unsigned hi = __reduce_max_sync(FULL, (unsigned)(v >> 32));
    const unsigned lo = __reduce_max_sync(FULL, (unsigned)(v >> 32) == hi ? (unsigned)v : 0u);
    return ((unsigned long long)hi << 32) | lo;
  } else {
#pragma unroll
    for (int off = G / 2; off > 0; off >>= 1) {
      const unsigned long long o = __shfl_xor_sync(FULL, v, off);
      v = o > v ? o : v;
    }
    return v;
  }
}

template <int G>
__device__ inline float group_sum(float v) {
#pragma unroll
  for (int off = G / 2; off > 0; off >>= 1) v += __shfl_xor_sync(FULL, v, off);
  return v;
}

// The best two of this lane's keys that are below `below` (0: none).
template <typename Key, int P>
__device__ inline void best_two(const Key (&keys)[P], Key below, Key& best, Key& second) {
  best = 0;
  second = 0;
#pragma unroll
  for (int j = 0; j < P; ++j) {
    const Key k = keys[j] < below ? keys[j] : Key(0);
    const Key lo = k < best ? k : best;
    best = k < best ? best : k;
    second = lo < second ? second : lo;
  }
}

// K rounds over the group: returns round `sub`'s key on lane `sub` (sub < K), 0 elsewhere.
template <typename Key, int G, int K, int P>
__device__ inline Key select_rounds(const Key (&keys)[P], int sub) {
  Key best, second;
  best_two<Key, P>(keys, ~Key(0), best, second);
  Key last = ~Key(0), mine = 0;
  bool dry = best == 0;
#pragma unroll
  for (int r = 0; r < K; ++r) {
    const Key top = group_max<G>(best);
    if (best == top && best != 0) {   // this lane holds the round's key (keys are unique in a group)
      last = best;
      best = second;
      second = 0;
    }
    if (sub == r) mine = top;
    if (r + 1 < K && __any_sync(FULL, best == 0 && !dry)) {
      if (best == 0 && !dry) {
        best_two<Key, P>(keys, last, best, second);
        dry = best == 0;
      }
    }
  }
  return mine;
}

__device__ inline float sigmoid(float x) { return 1.0f / (1.0f + __expf(-x)); }

__device__ inline float from_order_key(unsigned k) {
  return __uint_as_float((k >> 31) ? (k ^ 0x80000000u) : ~k);
}

template <typename T, int EXPERTS, int K, bool HAS_BIAS>
__global__ __launch_bounds__(128) void topk_sigmoid_keys(const T* __restrict__ logits, const float* __restrict__ bias,
                                                         float* __restrict__ weights, int* __restrict__ ids,
                                                         int tokens) {
  constexpr int P = 8;
  constexpr int G = EXPERTS / P;
  constexpr int PER_WARP = 32 / G;
  static_assert(EXPERTS == 64 || EXPERTS == 128 || EXPERTS == 256, "EXPERTS must be 64, 128 or 256");
  static_assert(K >= 1 && K <= G, "K must be 1..EXPERTS/8");
  const int lane = threadIdx.x % 32;
  const int sub = lane % G;
  const int first = (blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32) * PER_WARP;
  if (first >= tokens) return;   // whole warps leave together
  const int token = first + lane / G;
  const bool live = token < tokens;
  const int e0 = sub * P;

  float x[P];
  if (live) {
    load_row<T, P>(logits + (size_t)token * EXPERTS + e0, x);
  } else {
#pragma unroll
    for (int j = 0; j < P; ++j) x[j] = 0.0f;
  }

  unsigned long long key = 0;   // round `sub`'s key on lanes sub < K
  bool wide = true;
  float shift[P];               // 1 - min(bias) + bias[e]
  if constexpr (HAS_BIAS) {
    float b[P];
    load_row<float, P>(bias + e0, b);
    float lo = b[0], hi = b[0];
#pragma unroll
    for (int j = 1; j < P; ++j) { lo = fminf(lo, b[j]); hi = fmaxf(hi, b[j]); }
    lo = from_order_key(__reduce_min_sync(FULL, order_key(lo)));
    hi = from_order_key(__reduce_max_sync(FULL, order_key(hi)));
    wide = !(hi - lo < 1.5f);
#pragma unroll
    for (int j = 0; j < P; ++j) shift[j] = (1.0f - lo) + b[j];
  } else {
    wide = sizeof(T) == 4;
  }

  if (!wide) {   // 32-bit keys
    unsigned keys[P];
#pragma unroll
    for (int j = 0; j < P; ++j) {
      const unsigned low = live ? 255u - (unsigned)(e0 + j) : 0u;
      unsigned high;
      if constexpr (HAS_BIAS) {
        const float s = __fdividef(1.0f, 1.0f + __expf(-x[j])) + shift[j];   // in [1, 4)
        high = (max(__float_as_uint(s), 0x3f800000u) - 0x3f800000u) << 8;   // s rounded below 1: 1
      } else {
        high = order_key(x[j]) & 0xffffff00u;
      }
      keys[j] = live ? (high | low) : 0u;
    }
    key = select_rounds<unsigned, G, K, P>(keys, sub);
  } else {       // 64-bit keys
    unsigned long long keys[P];
#pragma unroll
    for (int j = 0; j < P; ++j) {
      const float s = HAS_BIAS ? sigmoid(x[j]) + shift[j] : x[j];
      keys[j] = live ? ((unsigned long long)order_key(s) << 32) | (255u - (unsigned)(e0 + j)) : 0ull;
    }
    key = select_rounds<unsigned long long, G, K, P>(keys, sub);
  }

  const bool writes = live && sub < K;
  const int expert = 255 - (int)(key & 0xffu);
  float w = 0.0f;
  if (writes) w = sigmoid(to_float<T>(logits[(size_t)token * EXPERTS + expert]));
  if constexpr (HAS_BIAS) w = w / group_sum<G>(w);
  if (writes) {
    weights[(size_t)token * K + sub] = w;
    ids[(size_t)token * K + sub] = expert;
  }
}

}  // namespace moe

#ifdef MOE_EXPERTS   // one instantiation for `kpilot isa analyze` (-DMOE_EXPERTS=... -DMOE_K=... -DMOE_BIAS=... -DMOE_DTYPE=...)
#ifndef MOE_K
#define MOE_K 8
#endif
#ifndef MOE_BIAS
#define MOE_BIAS 0
#endif
#ifndef MOE_DTYPE
#define MOE_DTYPE __nv_bfloat16
#endif
template __global__ void moe::topk_sigmoid_keys<MOE_DTYPE, MOE_EXPERTS, MOE_K, (bool)MOE_BIAS>(const MOE_DTYPE*,
                                                                                              const float*, float*,
                                                                                              int*, int);
#endif
