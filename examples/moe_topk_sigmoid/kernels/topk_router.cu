// MoE routing for NVIDIA sm_80+, every router of the case study: plain and biased sigmoid, softmax gating and
// DeepSeek-V3's grouped selection, for any expert count up to 512 and any k up to 16. Two kernels share the keys
// and the weights: topk_router selects in rounds and serves every shape; topk_router_merge selects by sorting
// networks, for k up to 8 (its comment says how; routing_cuda.py says where each runs).
//
// topk_router: W lanes per token (4, 8 or 16: see router_shape; a warp routes 32 / W tokens at a time), each lane holding P
// consecutive experts (lane l: experts l * P .. l * P + P - 1), loaded as 16-byte vectors where the rows allow
// it. Each expert gets one 32-bit key, its score's bits then its expert, unique in the token and ordered like
// the selection (the lower expert first among equal scores); 0 marks none:
// - fp16/bf16 logits without a bias: the 16-bit order key, then 65535 - expert: exact, two keys a word by byte
//   permutes;
// - with a bias spanning at most 1: the score sigmoid(x) + bias quantized to 23 bits (2.4e-7 apart at most, inside
//   the checks' 1e-6), then 511 - expert;
// - fp32 logits: the order key's top 23 bits, then 511 - expert, with one round more; where two of the top k + 1
//   share those bits, the warp selects again on exact keys (select_exact), as it does for a wider bias.
// Each lane keeps its best 2 or 3 keys (best_n); a round takes the largest over the token's lanes (xor shuffles
// within the W lanes) and its lane moves its next key up (select_rounds), lane r % W keeping round r's key. A
// lane whose kept keys were all taken may hold more of the top k: after the rounds its next key is compared with
// the last round's, and where it is larger the rounds are done again over all keys. The weights are made after
// the rounds from the chosen experts' logits: the top 16 bits of 16-bit logits' exact keys, others read again from
// the row (from L1; kKeyLogits).
//
// Score and weight:
//   PLAIN    score logit, weight sigmoid(logit)
//   BIASED   score sigmoid(logit) + bias[e], weight sigmoid(logit), renormalised over the k
//   SOFTMAX  score logit, weight exp(logit - max) / sum over all experts, or renormalised over the k
//   GROUPED  as BIASED, within the topk_group groups (of n_group, consecutive experts) whose two largest scores
//            sum the most (lowest group among equals; keep_groups).
// Analysis builds: nvcc -arch=sm_90 -O3 -cubin -DMOE_ROUTER=3 -DMOE_W=8 -DMOE_P=32 [-DMOE_DTYPE=__nv_bfloat16] topk_router.cu
// (topk_router), or -DMOE_MERGE=1 -DMOE_W=4 -DMOE_C=6 (topk_router_merge, router 0 to 3, C chunks of 8 a lane;
// -DMOE_G=2 with -DMOE_MERGE=3: 2 groups a lane).
#if (defined(MOE_ROUTER) || defined(MOE_MERGE)) && !defined(MOE_DTYPE)
#define MOE_DTYPE float
#endif
#include <type_traits>

#include "topk_sigmoid_common.cuh"

