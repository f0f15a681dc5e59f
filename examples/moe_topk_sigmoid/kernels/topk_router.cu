// MoE routing for NVIDIA sm_80+, every router of the case study in one kernel: plain and biased sigmoid,
// softmax gating and DeepSeek-V3's grouped selection, for any expert count up to 512 and any k up to 16.
//
// W lanes per token (8, 16 or 32: the fewest that hold the experts in at most P of them each), the token's experts
// strided over them: lane l holds experts l, l + W, l + 2W, ... (P slots), so each slot's loads are consecutive
// across the lanes whatever the expert count and the rows' alignment. A round takes the largest key of the lanes'
// best untaken slots (REDUX over a whole warp, a butterfly of shuffles over 8 or 16 lanes), then the lowest expert
// index among the lanes holding it (the lowest index among equal scores); the owner lane marks its slot taken and
// passes the slot's weight value, and lane r of the token keeps round r's id and weight, so the K results are
// written by K lanes at once.
//
// Score and weight:
//   PLAIN    score logit, weight sigmoid(logit)
//   BIASED   score sigmoid(logit) + bias[e], weight sigmoid(logit), renormalised over the k
//   SOFTMAX  score logit, weight exp(logit - max) / sum over all experts, or renormalised over the k
//   GROUPED  as BIASED, within the topk_group groups (of n_group, consecutive experts) whose two largest scores
//            sum the most (lowest group among equals); lane g holds group g's score while the groups are chosen
// Keys: order_key of the score (unsigned, ordered like the floats); 0 marks a slot taken, past the experts, or in
// a group not kept, below every real key.
// Analysis build: nvcc -arch=sm_90 -O3 -cubin -DMOE_ROUTER=3 -DMOE_W=32 -DMOE_P=8 [-DMOE_DTYPE=__nv_bfloat16] topk_router.cu
#if defined(MOE_ROUTER) && !defined(MOE_DTYPE)
#define MOE_DTYPE float
#endif
#include "topk_sigmoid_common.cuh"

