// MoE routing for NVIDIA sm_80+, every router of the case study in one kernel: plain and biased sigmoid,
// softmax gating and DeepSeek-V3's grouped selection, for any expert count up to 512 and any k up to 16.
//
// W lanes per token (4, 8 or 16: 4 up to 64 experts, 8 below 256, 16 from 256, so that a lane holds at most 32
// of them, 16 at 256; a warp routes 8, 4 or 2 tokens and keeps that many rows' loads in flight), each lane
// holding P consecutive experts (lane l: experts l * P .. l * P + P - 1), loaded as 16-byte vectors where the
// rows allow it. Only the keys stay in registers: a
// round takes each lane's best untaken key (the lowest expert among equals), the largest over the token's lanes
// and the lowest expert holding it (xor shuffles within the W lanes), and the owner marks it taken; lane r % W
// keeps round r's expert. Where the scores allow (see "Packed keys" below), each key also carries its expert, and
// a round is one pass over a lane's keys and one max over the lanes. The weights are made after the rounds from
// the chosen experts' logits (read again, from L1), so no per-expert weight is kept.
//
// Score and weight:
//   PLAIN    score logit, weight sigmoid(logit)
//   BIASED   score sigmoid(logit) + bias[e], weight sigmoid(logit), renormalised over the k
//   SOFTMAX  score logit, weight exp(logit - max) / sum over all experts, or renormalised over the k
//   GROUPED  as BIASED, within the topk_group groups (of n_group, consecutive experts) whose two largest scores
//            sum the most (lowest group among equals). Where each group is whole lanes (W * P = experts and P
//            divides a group), a lane's top two are merged over its group's lanes; otherwise each group's top
//            two are reduced over all W lanes in turn (n_group up to W).
// Keys: order_key of the score (unsigned, ordered like the floats); 0 marks a slot taken, past the experts, or in
// a group not kept, below every real key.
// Analysis build: nvcc -arch=sm_90 -O3 -cubin -DMOE_ROUTER=3 -DMOE_W=8 -DMOE_P=32 [-DMOE_DTYPE=__nv_bfloat16] topk_router.cu
#if defined(MOE_ROUTER) && !defined(MOE_DTYPE)
#define MOE_DTYPE float
#endif
#include <type_traits>

#include "topk_sigmoid_common.cuh"