namespace moe {

enum Router { PLAIN = 0, BIASED = 1, SOFTMAX = 2, GROUPED = 3 };

__device__ inline float neg_inf() { return -__int_as_float(0x7f800000); }

// A warp REDUX (one step, the whole warp), max or min.
template <bool MAX>
__device__ inline unsigned warp_redux(unsigned v) {
  return MAX ? __reduce_max_sync(0xffffffffu, v) : __reduce_min_sync(0xffffffffu, v);
}

// The max or min over each half of the warp (16 lanes, a token's) by two warp REDUX, each half's values alone (the
// identity, 0 or ~0, for the other half's): independent of each other, one step deep.
template <bool MAX>
__device__ inline unsigned halves_redux(unsigned v) {
  const bool up = (threadIdx.x & 16u) != 0u;   // this token's half of the warp
  const unsigned none = MAX ? 0u : 0xffffffffu;
  const unsigned lo = warp_redux<MAX>(up ? none : v);
  const unsigned hi = warp_redux<MAX>(up ? v : none);
  return up ? hi : lo;
}

// Reductions over a token's W lanes: xor shuffles within the segment of W lanes, log2(W) of them one after the
// other, each with its max or min. With kLanesRedux 1, a whole warp (W 32: make_shifts' range of the bias) takes one
// warp REDUX instead, and 16 lanes two (halves_redux). Taken (1): gpu_session.sh's step moe-lanes-redux times it
// against the shuffles (0); NOTES.md has what it found.
inline constexpr int kLanesRedux = 1;

template <int W, bool MAX>
__device__ inline unsigned lanes_extreme(unsigned v) {
  if constexpr (kLanesRedux != 0 && W == 32) {
    return warp_redux<MAX>(v);
  } else if constexpr (kLanesRedux != 0 && W == 16) {
    return halves_redux<MAX>(v);
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

// The N largest of a lane's keys, largest first (an insertion chain of 2N - 1 min/max per key).
template <int N, int P>
__device__ inline void best_n(const unsigned (&key)[P], unsigned (&h)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) h[i] = 0u;
#pragma unroll
  for (int j = 0; j < P; ++j) {
    unsigned v = key[j];
#pragma unroll
    for (int i = 0; i < N; ++i) {
      const unsigned hi = max(h[i], v);
      if (i + 1 < N) v = min(h[i], v);
      h[i] = hi;
    }
  }
}

// The largest of a lane's keys below `below` (0: none). The distance below it, wrapping around for keys at or
// above it, is least for that key: one min per key.
template <int P>
__device__ inline unsigned largest_below(const unsigned (&key)[P], unsigned below) {
  unsigned gap = below - 1u;   // a key of 0
#pragma unroll
  for (int j = 0; j < P; ++j) gap = min(gap, below - 1u - key[j]);
  return below - 1u - gap;
}

// Round r's key goes to slot q of lane r % W (q = r / W).
template <int W, int R>
__device__ inline void keep_round(unsigned (&slot)[R], int r, int lane, unsigned key) {
#pragma unroll
  for (int q = 0; q < R; ++q) slot[q] = r == q * W + lane ? key : slot[q];
}

// A round's largest key over a token's W lanes. By xor shuffles, log2(W) of them one after the other, each with its
// max: on a launch of few tokens the rounds' chains are its critical path (16 lanes: 4 shuffles a round, 8 rounds
// at k 8). With kRoundsRedux 1, 16 lanes take two warp REDUX.MAX instead (halves_redux), as topk_sigmoid_keys.cu's
// group_max does. Taken (1): gpu_session.sh's step moe-rounds-redux times it against the shuffles (0); NOTES.md has
// what it found.
inline constexpr int kRoundsRedux = 1;

template <int W>
__device__ inline unsigned round_max(unsigned v) {
  if constexpr (kRoundsRedux != 0 && W == 16) {
    return halves_redux<true>(v);
  } else {
    return lanes_max<W>(v);
  }
}

// `rounds` rounds over a token's W lanes on unique keys (0: none), each lane's best N held: a round takes the
// largest held key, and its lane moves its next one up. A lane whose N were all taken may hold more of the top:
// its next key (the largest below its N-th) is looked for after the rounds, and if it is above the last round's,
// the rounds are done again over all keys (largest_below, one pass per round); a lane not `live` (its group not
// kept) gives nothing then. With CHECK, `alike` tells whether two rounds' keys share their bits above the expert's
// 9 (the same in the token's lanes).
template <int W, int N, int P, int R, bool CHECK>
__device__ inline void select_rounds(const unsigned (&key)[P], unsigned (&h)[N], int rounds, int lane, bool live,
                                     unsigned (&slot)[R], bool& alike) {
  const unsigned lowest = h[N - 1];
  unsigned top = 0u, prev = 0u;
  alike = false;
  for (int r = 0; r < rounds; ++r) {
    top = round_max<W>(h[0]);
    const bool win = h[0] == top;
#pragma unroll
    for (int i = 0; i + 1 < N; ++i) h[i] = win ? h[i + 1] : h[i];
    h[N - 1] = win ? 0u : h[N - 1];
    keep_round<W, R>(slot, r, lane, top);
    if constexpr (CHECK) alike |= r > 0 && (top >> 9) == (prev >> 9);
    prev = top;
  }
  const bool spent = h[0] == 0u && lowest != 0u;
  bool wrong = false;
  if (__any_sync(0xffffffffu, spent)) {
    if (spent) wrong = largest_below<P>(key, lowest) > top;
    if (__any_sync(0xffffffffu, wrong)) {
      alike = false;
      prev = 0xffffffffu;
      for (int r = 0; r < rounds; ++r) {
        top = lanes_max<W>(live ? largest_below<P>(key, prev) : 0u);
        keep_round<W, R>(slot, r, lane, top);
        if constexpr (CHECK) alike |= r > 0 && (top >> 9) == (prev >> 9);
        prev = top;
      }
    }
  }
}

// For each of a lane's G group keys (its groups `mine` .. `mine` + G - 1), how many of the n_group groups rank ahead
// of it: a group before it with a key at least its own, or after it with a larger one (the lowest group first
// among equals). Group o's key is gk[o % G] of lane o / G * stride, gathered by one shuffle a group (independent,
// one step deep); N (W * G, a constant) bounds the groups, n_group at most N. Where n_group is the call's (the
// rounds kernel's groups), a branch on o < n_group around each shuffle puts every shuffle in a block of its own,
// each waited on before the next is issued (8 groups: 8 shuffles one after the other on a launch's critical path).
// kGroupsAtOnce shuffles are issued at once instead, a branch on each such run of groups, the groups past n_group
// in the last run counting for nothing (1: one at a time). Four, not all N: all at once holds every result in a
// register at the same time (384 grouped experts, 24 a lane: 127 -> 162 registers in sm_90 builds, 2 -> 1 block an
// SM); four keeps every build's registers. Taken (4): gpu_session.sh's step moe-groups-at-once times it against 1;
// NOTES.md has what it found.
inline constexpr int kGroupsAtOnce = 4;

template <int W, int G, int N>
__device__ inline void groups_ahead(const unsigned (&gk)[G], int n_group, int stride, int mine, int (&ahead)[G]) {
  constexpr int A = kGroupsAtOnce < N ? kGroupsAtOnce : N;
#pragma unroll
  for (int g = 0; g < G; ++g) ahead[g] = 0;
#pragma unroll
  for (int run = 0; run < N; run += A) {
    if (run < n_group) {   // uniform
#pragma unroll
      for (int o = run; o < run + A && o < N; ++o) {
        const unsigned other = W > 1 ? __shfl_sync(0xffffffffu, gk[o % G], o / G * stride, W) : gk[o % G];
        const bool group = A == 1 || o < n_group;
#pragma unroll
        for (int g = 0; g < G; ++g) {
          const unsigned own = gk[g];
          ahead[g] += group && (other > own || (other == own && o < mine + g));
        }
      }
    }
  }
}

// The groups kept by DeepSeek-V3's rule (a bit per group): the topk_group groups of largest group key (the sum of
// their two largest scores, as group_key makes it), the lowest group among equals. Where each group is L whole
// lanes, a lane's two largest keys (k1 >= k2) are merged over its group's lanes, and the bit returned is its own
// group's alone (all a lane's experts are in it); otherwise each group's top two are reduced over all W lanes in
// turn into lane g (n_group at most W). Each lane then gathers the groups' keys (n_group independent shuffles, one
// step deep, not topk_group rounds of maxima over the lanes) and counts the groups ahead of its own.
template <int W, int P, typename GroupKey>
__device__ inline unsigned keep_groups(const unsigned (&key)[P], unsigned k1, unsigned k2, int lane, int first,
                                       int per, int L, int n_group, int topk_group, GroupKey group_key) {
  unsigned gk = 0u;
  int stride = L;   // group g's key is in lane g * stride
  if (L > 0) {      // uniform
    lanes_top2<W>(k1, k2, L);
    gk = group_key(k1, k2);
  } else {
    for (int grp = 0; grp < n_group; ++grp) {
      unsigned a = 0, b = 0;
#pragma unroll
      for (int j = 0; j < P; ++j) {
        const int e = first + j;
        take_top2(e >= grp * per && e < (grp + 1) * per ? key[j] : 0u, a, b);
      }
      lanes_top2<W>(a, b, W);
      if (lane == grp) gk = group_key(a, b);
    }
    stride = 1;
  }
  const int mine = lane / stride;
  const unsigned own[1] = {gk};
  int ahead[1];
  groups_ahead<W, 1, W>(own, n_group, stride, mine, ahead);
  const bool kept = ahead[0] < topk_group;
  if (L > 0) return (unsigned)kept << mine;
  const unsigned votes = __ballot_sync(0xffffffffu, kept && lane < n_group) >> ((threadIdx.x % 32) - lane);
  return votes & (n_group < 32 ? (1u << n_group) - 1u : 0xffffffffu);
}

// Keys of experts outside the kept groups made 0.
template <int P>
__device__ inline void drop_groups(unsigned (&key)[P], unsigned kept, int first, int per) {
  const float inv_per = 1.0f / (float)per;
#pragma unroll
  for (int j = 0; j < P; ++j) {
    const int group = __float2int_rz(((float)(first + j) + 0.5f) * inv_per);   // (first + j) / per, exactly
    key[j] = (kept >> min(group, 31)) & 1u ? key[j] : 0u;
  }
}

// P experts of a row from `first` as floats: 16-byte vectors where the rows allow it, 0 past the experts.
template <typename T, int P>
__device__ inline void load_floats(const T* __restrict__ row, int first, int experts, bool vector, float (&x)[P]) {
  if (vector) {
    load_row<T, P>(row + first, x);
  } else {
#pragma unroll
    for (int j = 0; j < P; ++j) x[j] = first + j < experts ? to_float<T>(row[first + j]) : 0.0f;
  }
}

// P 16-bit logits of a row from `first` as their bits, two per word (element 2p in the low half): 16-byte, 8-byte
// or 4-byte loads where the rows allow it, 0 past the experts.
template <typename T, int P>
__device__ inline void load_words(const T* __restrict__ row, int first, int experts, bool vector,
                                  unsigned (&w)[(P + 1) / 2]) {
  constexpr int BYTES = 2 * P;
  if (BYTES % 4 == 0 && vector) {
    const unsigned* src = reinterpret_cast<const unsigned*>(row + first);
    if constexpr (BYTES % 16 == 0) {
#pragma unroll
      for (int v = 0; v < BYTES / 16; ++v) {
        const uint4 q = __ldg(reinterpret_cast<const uint4*>(src) + v);
        w[4 * v] = q.x; w[4 * v + 1] = q.y; w[4 * v + 2] = q.z; w[4 * v + 3] = q.w;
      }
    } else if constexpr (BYTES % 8 == 0) {
#pragma unroll
      for (int v = 0; v < BYTES / 8; ++v) {
        const uint2 q = __ldg(reinterpret_cast<const uint2*>(src) + v);
        w[2 * v] = q.x; w[2 * v + 1] = q.y;
      }
    } else {
#pragma unroll
      for (int v = 0; v < BYTES / 4; ++v) w[v] = __ldg(src + v);
    }
  } else {
    const unsigned short* h = reinterpret_cast<const unsigned short*>(row);
#pragma unroll
    for (int p = 0; p < (P + 1) / 2; ++p) {
      const int e = first + 2 * p;
      const unsigned lo = e < experts ? h[e] : 0u;
      const unsigned hi = 2 * p + 1 < P && e + 1 < experts ? h[e + 1] : 0u;
      w[p] = lo | (hi << 16);
    }
  }
}

// The shift table's layout: lane l's experts l * P + j in vectors of V floats (V = 4, 2 or 1, the widest that
// divides P), vector v of every lane side by side (at (v * W + l) * V). A token's lanes then read adjacent words
// for each vector, where consecutive experts per lane put the lanes P floats apart, on the same banks.
template <int P>
__host__ __device__ constexpr int shift_width() { return P % 4 == 0 ? 4 : P % 2 == 0 ? 2 : 1; }

template <int W, int P>
__device__ inline int shift_slot(int e) {
  constexpr int V = shift_width<P>();
  const int lane = e / P, j = e % P;
  return ((j / V) * W + lane) * V + j % V;
}

// Lane `lane`'s P shifts from the table (shift_slot's layout), V floats a load.
template <int W, int P>
__device__ inline void load_shifts(const float* shift, int lane, float (&c)[P]) {
  constexpr int V = shift_width<P>();
#pragma unroll
  for (int v = 0; v < P / V; ++v) {
    const float* at = shift + (v * W + lane) * V;
    if constexpr (V == 4) {
      const float4 q = *reinterpret_cast<const float4*>(at);
      c[4 * v] = q.x; c[4 * v + 1] = q.y; c[4 * v + 2] = q.z; c[4 * v + 3] = q.w;
    } else if constexpr (V == 2) {
      const float2 q = *reinterpret_cast<const float2*>(at);
      c[2 * v] = q.x; c[2 * v + 1] = q.y;
    } else {
      c[v] = *at;
    }
  }
}

inline constexpr int kRouterThreads = 256;   // a block of either router kernel, as router_launch.h launches it

// With a bias: keys of the score quantized where the bias spans at most 1 (hi - lo <= 2), so that the score and the
// expert fit 32 bits: v = (s - lo) * scale + 2^23 + 1 lies in [2^23 + 1, 2^24), where a float's low 23 bits are its
// integer part; v << 9 keeps them and makes room for 511 - expert. Scores 2.4e-7 apart or less may take either
// order (the checks let scores within 1e-6 do so). The block keeps shift[slot(e)] = (bias[e] - lo) * scale +
// 2^23 + 1 in shared memory, so that v = sigmoid * scale + shift (one FFMA). Returns whether the bias is that
// narrow (else the keys are made exact), with `scale` set; every thread of the block (kRouterThreads) calls it.
//
// The bias is read twice, by each warp for its extremes and by the block for the table; reading every lane's share
// at once into registers for both was timed and was slower (NOTES.md).
template <typename Slot>
__device__ inline bool make_shifts(const float* __restrict__ bias, int experts, float* shift, float& scale, Slot slot) {
  unsigned bmin = 0xffffffffu, bmax = 0u;   // the bias's extremes, over the warp's lanes
  for (int e = threadIdx.x % 32; e < experts; e += 32) {
    const unsigned o = order_key(bias[e]);
    bmin = min(bmin, o);
    bmax = max(bmax, o);
  }
  const float lo = from_order_key(lanes_min<32>(bmin));
  const float hi = from_order_key(lanes_max<32>(bmax)) + 1.0f;   // the scores lie in [lo, hi]
  scale = 8388604.0f / (hi - lo);
  for (int e = threadIdx.x; e < experts; e += blockDim.x) shift[slot(e)] = fmaf(bias[e] - lo, scale, 8388609.0f);
  __syncthreads();
  return hi - lo <= 2.0f;
}

// A biased score's packed key: the quantized score (make_shifts; c the expert's shift), then 511 - expert.
__device__ inline unsigned biased_key(float x, float scale, float c, unsigned low) {
  return (__float_as_uint(fmaf(sigmoid(x), scale, c)) << 9) | low;
}

// An fp32 logit's packed key: its order key's top 23 bits, then 511 - expert (exact where no two of a token's top
// k + 1 share those bits; the kernels check that).
__device__ inline unsigned top23_key(float x, unsigned low) { return (order_key(x) & 0xfffffe00u) | low; }

// The exact keys of a word's two 16-bit logits, experts e and e + 1 (the low half first): each one's order key,
// then 65535 - expert, by byte permutes.
__device__ inline void half_keys(unsigned w, int e, unsigned& lo, unsigned& hi) {
  const unsigned o = half_order_keys(w);
  const unsigned iw = (0xffffu - (unsigned)e) * 0x10001u - 0x10000u;   // 65535 - e, then 65535 - (e + 1) above
  lo = __byte_perm(o, iw, 0x1054);
  hi = __byte_perm(o, iw, 0x3276);
}

// The score's exact order key (the reference's float arithmetic up to the sigmoid's rounding).
template <int ROUTER>
__device__ inline unsigned exact_key(float x, float b) {
  if constexpr (ROUTER == PLAIN || ROUTER == SOFTMAX) {
    return order_key(x);
  } else {
    return order_key(sigmoid(x) + b);
  }
}

// The selection on exact keys (the order keys of the scores, read again from the row), for the scores that packed
// keys cannot order within the checks' tolerance: a round takes the largest key and the lowest expert holding it.
// Fills slot with round r's expert.
template <typename T, int W, int P, int ROUTER, int R>
__device__ inline void select_exact(const T* __restrict__ row, const float* __restrict__ bias, int first, int lane,
                                    int experts, int k, int n_group, int topk_group, int L, unsigned (&slot)[R]) {
  float x[P];
  load_floats<T, P>(row, first, experts, false, x);
  unsigned key[P];
#pragma unroll
  for (int j = 0; j < P; ++j) {
    const int e = first + j;
    key[j] = e < experts ? exact_key<ROUTER>(x[j], ROUTER == BIASED || ROUTER == GROUPED ? bias[e] : 0.0f) : 0u;
  }
  if constexpr (ROUTER == GROUPED) {
    const int per = experts / n_group;
    unsigned k1 = 0, k2 = 0;
#pragma unroll
    for (int j = 0; j < P; ++j) take_top2(key[j], k1, k2);
    const auto group_key = [per](unsigned a, unsigned b) {
      return order_key(from_order_key(a) + (per > 1 ? from_order_key(b) : 0.0f));
    };
    const unsigned kept = keep_groups<W, P>(key, k1, k2, lane, first, per, L, n_group, topk_group, group_key);
    drop_groups<P>(key, kept, first, per);
  }
  for (int r = 0; r < k; ++r) {
    unsigned best = 0;
    int best_j = 0;
#pragma unroll
    for (int j = 0; j < P; ++j) {
      if (key[j] > best) { best = key[j]; best_j = j; }   // strict: the lowest expert among equals
    }
    const unsigned top = lanes_max<W>(best);
    const unsigned idx = lanes_min<W>(best == top ? (unsigned)(first + best_j) : 0xffffffffu);
#pragma unroll
    for (int j = 0; j < P; ++j) key[j] = first + j == (int)idx ? 0u : key[j];
    keep_round<W, R>(slot, r, lane, idx);
  }
}

// Where 16-bit logits' keys are exact (no bias: the logit's 16 bits in order above 65535 - expert), the chosen
// experts' logits and the row's largest from their keys (1), or read again from the row (0): each a load that waits
// on the selection before the weights can be made. Read from the keys, the weights come from the same 16 bits; fp32
// keys keep 23 bits of the score and biased keys a quantized sum, so those routers read the row at either setting.
// Taken (1): gpu_session.sh's step moe-key-logits times it against 0 (NOTES.md has what it found).
inline constexpr int kKeyLogits = 1;

// The logit of a 16-bit exact key (half_keys' layout: its order key in the top 16 bits). The key passes through
// opaque(): without it, nvcc 13.0's cicc crashed (a segmentation fault) on the merge kernel's plain 16-bit builds
// of 8 chunks a lane.
template <typename T>
__device__ inline float key_logit(unsigned key) {
  return from_bits<T>(bits_of_order16(opaque(key) >> 16));
}

// The token's lane 0's `v` in all its W lanes (one lane: its own).
template <int W>
__device__ inline float token_lane0(float v) {
  if constexpr (W == 1) return v;
  return __shfl_sync(0xffffffffu, v, 0, W);
}

// A row's softmax terms e^(x - m), m its largest logit: with kTermFma 1, 2^(x log2(e) - m log2(e)), one FFMA a term
// (m log2(e) made once a row), where softmax_term's (x - m) log2(e) takes an FADD and an FMUL (0). The argument
// differs from softmax_term's by the rounding of m log2(e), a relative error of the term below 1e-6.
// gpu_session.sh's step moe-lists-terms times 1 against 0 (NOTES.md).
inline constexpr int kTermFma = 0;

struct RowTerms {
  float m, scaled;
  __device__ explicit RowTerms(float m) : m(m), scaled(m * kLog2E) {}
  __device__ float operator()(float x) const {
    return kTermFma ? exp2_ftz(fmaf(x, kLog2E, -scaled)) : softmax_term(x, m);
  }
};

// The token's largest logit: its first chosen expert's (slot 0 of the token's lane 0, `first`), read again (from
// L1) and shared over the token's W lanes.
template <typename T, int W>
__device__ inline float top_logit(const T* __restrict__ row, unsigned first, int lane) {
  return token_lane0<W>(lane == 0 ? to_float<T>(row[first]) : 0.0f);
}

// A token's weights and ids from its chosen experts (slot q of lane l: the (q * W + l)-th) and their logits
// (KEY_LOGITS: `chosen`, from their keys; else read again from the token's row): the sigmoid, or for softmax
// exp(logit - row_max) over `total` (or renormalised over the k); with a bias renormalised over the k. Every lane
// of the warp calls it (the sums' shuffles); `active` ones store.
template <typename T, int W, int ROUTER, bool KEY_LOGITS, int R>
__device__ inline void write_weights(const T* __restrict__ row, const float (&chosen)[R], const unsigned (&slot)[R],
                                     int lane, int k, int renormalize, float row_max, float total, bool active,
                                     float* __restrict__ wrow, int* __restrict__ irow) {
  float w[R];
  float sum = 0.0f;
  const RowTerms term(row_max);
#pragma unroll
  for (int q = 0; q < R; ++q) {
    const bool have = q * W + lane < k;
    const float xe = !have ? 0.0f : KEY_LOGITS ? chosen[q] : to_float<T>(row[slot[q]]);
    if constexpr (ROUTER == SOFTMAX) {
      w[q] = have ? term(xe) : 0.0f;
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
        wrow[r] = __fdividef(w[q], denom);
        irow[r] = (int)slot[q];
      }
    }
  }
}

// Each warp takes 32 / W tokens at a time, the grid striding over them: the first of the warp's first 32 / W, and
// this thread's token among them (its W lanes' slot).
template <int W>
__device__ inline int warp_first_token() {
  return (blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32) * (32 / W);
}

template <int W>
__device__ inline int first_token() {
  return warp_first_token<W>() + (threadIdx.x % 32) / W;
}

// Starts bringing the line that holds `p` into L1 (a prefetch: nothing waits on it), so that a load of it issued
// after other work waits less. No-op in the CPU emulation.
__device__ inline void prefetch_l1(const void* p) {
#ifdef __CUDA_ARCH__
  asm volatile("prefetch.global.L1 [%0];" ::"l"(p));
#endif
}

// With a bias, the rounds kernel makes the block's shift table (a read of the bias from memory, then a reduction
// and a barrier) before it reads its first tokens' rows, so that a launch of few tokens waits on two reads of memory
// one after the other. With kRowPrefetch 1 each thread starts fetching its first token's part of the row before,
// so that the two overlap. At 1: faster on the biased and grouped router cases of 3,000 tokens or fewer, the same
// outputs (gpu_session.sh's step moe-row-prefetch times 1 against 0; results/moe_routers_row_prefetch_h100.json).
inline constexpr int kRowPrefetch = 1;

// Stage clocks, in a build with MOE_STAGE_CLOCKS defined (benchmarks/router_stages.py): the rounds kernel's first
// thread reads the SM clock as each stage of its first token ends, the read placed after the stage's value `dep` (a
// warp issues in order, so the read waits for it), and prints the clocks at its end. A stage's value folds its
// array's first and last elements (ends(): the first alone where there is one, never a constant that would let the
// read move up). Without MOE_STAGE_CLOCKS nothing is compiled.
#ifdef MOE_STAGE_CLOCKS
// entry, shift table made, row loaded, keys made, heads kept (and groups chosen), rounds done, selection done,
// weights stored
inline constexpr int kStages = 8;
__device__ inline long long stage_clock(unsigned dep, unsigned& sink) {
  long long t;
  asm volatile("{\n\t.reg .u32 d;\n\txor.b32 d, %2, %1;\n\tmov.u32 %1, d;\n\tmov.u64 %0, %%clock64;\n\t}"
               : "=l"(t), "+r"(sink) : "r"(dep) : "memory");
  return t;
}
template <int N>
__device__ inline unsigned ends(const unsigned (&a)[N]) { return N > 1 ? a[0] ^ a[N - 1] : a[0]; }
template <int N>
__device__ inline unsigned ends(const float (&a)[N]) {
  return N > 1 ? __float_as_uint(a[0]) ^ __float_as_uint(a[N - 1]) : __float_as_uint(a[0]);
}
#define MOE_STAGE(n, dep) (stage_at[n] = stage_clock((unsigned)(dep), stage_sink))
#else
#define MOE_STAGE(n, dep) ((void)0)
#endif

// Blocks of 256 threads per SM each build is made for: 3 (80 registers) where that does not spill, else what
// the registers allow (more than 16 experts per lane; at 16, the fp32 softmax's sums, the grouped selection with
// fewer than 16 lanes, and fp32 logits on 4 lanes, whose rounds' slots take 4 registers).
template <typename T, int W, int P, int ROUTER>
__host__ __device__ constexpr int router_min_blocks() {
  if constexpr (P < 16) {
    return 3;
  } else if constexpr (P == 16) {
    const bool fp32 = sizeof(T) == 4;
    return (ROUTER == SOFTMAX && fp32) || (ROUTER == GROUPED && W < 16) || (W == 4 && fp32) ? 1 : 3;
  } else {
    return 1;
  }
}

template <typename T, int W, int P, int ROUTER>
__global__ __launch_bounds__(256, router_min_blocks<T, W, P, ROUTER>()) void topk_router(
    const T* __restrict__ logits, const float* __restrict__ bias, float* __restrict__ weights, int* __restrict__ ids,
    int tokens, int experts, int k, int renormalize, int n_group, int topk_group, int vector_rows) {
  static_assert(W == 4 || W == 8 || W == 16, "4, 8 or 16 lanes per token");
  static_assert(P >= 1 && P <= 32, "1 to 32 experts per lane");
  constexpr int R = (16 + W - 1) / W;         // rounds a lane keeps: round r goes to lane r % W (k <= 16)
  constexpr bool HALVES = (ROUTER == PLAIN || ROUTER == SOFTMAX) && sizeof(T) == 2;   // exact 16-bit keys
  constexpr bool BIAS = ROUTER == BIASED || ROUTER == GROUPED;
  constexpr bool KEY_LOGITS = HALVES && kKeyLogits != 0;   // the chosen logits from their keys
  const int lane = threadIdx.x % W;
  const int first = lane * P;                 // this lane's experts: first .. first + P - 1
  const bool vector = vector_rows != 0;       // W * P = experts, rows 16-byte aligned
  const bool tail = first + P > experts;      // a lane holding experts past the last
  // The keys each lane holds for the rounds: 2 where the lanes are at least 4k, else 3.
  const int heads = 4 * k <= W ? 2 : 3;
  const int per = ROUTER == GROUPED ? experts / n_group : 1;
  const int L = ROUTER == GROUPED && W * P == experts && per % P == 0 ? per / P : 0;   // lanes per group, if whole
#ifdef MOE_STAGE_CLOCKS
  long long stage_at[kStages] = {};
  unsigned stage_sink = 0u;
  MOE_STAGE(0, 0u);
#endif

  if constexpr (BIAS && kRowPrefetch != 0) {   // the first token's row, fetched while the shift table is made
    const int token0 = first_token<W>();
    if (token0 < tokens && first < experts) {
      const T* row0 = logits + (size_t)token0 * experts;
      prefetch_l1(row0 + first);
      prefetch_l1(row0 + min(first + P, experts) - 1);
    }
  }
  __shared__ __align__(16) float shift[BIAS ? 512 : 4];
  float scale = 0.0f;
  bool quantized = true;
  if constexpr (BIAS) quantized = make_shifts(bias, experts, shift, scale, [](int e) { return shift_slot<W, P>(e); });
  MOE_STAGE(1, __float_as_uint(scale));

  // Each warp takes 32 / W tokens at a time, the grid striding over them (so the bias work above is done once).
  const int warps = gridDim.x * (blockDim.x / 32);
  for (int base = warp_first_token<W>(); base < tokens; base += warps * (32 / W)) {
    const int token = base + (threadIdx.x % 32) / W;
    const bool active = token < tokens;       // a warp's last tokens may lie past the end: they compute, not store
    const T* row = logits + (size_t)(active ? token : 0) * experts;

    unsigned slot[R];                         // keys (or, on the exact path, experts) of this lane's rounds
#pragma unroll
    for (int q = 0; q < R; ++q) slot[q] = 0u;
    float chosen[R] = {};                     // with kKeyLogits, 16-bit logits: the rounds' experts' logits
    bool exact = !quantized;                  // bias too wide for packed keys
    float row_max = 0.0f, total = 1.0f;
    if (!exact) {
      // Packed keys: the score's bits, then the expert (the lower expert first among equal scores); 0 for none.
      unsigned key[P];
      if constexpr (HALVES) {
        // 16-bit logits: their order key, then 65535 - expert (exact), two keys a word by byte permutes.
        unsigned w[(P + 1) / 2];
        load_words<T, P>(row, first, experts, vector, w);
        MOE_STAGE(2, ends(w));
#pragma unroll
        for (int p = 0; p < (P + 1) / 2; ++p) {
          unsigned hi;
          half_keys(w[p], first + 2 * p, key[2 * p], hi);
          if (2 * p + 1 < P) key[2 * p + 1] = hi;
        }
        if (ROUTER == SOFTMAX && !renormalize) {   // the row's largest logit from its keys' top 16 bits, the sum
          unsigned m = 0u;
#pragma unroll
          for (int j = 0; j < P; ++j) m = max(m, first + j < experts || !tail ? key[j] : 0u);
          const unsigned o = lanes_max<W>(m) >> 16;
          row_max = from_bits<T>(bits_of_order16(o));
          const RowTerms term(row_max);
          float s = 0.0f;
#pragma unroll
          for (int j = 0; j < P; ++j) {
            const float v = from_bits<T>(j % 2 ? w[j / 2] >> 16 : w[j / 2] & 0xffffu);
            s += first + j < experts || !tail ? term(v) : 0.0f;
          }
          total = lanes_sum<W>(s);
        }
      } else {
        float x[P];
        load_floats<T, P>(row, first, experts, vector, x);
        MOE_STAGE(2, ends(x));
        float c[BIAS ? P : 1];
        if constexpr (BIAS) load_shifts<W, P>(shift, lane, c);
        if (ROUTER == SOFTMAX && !renormalize) {   // the row's largest logit, the sum
          float m = neg_inf(), s = 0.0f;
#pragma unroll
          for (int j = 0; j < P; ++j) m = fmaxf(m, first + j < experts || !tail ? x[j] : neg_inf());
          row_max = from_order_key(lanes_max<W>(order_key(m)));
          const RowTerms term(row_max);
#pragma unroll
          for (int j = 0; j < P; ++j) s += first + j < experts || !tail ? term(x[j]) : 0.0f;
          total = lanes_sum<W>(s);
        }
#pragma unroll
        for (int j = 0; j < P; ++j) {
          const unsigned low = 511u - (unsigned)(first + j);
          if constexpr (BIAS) {
            key[j] = biased_key(x[j], scale, c[j], low);
          } else {
            key[j] = top23_key(x[j], low);
          }
        }
      }
      if (tail) {
#pragma unroll
        for (int j = 0; j < P; ++j) key[j] = first + j < experts ? key[j] : 0u;
      }
      MOE_STAGE(3, ends(key) ^ __float_as_uint(total));
      // The rounds: k, and for fp32 logits one more, to see that none of the top k shares its 23 bits with the
      // next key (else the token's selection is done on exact keys).
      const int rounds = HALVES || BIAS ? k : min(k + 1, experts);
      bool alike = false;   // fp32 logits: a round's key shares its top 23 bits with the next round's
      const auto run = [&](auto n_heads) {
        constexpr int N = decltype(n_heads)::value;
        static_assert(N == 2 || N == 3, "2 or 3 keys kept a lane");
        unsigned h[N];
        bool live = true;
        if constexpr (ROUTER == GROUPED) {
          const auto group_key = [per](unsigned a, unsigned b) { return (a >> 9) + (per > 1 ? b >> 9 : 0u); };
          if (L > 0) {
            best_n<N, P>(key, h);
            const unsigned kept = keep_groups<W, P>(key, h[0], h[1], lane, first, per, L, n_group, topk_group,
                                                    group_key);
            live = (kept >> (lane / L)) & 1u;   // this lane's group is kept, or it has nothing to give
            if (!live) {
#pragma unroll
              for (int i = 0; i < N; ++i) h[i] = 0u;
            }
          } else {
            const unsigned kept = keep_groups<W, P>(key, 0u, 0u, lane, first, per, 0, n_group, topk_group, group_key);
            drop_groups<P>(key, kept, first, per);
            best_n<N, P>(key, h);
          }
        } else {
          best_n<N, P>(key, h);
        }
        MOE_STAGE(4, ends(h) ^ (unsigned)live);
        select_rounds<W, N, P, R, !HALVES && !BIAS>(key, h, rounds, lane, live, slot, alike);
      };
      if (heads == 2) {
        run(std::integral_constant<int, 2>());
      } else {
        run(std::integral_constant<int, 3>());
      }
      exact = __any_sync(0xffffffffu, alike);   // the top k may be out of order: exact keys decide
      MOE_STAGE(5, ends(slot) ^ (unsigned)exact);
#pragma unroll
      for (int q = 0; q < R; ++q) {
        if constexpr (KEY_LOGITS) chosen[q] = key_logit<T>(slot[q]);
        slot[q] = HALVES ? 0xffffu - (slot[q] & 0xffffu) : 511u - (slot[q] & 511u);
      }
    }
    if constexpr (!HALVES) {                  // 16-bit logits' keys are exact
      if (__any_sync(0xffffffffu, exact)) {   // the warp's tokens together: the shuffles take all 32 lanes
        select_exact<T, W, P, ROUTER, R>(row, bias, first, lane, experts, k, n_group, topk_group, L, slot);
      }
    }
    // Softmax renormalised over the k: no sum over the row (it cancels), the largest logit the first chosen one's.
    if (ROUTER == SOFTMAX && renormalize) {
      row_max = KEY_LOGITS ? token_lane0<W>(chosen[0]) : top_logit<T, W>(row, slot[0], lane);
    }
    MOE_STAGE(6, ends(slot) ^ __float_as_uint(row_max));

    write_weights<T, W, ROUTER, KEY_LOGITS>(row, chosen, slot, lane, k, renormalize, row_max, total, active,
                                            weights + (size_t)token * k, ids + (size_t)token * k);
#ifdef MOE_STAGE_CLOCKS
    MOE_STAGE(7, 0u);
    if (blockIdx.x == 0 && threadIdx.x == 0 && base == warp_first_token<W>()) {
      printf("moe-stages router=%d experts=%d k=%d bytes=%d tokens=%d W=%d P=%d sink=%u clocks=%lld,%lld,%lld,%lld,%lld,"
             "%lld,%lld,%lld\n", ROUTER, experts, k, (int)sizeof(T), tokens, W, P, stage_sink, stage_at[0],
             stage_at[1], stage_at[2], stage_at[3], stage_at[4], stage_at[5], stage_at[6], stage_at[7]);
    }
#endif
  }
}

// The lanes per token and experts per lane for an expert count (and, for the grouped router, its groups: a
// group's score is kept by one lane, so W >= n_group): 4 lanes up to 32 experts, 8 up to 128, 16 above (at most
// 16 experts a lane up to 256, whose keys and their kept best fit 80 registers); P the next of 1, 2, 4, 8, 10,
// 12, 16, 20, 24, 32 that holds them.
struct RouterShape {
  int w, p;
  int g = 1;   // the grouped merge kernel: groups a lane (several where a lane holds whole groups)
};

__host__ inline RouterShape router_shape(int experts, int n_group = 1) {
  int w = experts <= 32 ? 4 : experts <= 128 ? 8 : 16;
  while (w < n_group && w < 16) w *= 2;
  if (n_group > w) return {0, 0};
  constexpr int kPs[] = {1, 2, 4, 8, 10, 12, 16, 20, 24, 32};
  for (int p : kPs) {
    if (experts <= w * p) return {w, p};
  }
  return {0, 0};
}

// The merge kernel: selection by sorting networks, for k up to 8. Chunk c of a token's row (experts 8c .. 8c + 7)
// is lane c % W's chunk c / W, so that a token's lanes read neighbouring 16 bytes (with groups, lane c / C's, so
// that a lane's experts lie in one group: grouped_best_keys; a group of 4n experts, n odd, is one lane's, its chunks
// from the group's first expert and the last cut at its end). A lane makes each chunk's eight keys (as topk_router
// makes them), sorts them (19 compare-exchanges) and
// merges them into its best 8 (best_keys, as the sorting-network kernel does); the token's lanes then merge their
// lists by xor shuffles, log2(W) steps, and every lane holds the token's best 8: no rounds, and no lane that can
// run out of kept keys, so a lane can hold many experts (4 lanes of 64 for 256 bf16 experts, where the rounds
// took 16 lanes of 16 and a round's maxima every 2 tokens a warp). With kFourLists, the lists of quantized keys
// hold 4 at k 4 or less (but for the grouped router). fp32 logits keep their order key's top 23 bits, the best key
// left out tracked through the merges; a warp where two of a token's top k + 1 share those bits selects again on
// exact 64-bit keys, as does a bias spanning more than 1.

// Groups of 4n experts (n odd: 12 or 20) two a lane end in a chunk of 4 experts: its 4 keys made alone and sorted by a
// network of 4 (1), or made as a chunk of 8 whose last 4 are 0 (0). Only builds of 2 or more chunks a group have
// the branch (two groups a lane on 4 lanes of 4 or 6 chunks, which only groups of 12 and 20 reach): in the others it
// is never taken and its code alone slowed them. gpu_session.sh's step moe-half-chunks times 1 against 0 (NOTES.md).
inline constexpr int kHalfChunks = 1;

// Where a call's k is 4 or less, the plain, biased and softmax routers' lists of best quantized keys hold 4 (1): a
// lane sorts each chunk's keys as two fours (5 compare-exchanges each) and merges each four into its list (4 max and
// 4 compare-exchanges), and the lanes merge lists of 4 (half the shuffles), where lists of 8 take 19
// compare-exchanges to sort a chunk and 8 max and 12 to merge it; or lists of 8 whatever k (0). The grouped router,
// and the rare selection on exact keys, keep lists of 8. gpu_session.sh's steps moe-lists-terms (softmax) and
// moe-four-lists (plain, biased and softmax) time 1 against 0 (NOTES.md).
inline constexpr int kFourLists = 1;

// A lane's best 8 keys of one group's CHUNKS chunks (keys_of(v, keys): chunk v's 8 keys, or with an array of 4 its
// first 4), sorted. Where `half_last` (each group's last chunk cut at its end after 4 experts: the call's groups,
// uniform over the warp), that chunk's 4 keys alone, sorted by a network of 4 and merged in as 8 whose last 4 are
// the least keys (merge_best's first maxima then keep top[0..3]): 4 keys made of 8 (their sigmoids and shifts) and
// 5 compare-exchanges for 19 before the same merge.
template <typename Key, int CHUNKS, typename KeysOf>
__device__ inline void group_lane_keys(KeysOf keys_of, Key (&top)[8], Key& below, bool half_last) {
  if constexpr (kHalfChunks == 0 || CHUNKS == 1) {   // every chunk of 8 (lane_best_keys)
    lane_best_keys<Key, 8, CHUNKS>(keys_of, top, below);
    return;
  }
  lane_best_keys<Key, 8, CHUNKS - 1>(keys_of, top, below);
  if (half_last) {
    Key four[4];
    keys_of(CHUNKS - 1, four);
    sort_network<4>(four);
    const Key eight[8] = {four[0], four[1], four[2], four[3], least_key<Key>(), least_key<Key>(), least_key<Key>(),
                          least_key<Key>()};
    merge_best<8>(top, eight, below);
  } else {
    Key keys[8];
    keys_of(CHUNKS - 1, keys);
    sort_network<8>(keys);
    merge_best<8>(top, keys, below);
  }
}

// The best 8 keys of a token under DeepSeek-V3's groups, in every one of its W lanes: each lane's list of its chunks
// (keys_of; all its experts in one group of L lanes), its group kept or dropped by keep_groups on the group's two
// largest keys (high(key): the 32 bits group_key sums), the lists of dropped groups emptied, then the lanes' lists
// merged.
template <typename Key, int W, int C, typename KeysOf, typename High, typename GroupKey>
__device__ inline void grouped_best_keys(KeysOf keys_of, Key (&top)[8], int lane, int per, int L, int n_group,
                                         int topk_group, High high, GroupKey group_key) {
  Key below;
  lane_best_keys<Key, 8, C>(keys_of, top, below);
  const unsigned none[1] = {0u};   // keep_groups reads keys only where groups are not whole lanes
  const unsigned kept = keep_groups<W, 1>(none, high(top[0]), high(top[1]), lane, 0, per, L, n_group, topk_group,
                                          group_key);
  if (!((kept >> (lane / L)) & 1u)) {
#pragma unroll
    for (int j = 0; j < 8; ++j) top[j] = 0;
  }
  merge_lanes<Key, 8, W>(top, below);
}

// The kept groups of a lane holding G whole groups (n_group = W * G), a bit per group of the lane (bit g: its g-th),
// from each group's key `gk`: its place among all n_group keys (gathered by n_group shuffles), the lowest group
// first among equals.
template <int W, int G>
__device__ inline unsigned keep_lane_groups(const unsigned (&gk)[G], int lane, int topk_group) {
  int ahead[G];
  groups_ahead<W, G, W * G>(gk, W * G, 1, lane * G, ahead);
  unsigned kept = 0u;
#pragma unroll
  for (int g = 0; g < G; ++g) kept |= (unsigned)(ahead[g] < topk_group) << g;
  return kept;
}

// As grouped_best_keys where each lane holds G whole groups (the lane's chunks g * C / G .. (g + 1) * C / G - 1 its
// g-th group's): fewer lanes a token than a group a lane, so fewer merges of lanes' lists, the costliest step where
// groups are small (8 lanes of one chunk each: 3 merges of lists a lane for one chunk's sort). A sorted list a
// group, the group's key from its two largest, the lists of dropped groups emptied and the lane's merged, then the
// lanes'. `half_last`: each group's last chunk is 4 experts (group_lane_keys).
template <typename Key, int W, int C, int G, typename KeysOf, typename High, typename GroupKey>
__device__ inline void grouped_best_keys_lanes(KeysOf keys_of, Key (&top)[8], int lane, int topk_group, High high,
                                               GroupKey group_key, bool half_last) {
  static_assert(G >= 2 && C % G == 0, "whole groups of whole chunks");
  constexpr int CG = C / G;   // chunks a group
  unsigned gk[G];
  Key below = 0;
  Key list[G][8];
#pragma unroll
  for (int g = 0; g < G; ++g) {
    group_lane_keys<Key, CG>([&](int v, auto& keys) { keys_of(g * CG + v, keys); }, list[g], below, half_last);
    gk[g] = group_key(high(list[g][0]), high(list[g][1]));
  }
  const unsigned kept = keep_lane_groups<W, G>(gk, lane, topk_group);
#pragma unroll
  for (int j = 0; j < 8; ++j) top[j] = kept & 1u ? list[0][j] : Key(0);
#pragma unroll
  for (int g = 1; g < G; ++g) {
#pragma unroll
    for (int j = 0; j < 8; ++j) list[g][j] = (kept >> g) & 1u ? list[g][j] : Key(0);
    merge_best<8>(top, list[g], below);
  }
  merge_lanes<Key, 8, W>(top, below);
}

// v[i] (i < N, N 4 or 8) by a tree of selects on i's bits: indexed by a lane's place, the array would go to local
// memory.
template <typename Key, int N>
__device__ inline Key pick(const Key (&v)[N], int i) {
  static_assert(N == 4 || N == 8, "lists of 4 or 8");
  const bool odd = i & 1;
  const Key a0 = odd ? v[1] : v[0], a1 = odd ? v[3] : v[2];
  if constexpr (N == 4) {
    return i & 2 ? a1 : a0;
  } else {
    const Key a2 = odd ? v[5] : v[4], a3 = odd ? v[7] : v[6];
    const Key b0 = i & 2 ? a1 : a0, b1 = i & 2 ? a3 : a2;
    return i & 4 ? b1 : b0;
  }
}

// Word i of a chunk's 16-byte vectors.
template <int CV>
__device__ inline unsigned chunk_word(const uint4 (&raw)[CV], int i) {
  const uint4& q = raw[i / 4];
  return i % 4 == 0 ? q.x : i % 4 == 1 ? q.y : i % 4 == 2 ? q.z : q.w;
}

// How the merge kernel loads a chunk (its launch's vector_rows): element by element, as 16-byte vectors of the whole
// chunk (chunks on multiples of 8 experts, rows 16-byte aligned), or as pieces of 4 experts (chunks on multiples of
// 4, as in groups of 4n experts: 8 bytes a piece for 16-bit logits, 16 for fp32).
enum ChunkLoads { ELEMENTS = 0, VECTORS = 1, PIECES = 2 };

// The chunk of a row's experts e0 .. e0 + 7 as CV 16-byte vectors, 0 from `end` on (the row's end, or its group's).
template <typename T, int CV>
__device__ inline void load_chunk(const T* __restrict__ row, int e0, int end, int loads, uint4 (&raw)[CV]) {
  if (loads == VECTORS) {
#pragma unroll
    for (int i = 0; i < CV; ++i) {
      raw[i] = e0 < end ? __ldg(reinterpret_cast<const uint4*>(row + e0) + i) : make_uint4(0, 0, 0, 0);
    }
  } else if (loads == PIECES) {   // 2 pieces a chunk, each loaded where it starts before `end` (end a multiple of 4)
    if constexpr (sizeof(T) == 2) {
      const uint2 a = e0 < end ? __ldg(reinterpret_cast<const uint2*>(row + e0)) : make_uint2(0, 0);
      const uint2 b = e0 + 4 < end ? __ldg(reinterpret_cast<const uint2*>(row + e0 + 4)) : make_uint2(0, 0);
      raw[0] = make_uint4(a.x, a.y, b.x, b.y);
    } else {
#pragma unroll
      for (int i = 0; i < CV; ++i) {
        raw[i] = e0 + 4 * i < end ? __ldg(reinterpret_cast<const uint4*>(row + e0 + 4 * i)) : make_uint4(0, 0, 0, 0);
      }
    }
  } else {
    unsigned w[4 * CV];
#pragma unroll
    for (int i = 0; i < 4 * CV; ++i) w[i] = 0u;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const int e = e0 + j;
      if constexpr (sizeof(T) == 2) {
        const unsigned h = e < end ? reinterpret_cast<const unsigned short*>(row)[e] : 0u;
        w[j / 2] |= h << (16 * (j % 2));
      } else {
        w[j] = e < end ? __float_as_uint(to_float<T>(row[e])) : 0u;
      }
    }
#pragma unroll
    for (int i = 0; i < CV; ++i) raw[i] = make_uint4(w[4 * i], w[4 * i + 1], w[4 * i + 2], w[4 * i + 3]);
  }
}