namespace moe {

enum Router { PLAIN = 0, BIASED = 1, SOFTMAX = 2, GROUPED = 3 };

__device__ inline float neg_inf() { return -__int_as_float(0x7f800000); }

__device__ inline float from_order_key(unsigned k) {
  return __uint_as_float(k ^ ((k >> 31) ? 0x80000000u : 0xffffffffu));
}

// Reductions over a token's W lanes (a whole warp: REDUX; 8 or 16 lanes: shuffles within the segment).
template <int W, bool MAX>
__device__ inline unsigned lanes_extreme(unsigned v) {
  if constexpr (W == 32) {
    return MAX ? __reduce_max_sync(0xffffffffu, v) : __reduce_min_sync(0xffffffffu, v);
  } else {
#pragma unroll
    for (int off = W / 2; off > 0; off >>= 1) {
      const unsigned other = __shfl_xor_sync(0xffffffffu, v, off, W);
      v = MAX ? max(v, other) : min(v, other);
    }
    return v;
  }
}

template <int W>
__device__ inline unsigned lanes_max(unsigned v) { return lanes_extreme<W, true>(v); }

template <int W>
__device__ inline unsigned lanes_min(unsigned v) { return lanes_extreme<W, false>(v); }

template <int W>
__device__ inline float lanes_sum(float v) {
#pragma unroll
  for (int off = W / 2; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off, W);
  return v;
}

template <typename T, int W, int P, int ROUTER>
__global__ __launch_bounds__(256) void topk_router(const T* __restrict__ logits, const float* __restrict__ bias,
                                                   float* __restrict__ weights, int* __restrict__ ids, int tokens,
                                                   int experts, int k, int renormalize, int n_group,
                                                   int topk_group) {
  static_assert(W == 8 || W == 16 || W == 32, "8, 16 or 32 lanes per token");
  static_assert(P >= 1 && P <= 16, "1 to 16 experts per lane");
  const int thread = blockIdx.x * blockDim.x + threadIdx.x;
  if ((thread & ~31) / W >= tokens) return;   // whole warps leave together: the shuffles below take all 32 lanes
  const int lane = thread % W;
  const int token = thread / W;
  const bool active = token < tokens;         // a warp's last tokens may lie past the end: they compute, not store
  const T* row = logits + (size_t)(active ? token : 0) * experts;

  float x[P], val[P];
  unsigned key[P];
#pragma unroll
  for (int j = 0; j < P; ++j) {
    const int e = j * W + lane;
    const bool valid = active && e < experts;
    x[j] = valid ? to_float<T>(row[e]) : neg_inf();
    if constexpr (ROUTER == SOFTMAX || ROUTER == PLAIN) {
      key[j] = valid ? order_key(x[j]) : 0u;
    } else {
      val[j] = 1.0f / (1.0f + __expf(-x[j]));
      key[j] = valid ? order_key(val[j] + bias[e]) : 0u;
    }
    if constexpr (ROUTER == PLAIN) val[j] = 1.0f / (1.0f + __expf(-x[j]));
  }
  float total = 1.0f;
  if constexpr (ROUTER == SOFTMAX) {
    unsigned m = 0;
#pragma unroll
    for (int j = 0; j < P; ++j) m = max(m, key[j]);
    const unsigned top = lanes_max<W>(m);     // every lane takes part: the shuffles span the whole warp
    const float row_max = active ? from_order_key(top) : 0.0f;
    float s = 0.0f;
#pragma unroll
    for (int j = 0; j < P; ++j) {
      val[j] = __expf(x[j] - row_max);        // 0 past the experts (x = -inf)
      s += val[j];
    }
    total = lanes_sum<W>(s);
  }
  if constexpr (ROUTER == GROUPED) {
    const int per = experts / n_group;
    int group[P];
#pragma unroll
    for (int j = 0; j < P; ++j) group[j] = (j * W + lane < experts) ? (j * W + lane) / per : 0;
    float my_group_score = neg_inf();
    for (int g = 0; g < n_group; ++g) {
      unsigned k1 = 0, k2 = 0;                // this lane's two largest keys in group g
#pragma unroll
      for (int j = 0; j < P; ++j) {
        const unsigned kj = group[j] == g ? key[j] : 0u;
        if (kj > k1) { k2 = k1; k1 = kj; } else if (kj > k2) { k2 = kj; }
      }
      const unsigned t1 = lanes_max<W>(k1);
      float score = from_order_key(t1);
      if (per > 1) {                          // the second: the one lane of the first gives its own second
        const unsigned first_lane = lanes_min<W>(k1 == t1 ? (unsigned)lane : 0xffffffffu);
        score += from_order_key(lanes_max<W>((unsigned)lane == first_lane ? k2 : k1));
      }
      if (lane == g) my_group_score = score;
    }
    unsigned kept = 0;
    bool chosen = false;
    for (int t = 0; t < topk_group; ++t) {
      const unsigned gk = (chosen || lane >= n_group) ? 0u : order_key(my_group_score);
      const unsigned top = lanes_max<W>(gk);
      const unsigned g = lanes_min<W>(gk == top ? (unsigned)lane : 0xffffffffu);
      chosen |= (unsigned)lane == g;
      kept |= 1u << g;
    }
#pragma unroll
    for (int j = 0; j < P; ++j) key[j] = ((kept >> group[j]) & 1u) ? key[j] : 0u;
  }

  int my_id = 0;
  float my_w = 0.0f;
  for (int r = 0; r < k; ++r) {
    unsigned best = 0;
    int best_j = 0;
#pragma unroll
    for (int j = 0; j < P; ++j) {
      if (key[j] > best) { best = key[j]; best_j = j; }   // strict: the lowest slot (index) among equals
    }
    const unsigned top = lanes_max<W>(best);
    const unsigned idx = lanes_min<W>(best == top ? (unsigned)(best_j * W + lane) : 0xffffffffu);
    const int owner = (int)(idx % W), slot = (int)(idx / W);
    float w = 0.0f;
    if (lane == owner) {
#pragma unroll
      for (int j = 0; j < P; ++j) {
        if (j == slot) { key[j] = 0u; w = val[j]; }
      }
    }
    w = __shfl_sync(0xffffffffu, w, owner, W);
    if (lane == r) { my_id = (int)idx; my_w = w; }
  }
  float denom = 1.0f;
  if constexpr (ROUTER == BIASED || ROUTER == GROUPED) denom = lanes_sum<W>(lane < k ? my_w : 0.0f);
  if constexpr (ROUTER == SOFTMAX) denom = renormalize ? lanes_sum<W>(lane < k ? my_w : 0.0f) : total;
  if (active && lane < k) {
    weights[(size_t)token * k + lane] = my_w / denom;
    ids[(size_t)token * k + lane] = my_id;
  }
}

// The lanes per token and slots per lane for an expert count: 8 lanes up to 8 experts, 16 up to 16, else a warp
// with P the next of 1, 2, 4, 6, 8, 12, 16 that holds them.
struct RouterShape {
  int w, p;
};

__host__ inline RouterShape router_shape(int experts) {
  if (experts <= 8) return {8, 1};
  if (experts <= 16) return {16, 1};
  constexpr int kPs[] = {1, 2, 4, 6, 8, 12, 16};
  for (int p : kPs) {
    if (experts <= 32 * p) return {32, p};
  }
  return {0, 0};
}

}  // namespace moe

#ifdef MOE_ROUTER   // one instantiation for `kpilot isa analyze` (-D MOE_ROUTER, MOE_W, MOE_P, MOE_DTYPE)
template __global__ void moe::topk_router<MOE_DTYPE, MOE_W, MOE_P, MOE_ROUTER>(const MOE_DTYPE*, const float*, float*,
                                                                              int*, int, int, int, int, int, int);
#endif