namespace moe {

enum Router { PLAIN = 0, BIASED = 1, SOFTMAX = 2, GROUPED = 3 };

__device__ inline float neg_inf() { return -__int_as_float(0x7f800000); }

__device__ inline float from_order_key(unsigned k) {
  return __uint_as_float(k ^ ((k >> 31) ? 0x80000000u : 0xffffffffu));
}

// Reductions over a token's W lanes (xor shuffles within the segment of W lanes).
template <int W, bool MAX>
__device__ inline unsigned lanes_extreme(unsigned v) {
#pragma unroll
  for (int off = W / 2; off > 0; off >>= 1) {
    const unsigned other = __shfl_xor_sync(0xffffffffu, v, off, W);
    v = MAX ? max(v, other) : min(v, other);
  }
  return v;
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

// The two largest keys (k1 >= k2) of the lanes l ^ off for off < L, each lane giving its own two.
template <int W>
__device__ inline void lanes_top2(unsigned& k1, unsigned& k2, int L) {
#pragma unroll
  for (int off = W / 2; off > 0; off >>= 1) {
    if (off < L) {   // uniform: L is the same in every lane
      const unsigned o1 = __shfl_xor_sync(0xffffffffu, k1, off, W);
      const unsigned o2 = __shfl_xor_sync(0xffffffffu, k2, off, W);
      k2 = max(min(k1, o1), max(k2, o2));
      k1 = max(k1, o1);
    }
  }
}

__device__ inline void take_top2(unsigned kj, unsigned& k1, unsigned& k2) {
  if (kj > k1) { k2 = k1; k1 = kj; } else if (kj > k2) { k2 = kj; }
}

template <typename T, int W, int P, int ROUTER>
__global__ __launch_bounds__(256) void topk_router(const T* __restrict__ logits, const float* __restrict__ bias,
                                                   float* __restrict__ weights, int* __restrict__ ids, int tokens,
                                                   int experts, int k, int renormalize, int n_group,
                                                   int topk_group, int vector_rows) {
  static_assert(W == 4 || W == 8 || W == 16, "4, 8 or 16 lanes per token");
  static_assert(P >= 1 && P <= 32, "1 to 32 experts per lane");
  constexpr int R = (16 + W - 1) / W;         // rounds a lane keeps: round r goes to lane r % W (k <= 16)
  const int thread = blockIdx.x * blockDim.x + threadIdx.x;
  if ((thread & ~31) / W >= tokens) return;   // whole warps leave together: the shuffles below take all 32 lanes
  const int lane = thread % W;
  const int token = thread / W;
  const bool active = token < tokens;         // a warp's last tokens may lie past the end: they compute, not store
  const T* row = logits + (size_t)(active ? token : 0) * experts;
  const int first = lane * P;                 // this lane's experts: first .. first + P - 1

  float x[P];
  if (vector_rows) {                          // uniform: W * P = experts, rows 16-byte aligned
    load_row<T, P>(row + first, x);
  } else {
#pragma unroll
    for (int j = 0; j < P; ++j) x[j] = first + j < experts ? to_float<T>(row[first + j]) : 0.0f;
  }
  unsigned key[P];
#pragma unroll
  for (int j = 0; j < P; ++j) {
    const int e = first + j;
    const bool valid = active && e < experts;
    if constexpr (ROUTER == PLAIN || ROUTER == SOFTMAX) {
      key[j] = valid ? order_key(x[j]) : 0u;
    } else {
      key[j] = valid ? order_key(sigmoid(x[j]) + bias[e]) : 0u;
    }
  }
  float row_max = 0.0f, total = 1.0f;
  if constexpr (ROUTER == SOFTMAX) {
    unsigned m = 0;
#pragma unroll
    for (int j = 0; j < P; ++j) m = max(m, key[j]);
    row_max = from_order_key(lanes_max<W>(m));
    float s = 0.0f;
#pragma unroll
    for (int j = 0; j < P; ++j) s += key[j] ? __expf(x[j] - row_max) : 0.0f;
    total = lanes_sum<W>(s);
  }
  if constexpr (ROUTER == GROUPED) {
    const int per = experts / n_group;
    if (W * P == experts && per % P == 0) {   // each group is L whole lanes
      const int L = per / P;
      unsigned k1 = 0, k2 = 0;
#pragma unroll
      for (int j = 0; j < P; ++j) take_top2(key[j], k1, k2);
      lanes_top2<W>(k1, k2, L);
      const float score = from_order_key(k1) + (per > 1 ? from_order_key(k2) : 0.0f);
      const unsigned g = (unsigned)(lane / L);
      bool chosen = false;
      for (int t = 0; t < topk_group; ++t) {
        const unsigned gk = chosen ? 0u : order_key(score);
        const unsigned top = lanes_max<W>(gk);
        chosen |= g == lanes_min<W>(gk == top ? g : 0xffffffffu);
      }
#pragma unroll
      for (int j = 0; j < P; ++j) key[j] = chosen ? key[j] : 0u;   // this lane's group was kept, or not
    } else {                                  // any layout: each group's top two over all the lanes, in turn
      const float inv_per = 1.0f / (float)per;
      float my_group_score = neg_inf();
      for (int g = 0; g < n_group; ++g) {
        unsigned k1 = 0, k2 = 0;
#pragma unroll
        for (int j = 0; j < P; ++j) {
          const int e = first + j;
          take_top2(e >= g * per && e < (g + 1) * per ? key[j] : 0u, k1, k2);
        }
        lanes_top2<W>(k1, k2, W);
        if (lane == g) my_group_score = from_order_key(k1) + (per > 1 ? from_order_key(k2) : 0.0f);
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
      for (int j = 0; j < P; ++j) {
        const int group = __float2int_rz(((float)(first + j) + 0.5f) * inv_per);   // (first + j) / per, exactly
        key[j] = (kept >> min(group, 31)) & 1u ? key[j] : 0u;
      }
    }
  }

  int mine[R];
#pragma unroll
  for (int q = 0; q < R; ++q) mine[q] = 0;
  // Packed keys, where they order the scores exactly (16-bit logits, no bias) or within the problems' tolerance
  // (a bias spanning at most 1: the score quantized to 23 bits, at most 2.4e-7 apart, where the checks let
  // scores within 1e-6 come in either order): the score's bits, then 511 - expert, so one max over the lanes
  // names the expert too, the lowest among equals. A round takes the largest key below the last round's (the
  // distance below it, wrapping around for keys already taken, is least for that key): nothing to clear.
  bool packed = false;
  float lo = 0.0f, scale = 0.0f;
  if constexpr (ROUTER == PLAIN || ROUTER == SOFTMAX) {
    packed = sizeof(T) == 2;
  } else {
    // The bias's extremes, read again after the keys (kept out of the keys' loop, where they slowed wide rows).
    unsigned bmin = 0xffffffffu, bmax = 0u;
#pragma unroll
    for (int j = 0; j < P; ++j) {
      if (first + j < experts) {
        const unsigned b = order_key(bias[first + j]);
        bmin = min(bmin, b);
        bmax = max(bmax, b);
      }
    }
    lo = from_order_key(lanes_min<W>(bmin));                   // the scores lie in [lo, hi)
    const float hi = from_order_key(lanes_max<W>(bmax)) + 1.0f;
    packed = hi - lo <= 2.0f;                                  // the same in every lane: the bias is the row's
    scale = 8388605.0f / (hi - lo);
  }
  if (packed) {
#pragma unroll
    for (int j = 0; j < P; ++j) {
      const unsigned low = 511u - (unsigned)(first + j);
      if constexpr (ROUTER == PLAIN || ROUTER == SOFTMAX) {
        // A 16-bit logit's order key is the float's top 16 (bf16) or 19 (fp16) bits; the rest is all 0 or all 1.
        constexpr int S = std::is_same<T, __half>::value ? 13 : 16;
        key[j] = key[j] ? ((key[j] >> S) << 9) | low : 0u;
      } else {
        const unsigned q = 1u + min(__float2uint_rz((from_order_key(key[j]) - lo) * scale), 8388605u);
        key[j] = key[j] ? (q << 9) | low : 0u;
      }
    }
    unsigned prev = 0xffffffffu;
    for (int r = 0; r < k; ++r) {
      unsigned gap = prev - 1u;                                // a key of 0: below every real key
#pragma unroll
      for (int j = 0; j < P; ++j) gap = min(gap, prev - 1u - key[j]);
      prev = lanes_max<W>(prev - 1u - gap);
      const int idx = 511 - (int)(prev & 511u);
#pragma unroll
      for (int q = 0; q < R; ++q) mine[q] = r == q * W + lane ? idx : mine[q];
    }
  }
  for (int r = 0; r < (packed ? 0 : k); ++r) {
    unsigned best = 0;
    int best_j = 0;
#pragma unroll
    for (int j = 0; j < P; ++j) {
      if (key[j] > best) { best = key[j]; best_j = j; }   // strict: the lowest expert among equals
    }
    const unsigned top = lanes_max<W>(best);
    const int idx = (int)lanes_min<W>(best == top ? (unsigned)(first + best_j) : 0xffffffffu);
#pragma unroll
    for (int j = 0; j < P; ++j) key[j] = first + j == idx ? 0u : key[j];
#pragma unroll
    for (int q = 0; q < R; ++q) mine[q] = r == q * W + lane ? idx : mine[q];
  }
  // The weights of this lane's rounds, from their logits read again.
  float w[R];
  float sum = 0.0f;
#pragma unroll
  for (int q = 0; q < R; ++q) {
    const bool have = q * W + lane < k;
    const float xe = have ? to_float<T>(row[mine[q]]) : 0.0f;
    if constexpr (ROUTER == SOFTMAX) {
      w[q] = have ? __expf(xe - row_max) : 0.0f;
    } else {
      w[q] = have ? sigmoid(xe) : 0.0f;
    }
    sum += w[q];
  }
  float denom = 1.0f;
  if constexpr (ROUTER == BIASED || ROUTER == GROUPED) denom = lanes_sum<W>(sum);
  if constexpr (ROUTER == SOFTMAX) denom = renormalize ? lanes_sum<W>(sum) : total;
  if (active) {
#pragma unroll
    for (int q = 0; q < R; ++q) {
      const int r = q * W + lane;
      if (r < k) {
        weights[(size_t)token * k + r] = __fdividef(w[q], denom);
        ids[(size_t)token * k + r] = mine[q];
      }
    }
  }
}

// The lanes per token and experts per lane for an expert count (and, for the grouped router, its groups: a
// group's score is kept by one lane, so W >= n_group): 4 lanes up to 64 experts, 8 below 256, 16 from 256 (a
// lane's keys then take few registers, and many warps fit an SM); P the next of 1, 2, 4, 8, 10, 12, 16, 20, 24,
// 32 that holds them.
struct RouterShape {
  int w, p;
};

__host__ inline RouterShape router_shape(int experts, int n_group = 1) {
  int w = experts <= 64 ? 4 : experts < 256 ? 8 : 16;
  while (w < n_group && w < 16) w *= 2;
  if (n_group > w) return {0, 0};
  constexpr int kPs[] = {1, 2, 4, 8, 10, 12, 16, 20, 24, 32};
  for (int p : kPs) {
    if (experts <= w * p) return {w, p};
  }
  return {0, 0};
}

}  // namespace moe

#ifdef MOE_ROUTER   // one instantiation for `kpilot isa analyze` (-D MOE_ROUTER, MOE_W, MOE_P, MOE_DTYPE)
template __global__ void moe::topk_router<MOE_DTYPE, MOE_W, MOE_P, MOE_ROUTER>(const MOE_DTYPE*, const float*, float*,
                                                                              int*, int, int, int, int, int, int, int);
#endif