// Logit j of a chunk's vectors as a float.
template <typename T, int CV>
__device__ inline float chunk_logit(const uint4 (&raw)[CV], int j) {
  if constexpr (sizeof(T) == 2) {
    const unsigned w = chunk_word<CV>(raw, j / 2);
    return from_bits<T>(j % 2 ? w >> 16 : w & 0xffffu);
  } else {
    return __uint_as_float(chunk_word<CV>(raw, j));
  }
}

// The merge kernel's shift table (make_shifts), by expert (kMergeShiftLanes 0), or with kMergeShiftLanes 1 vector
// h of lane l's chunk v (the lane's experts 8v + 4h .. 8v + 4h + 3, counted from its first) at ((2v + h) * W + l) * 4,
// every lane's side by side as shift_slot lays out the rounds kernel's. By expert, a token's lanes read 16 bytes
// 32 bytes apart (chunks of neighbouring experts: two wavefronts a quarter warp) or a lane's span apart (with groups:
// 8 lanes 32 experts apart on the same banks, eight); side by side, adjacent 16 bytes (one). Side by side: the
// step moe-merge-shifts of gpu_session.sh times it against by expert (NOTES.md has what it found).
inline constexpr int kMergeShiftLanes = 1;

// Where expert e's shift goes: lanes holding chunk c of the row at lane c % W (no groups) or `span` consecutive
// experts each (with groups: lane e / span; where it holds G > 1 groups of `per` experts, CG chunks each from the
// group's first expert, expert o of its g-th group is chunk g * CG + o / 8's o % 8).
template <int W, int ROUTER, int G = 1, int CG = 1>
__device__ inline int merge_shift_slot(int e, int span, int per = 1) {
  if constexpr (kMergeShiftLanes == 0) return e;
  int l, j;
  if constexpr (ROUTER == GROUPED) {
    l = e / span;
    j = e - l * span;
    if constexpr (G > 1) j = j / per * CG * 8 + j % per;
  } else {
    l = (e / 8) % W;
    j = e / (8 * W) * 8 + e % 8;
  }
  return ((j / 4) * W + l) * 4 + j % 4;
}

// Lane `lane`'s chunk v (its first expert e0) of shifts, as merge_shift_slot lays them out: the first N (8, or 4
// for a chunk of 4 experts).
template <int W, int N = 8>
__device__ inline void merge_shifts(const float* shift, int e0, int v, int lane, float (&c)[8]) {
  const float* at0 = kMergeShiftLanes ? shift + (2 * v * W + lane) * 4 : shift + e0;
  const float4 a = *reinterpret_cast<const float4*>(at0);
  c[0] = a.x; c[1] = a.y; c[2] = a.z; c[3] = a.w;
  if constexpr (N == 8) {
    const float* at1 = kMergeShiftLanes ? shift + ((2 * v + 1) * W + lane) * 4 : shift + e0 + 4;
    const float4 b = *reinterpret_cast<const float4*>(at1);
    c[4] = b.x; c[5] = b.y; c[6] = b.z; c[7] = b.w;
  }
}

// Blocks per SM the merge kernel is built for: registers for C chunks of raw logits, the list, a chunk's keys and
// the merges' partners. 16-bit logits fit 64 registers (4 blocks) up to 4 chunks a lane and 80 (3 blocks) up to 8
// without spilling, at every shape the dispatch gives; fp32 ones fit 80 up to 2 chunks, 128 beyond. With G groups
// a lane (a list a group beside the chunks), 16-bit logits fit 80 at 2 chunks, fp32 ones 128.
// With kMergeMoreBlocks 1, the grouped router's selection on exact keys (rare: a bias spanning more than 1) and that
// of fp32 logits without a bias (ties in the top 23 bits) read their chunks again from the row where a lane holds
// one group or none and more than one chunk, so that the raw chunks need not stay in registers through the whole
// quantized selection; and the grouped router's builds take a tier more where they then fit it without spilling
// for sm_90 (every merge build compiled at each tier): 2 groups a lane of one chunk 64 registers (4 blocks) in every
// dtype, one group a lane of 5 or 6 chunks 64 for 16-bit logits, of 3 to 5 chunks 80 (3 blocks) for fp32.
// gpu_session.sh's step moe-merge-blocks times 1 against 0 (NOTES.md has what it found, and why the other routers'
// builds keep 0's blocks).
inline constexpr int kMergeMoreBlocks = 1;

// The experts a lane of the merge kernel holds at most: fp32 logits 32, 16-bit ones 64 for the plain router and 48
// for the others (whose scores' work or sums keep more registers; at 64 the bf16 softmax spills).
__host__ __device__ constexpr int merge_most(int size, int router) {
  return size == 4 ? 32 : router == PLAIN ? 64 : 48;
}

template <typename T, int C, int G, int ROUTER>
__host__ __device__ constexpr int merge_min_blocks() {
  constexpr bool SIXTEEN = sizeof(T) == 2;
  if constexpr (kMergeMoreBlocks != 0 && ROUTER == GROUPED) {
    if constexpr (G == 2 && C == 2) return 4;
    if constexpr (G == 1 && SIXTEEN && C >= 5) return 4;
    if constexpr (G == 1 && !SIXTEEN && C >= 3 && C <= 5) return 3;
  }
  if constexpr (G > 1) return SIXTEEN ? 3 : 2;
  return SIXTEEN ? (C <= 4 ? 4 : 3) : C <= 2 ? 3 : 2;
}

template <typename T, int W, int C, int ROUTER, int G = 1>
__global__ __launch_bounds__(256, merge_min_blocks<T, C, G, ROUTER>()) void topk_router_merge(
    const T* __restrict__ logits, const float* __restrict__ bias, float* __restrict__ weights, int* __restrict__ ids,
    int tokens, int experts, int k, int renormalize, int n_group, int topk_group, int vector_rows) {
  static_assert(W == 1 || W == 2 || W == 4 || W == 8 || W == 16, "a power of two of lanes per token, 16 at most");
  static_assert(C >= 1 && (ROUTER == GROUPED ? C <= 6 : C * 8 <= merge_most(sizeof(T), ROUTER)),
                "at most merge_most experts a lane (the grouped router: 6 chunks), the shapes the dispatch builds");
  constexpr int R = (8 + W - 1) / W;          // round r (the r-th best) goes to lane r % W, slot r / W
  constexpr int CV = 8 * (int)sizeof(T) / 16;   // 16-byte vectors a chunk
  constexpr bool BIAS = ROUTER == BIASED || ROUTER == GROUPED;
  constexpr bool HALVES = !BIAS && sizeof(T) == 2;   // exact 16-bit keys
  constexpr bool FP32 = !BIAS && !HALVES;            // 23-bit keys, checked
  constexpr bool KEY_LOGITS = HALVES && kKeyLogits != 0;   // the chosen logits from their keys
  const int lane = threadIdx.x % W;
  const int per = ROUTER == GROUPED ? experts / n_group : 1;   // experts a group
  const int L = ROUTER == GROUPED ? W / n_group : 1;          // lanes a group
  // The first expert of this lane's chunk v: with groups, C consecutive chunks, so that a lane's experts lie in one
  // group (W / n_group lanes a group) or in G whole groups (one lane a group, G = 1, or fewer lanes than groups), a
  // group's C / G chunks from its first expert, the last cut at the group's end where its experts are not a multiple
  // of 8; otherwise every W-th chunk, so that a token's lanes read neighbouring 16 bytes. end(v): where chunk v's
  // experts end (its group's end, or the row's). (Written per case: lane / L * per + lane % L * 8C for every L made
  // the bf16 builds spill.)
  constexpr int CG = C / G;                        // chunks a group, where a lane holds whole groups
  const bool whole = ROUTER == GROUPED && (G > 1 || L == 1);   // whole groups a lane
  const int first = ROUTER == GROUPED ? (whole ? lane * G * per : lane * C * 8) : lane * 8;
  const auto start = [first, per](int v) {
    return ROUTER == GROUPED ? first + v / CG * per + v % CG * 8 : first + v * 8 * W;
  };
  const auto end = [first, per, whole, experts](int v) { return whole ? first + (v / CG + 1) * per : experts; };

  // Side by side (kMergeShiftLanes), the slots run to 8 * C * W: up to 8 W - 1 past the experts, where lanes' last
  // chunks are cut at the row's end or their group's.
  __shared__ __align__(16) float shift[BIAS ? (kMergeShiftLanes ? 640 : 512) : 4];
  float scale = 0.0f;
  bool quantized = true;
  const int span = whole ? G * per : 8 * C;   // with groups, the experts a lane holds
  if constexpr (BIAS) {
    quantized = make_shifts(bias, experts, shift, scale,
                            [span, per](int e) { return merge_shift_slot<W, ROUTER, G, CG>(e, span, per); });
  }

  const int warps = gridDim.x * (blockDim.x / 32);
  for (int base = warp_first_token<W>(); base < tokens; base += warps * (32 / W)) {
    const int token = base + (threadIdx.x % 32) / W;
    const bool active = token < tokens;
    const T* row = logits + (size_t)(active ? token : 0) * experts;
    uint4 raw[C][CV];
#pragma unroll
    for (int v = 0; v < C; ++v) load_chunk<T, CV>(row, start(v), end(v), vector_rows, raw[v]);

    // Chunk v's keys, as topk_router makes them (its first N of 8: N the array's length, 4 for a group's last chunk
    // cut after 4); 0 past the lane's experts.
    const auto keys_of = [&](int v, auto& keys) {
      constexpr int N = sizeof(keys) / sizeof(keys[0]);
      const int e0 = start(v);
      if constexpr (HALVES) {
#pragma unroll
        for (int p = 0; p < N / 2; ++p) half_keys(chunk_word<CV>(raw[v], p), e0 + 2 * p, keys[2 * p], keys[2 * p + 1]);
      } else {
        float c[8];
        if constexpr (BIAS) merge_shifts<W, N>(shift, e0, v, lane, c);
#pragma unroll
        for (int j = 0; j < N; ++j) {
          const float x = chunk_logit<T, CV>(raw[v], j);
          const unsigned low = 511u - (unsigned)(e0 + j);
          keys[j] = BIAS ? biased_key(x, scale, c[j], low) : top23_key(x, low);
        }
      }
      if (e0 + N > end(v)) {
#pragma unroll
        for (int j = 0; j < N; ++j) keys[j] = e0 + j < end(v) ? keys[j] : 0u;
      }
    };

    // The grouped selection into `top` (8 keys of any type), from the keys keys_of makes, their 32 bits a group key
    // sums (high) and how two of them make it (group_key): grouped_best_keys_lanes where a lane holds G whole groups.
    const auto grouped_top = [&](auto keys_of_v, auto& top, auto high, auto group_key) {
      using Key = std::remove_reference_t<decltype(top[0])>;
      if constexpr (G > 1) {
        grouped_best_keys_lanes<Key, W, C, G>(keys_of_v, top, lane, topk_group, high, group_key, per % 8 != 0);
      } else {
        grouped_best_keys<Key, W, C>(keys_of_v, top, lane, per, L, n_group, topk_group, high, group_key);
      }
    };

    unsigned slot[R];
#pragma unroll
    for (int q = 0; q < R; ++q) slot[q] = 0u;
    float chosen[R] = {};   // with kKeyLogits, 16-bit logits: the slots' experts' logits, from their keys
    float first_x = 0.0f;   // and the token's largest logit, from its best key
    // Slot q of this lane: the expert of the token's (q * W + lane)-th best key, held in the key's low bits as
    // `last` - expert (and with KEY_LOGITS its logit, from the key's top 16 bits). A key of a list of 4 passes
    // through opaque(): without it nvcc 13.0's cicc crashed (a segmentation fault) on the plain 16-bit builds of 8
    // chunks a lane.
    const auto take_slots = [&](const auto& top, unsigned last) {
      constexpr int N = sizeof(top) / sizeof(top[0]);   // the list's keys, 4 or 8
#pragma unroll
      for (int q = 0; q < R; ++q) {
        const unsigned picked = q * W + lane < N ? (unsigned)pick(top, q * W + lane) : 0u;
        const unsigned key = N == 4 ? opaque(picked) : picked;
        slot[q] = last - (key & last);
        if constexpr (KEY_LOGITS) chosen[q] = key_logit<T>(key);
      }
    };
    bool exact = !quantized;
    // The selection on lists of N keys (N 4 or 8: kFourLists) of the quantized keys, into the slots (and `chosen`,
    // `first_x`); `exact` where they cannot decide.
    const auto select = [&](auto lists) {
      constexpr int N = decltype(lists)::value;
      unsigned top[N], below;
      if constexpr (ROUTER == GROUPED) {   // the group's key: its two largest scores' quantized bits summed
        grouped_top(keys_of, top, [](unsigned key) { return key; },
                    [](unsigned a, unsigned b) { return (a >> 9) + (b >> 9); });
      } else {
        best_keys<unsigned, N, W, C, FP32>(keys_of, top, below);
      }
      if constexpr (FP32) {   // two of the top k + 1 sharing their top 23 bits: exact keys decide
        bool alike = false;
#pragma unroll
        for (int j = 0; j < N; ++j) {
          const unsigned next = j + 1 < N ? top[j + 1] : below;
          alike |= j < k && next != 0u && (top[j] >> 9) == (next >> 9);
        }
        exact = alike;
      }
      take_slots(top, HALVES ? 0xffffu : 511u);
      if constexpr (KEY_LOGITS) first_x = key_logit<T>(top[0]);
    };
    if (!exact) {
      if constexpr (kFourLists != 0 && ROUTER != GROUPED) {
        if (k <= 4) {
          select(std::integral_constant<int, 4>{});
        } else {
          select(std::integral_constant<int, 8>{});
        }
      } else {
        select(std::integral_constant<int, 8>{});
      }
    }
    // Exact keys (the score's order key, then 511 - expert) where any of the warp's tokens needs them, on lists of 8
    // whatever k: the selection is rare (fp32 ties in the top 23 bits, wide biases) and made once, not once a list
    // size.
    if constexpr (!HALVES) {
      if (__any_sync(0xffffffffu, exact)) {
        unsigned long long top[8];
        const auto exact_keys_of = [&](int v, auto& keys) {   // as keys_of, its first M
          constexpr int M = sizeof(keys) / sizeof(keys[0]);
          const int e0 = start(v);
          const auto make = [&](const uint4(&chunk)[CV]) {
#pragma unroll
            for (int j = 0; j < M; ++j) {
              const int e = e0 + j;
              const float x = chunk_logit<T, CV>(chunk, j);
              const unsigned o = exact_key<ROUTER>(x, BIAS && e < end(v) ? bias[e] : 0.0f);
              keys[j] = e < end(v) ? ((unsigned long long)o << 32) | (511u - (unsigned)e) : 0ull;
            }
          };
          if constexpr (kMergeMoreBlocks != 0 && G == 1 && C > 1 && (ROUTER == GROUPED || FP32)) {   // read again
            uint4 again[CV];
            load_chunk<T, CV>(row, e0, end(v), vector_rows, again);
            make(again);
          } else {
            make(raw[v]);
          }
        };
        if constexpr (ROUTER == GROUPED) {   // the group's key: the float sum of its two largest scores
          grouped_top(exact_keys_of, top, [](unsigned long long key) { return (unsigned)(key >> 32); },
                      [](unsigned a, unsigned b) { return order_key(from_order_key(a) + from_order_key(b)); });
        } else {
          best_keys<unsigned long long, 8, W, C>(exact_keys_of, top);
        }
        take_slots(top, 511u);
      }
    }

    // Softmax: the row's largest logit (the first chosen expert's) and, where the weights are not renormalised
    // over the k, the sum of exp(logit - largest) over the row's experts (renormalised, the sum cancels).
    float row_max = 0.0f, total = 1.0f;
    if constexpr (ROUTER == SOFTMAX) {
      row_max = KEY_LOGITS ? first_x : top_logit<T, W>(row, slot[0], lane);
      if (!renormalize) {
        const RowTerms row_term(row_max);
        float s = 0.0f;
#pragma unroll
        for (int v = 0; v < C; ++v) {
          float term[8];
#pragma unroll
          for (int j = 0; j < 8; ++j) term[j] = row_term(chunk_logit<T, CV>(raw[v], j));
          if (start(v) + 8 > end(v)) {   // a chunk past the end (its logits read as 0) gives nothing
#pragma unroll
            for (int j = 0; j < 8; ++j) term[j] = start(v) + j < end(v) ? term[j] : 0.0f;
          }
#pragma unroll
          for (int j = 0; j < 8; ++j) s += term[j];
        }
        total = lanes_sum<W>(s);
      }
    }
    write_weights<T, W, ROUTER, KEY_LOGITS>(row, chosen, slot, lane, k, renormalize, row_max, total, active,
                                            weights + (size_t)token * k, ids + (size_t)token * k);
  }
}

// The merge kernel's lanes per token and chunks per lane (W, C) for an expert count, logit size and router, or
// {0, 0} where it does not serve: fp32 logits of more than 128 experts (where 8 or 16 lanes of 32 were slower than
// the rounds on the softmax and about even with a bias: results/moe_routers_merge_ab.json). Up to 32 experts one
// lane holds a token's row (C = its chunks, 1 to 4): a thread a token, no shuffles, where the rounds kernel spreads
// a row of 8 or 16 experts over 4 lanes of 2 or 4. Above, the fewest lanes, 4 to 16, that hold the experts at
// merge_most a lane; C the next of 2, 3, 4, 5, 6, 8.
__host__ inline RouterShape merge_shape(int experts, int size, int router) {
  if (experts <= 32) return {1, (experts + 7) / 8};
  if (size == 4 && experts > 128) return {0, 0};
  const int most = merge_most(size, router);
  int w = 4;
  while (w * most < experts && w < 16) w *= 2;
  constexpr int kCs[] = {2, 3, 4, 5, 6, 8};
  for (int c : kCs) {
    if (experts <= w * c * 8 && c * 8 <= most) return {w, c};
  }
  return {0, 0};
}

// A merge shape of 4 or 8 lanes a token at twice the lanes and half the chunks a lane (rounded up), for calls of
// few tokens (router_launch.h's kMergeWideTokens): their grid gives the SMs few warps, and a token's lanes each
// select over fewer experts. With groups (`per` experts a group, 0 without), where a group's lanes double with
// whole chunks: one group on L lanes (G 1) of groups of a multiple of 8 experts, C even. {0, 0} where there is none.
__host__ inline RouterShape wide_merge_shape(RouterShape s, int per = 0) {
  if (s.w < 4 || s.w > 8 || s.g != 1) return {0, 0};
  if (per != 0 && (per % 8 != 0 || s.p % 2 != 0)) return {0, 0};
  return {2 * s.w, (s.p + 1) / 2};
}

// The grouped router on the merge kernel: W = n_group * L lanes (4 to 16), each lane C chunks of one group (C at
// most 6: a biased score's registers). Groups of a multiple of 8 experts: C = experts a group / 8L, L the fewest
// lanes a group that allow it; groups of 4n experts: one lane a group, C = its experts / 8 rounded up, the last
// chunk cut at the group's end. With least_lanes 4 (router_launch.h's kGroupedMergeLeastLanes), groups of a
// multiple of 8 experts take G = n_group / 4 whole groups a lane on 4 lanes (grouped_best_keys_lanes) where that is
// at most 2 chunks a lane: 8 groups of 8; and with piece_groups 2 (router_launch.h's kGroupedPieceGroupsALane), 8
// groups of 4n experts take 2 a lane where that is at most 6 chunks (groups of 4, 12 and 20: 2, 4 and 6 chunks,
// each group's last cut at its end). (Builds of more chunks a lane spilled: DeepSeek-V3's 8 groups of 32 on 4
// lanes, 8 chunks a lane, even at 128 registers, and with the exact keys' chunks read again from memory.) {0, 0}
// where none serves: other groups, whose chunks would read the shift table's 16-byte vectors off their alignment.
__host__ inline RouterShape grouped_merge_shape(int experts, int n_group, int least_lanes, int piece_groups = 1) {
  const int per = experts / n_group;
  if (per % 8 == 0 && least_lanes <= 4 && n_group >= 8 && n_group % 4 == 0 && n_group / 4 * per / 8 <= 2) {
    return {4, n_group / 4 * per / 8, n_group / 4};   // 8 groups of 8: 4 lanes of 2 groups, a chunk each
  }
  if (per % 8 != 0) {
    const int chunks = (per + 7) / 8;   // a group's
    if (per % 4 == 0 && piece_groups == 2 && least_lanes <= 4 && n_group == 8 && 2 * chunks <= 6) {
      return {4, 2 * chunks, 2};
    }
    return per % 4 == 0 && n_group >= 4 && n_group <= 16 && (n_group & (n_group - 1)) == 0 && chunks <= 6
               ? RouterShape{n_group, chunks}
               : RouterShape{0, 0};
  }
  for (int lanes = 1; lanes <= 16; lanes *= 2) {
    const int w = n_group * lanes;
    if (w < 4 || w > 16 || per % (8 * lanes) != 0) continue;
    if (per / (8 * lanes) <= 6) return {w, per / (8 * lanes)};
  }
  return {0, 0};
}

}  // namespace moe

#ifdef MOE_MERGE   // one instantiation of the merge kernel (-D MOE_MERGE=router, MOE_W, MOE_C, MOE_DTYPE[, MOE_G])
#ifndef MOE_G
#define MOE_G 1
#endif
template __global__ void moe::topk_router_merge<MOE_DTYPE, MOE_W, MOE_C, MOE_MERGE, MOE_G>(
    const MOE_DTYPE*, const float*, float*, int*, int, int, int, int, int, int, int);
#endif
#ifdef MOE_ROUTER   // one instantiation for `kpilot isa analyze` (-D MOE_ROUTER, MOE_W, MOE_P, MOE_DTYPE)
template __global__ void moe::topk_router<MOE_DTYPE, MOE_W, MOE_P, MOE_ROUTER>(const MOE_DTYPE*, const float*, float*,
                                                                              int*, int, int, int, int, int, int, int);
#endif
