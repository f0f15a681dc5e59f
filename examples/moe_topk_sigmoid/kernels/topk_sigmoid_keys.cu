// MoE top-k sigmoid routing for NVIDIA sm_80+ (built for the H200, sm_90) with packed selection keys: a group
// of G = EXPERTS / P lanes per token, P experts per lane: 8 (groups of 8, 16 or 32 lanes: four, two or one token
// per warp), or 16 for 64 and 128 experts at k 4 with 16-bit logits and no bias (groups of 4 or 8: eight or four
// tokens per warp, which takes fewer instructions per token for the rounds; see experts_per_lane()).
//
// Each lane loads P experts (16 bytes per 8 fp16/bf16, 32 per 8 fp32) and makes one 32-bit key per expert whose
// order is the selection order: the score in the high bits, 255 - expert in the low 8 (equal scores: the lower
// expert first). A lane keeps its best N keys (a merge network): two, or three or four where a lane often holds
// more than two of the top k (fewer lanes per token, larger k; see select()). Each of the K rounds takes the
// group's largest best key (one REDUX for a whole warp, two for groups of 16, xor shuffles for groups of 8 or
// 4); the lane holding it moves its next key up, and round r's key goes to the group's slot r in shared
// memory. A lane whose N keys were all taken may hold one more of the top k; when its next key is above the last
// round's, the warp selects again with refills from the keys below the last one taken. The key carries the
// expert, so no lane needs another lane's scores.
//
// A warp's 32 slots hold the round keys of up to 32 / (tokens per warp * K) passes (1 to 8). After them the
// tail writes them all at once: lane l writes round l % K of one token, its expert and its weight, the
// sigmoid of the logit (without a bias and with 16-bit logits the key holds the logit exactly, so it is not
// loaded again; otherwise the logit is re-read, and with a bias the weights are divided by their sum). The
// stores of a tail are contiguous per pass.
//
// The grid may cover the tokens in one tail's passes or be smaller (at most as many blocks as fit,
// "keys_persistent" in topk_sigmoid_cuda.py): blocks then take tail after tail. Each lane loads its next row
// before the current row's selection.
//
// The keys:
// - fp16/bf16 logits, no bias: signed 32 bits made from the bits two at a time: the bits, then the expert
//   twice. They order like the logits among positive ones, which is all a token's top k needs when its k-th
//   logit is positive; otherwise the warp selects again on exact keys (the 16-bit order key, in which -0 and
//   +0 are equal, then the expert twice).
// - a bias spanning less than 1.5 (DeepSeek-V3's is about 0.1): 32 bits. The score sigmoid(x) + bias is moved
//   into [1, 4) by adding 1 - min(bias); the float bits of that, less 1.0's, fit 24 bits and order like the
//   scores, to about 2.4e-7 (the problem lets scores within 1e-6 come in either order).
// - fp32 logits without a bias: signed 32 bits, the top 24 bits of the logit, then the index, with k + 1
//   rounds (where the (k + 1)-th logit is not positive: unsigned, the top 24 bits of the order key). Where no
//   two of those k + 1 keys share their top 24 bits the result is exact (each of the first k is strictly above
//   everything after it); otherwise (equal logits, or within about 2^-15 of each other) the warp selects again
//   with 64-bit keys: the order key, then the index.
// - a bias spanning 1.5 or more: 64 bits, exact: the score's order key, then the index.
//
// Analysis build: nvcc -arch=sm_90 -O3 -cubin -DMOE_EXPERTS=256 -DMOE_K=8 -DMOE_BIAS=0 -DMOE_DTYPE=__nv_bfloat16 topk_sigmoid_keys.cu
// The PyTorch binding (topk_sigmoid_cuda.py) includes this file and instantiates every supported shape.
#ifndef MOE_TOPK_SIGMOID_KEYS_CU   // included by topk_sigmoid_sort.cu and the binding
#define MOE_TOPK_SIGMOID_KEYS_CU
#include <type_traits>

#include "topk_sigmoid_common.cuh"

namespace moe {

constexpr unsigned FULL = 0xffffffffu;

// 1 in the upper half-warp, 0 in the lower, opaque to the compiler (so that products with it stay products).
__device__ inline unsigned half_flag() { return opaque((threadIdx.x >> 4) & 1u); }

// a * b and a * b + c as IMAD (PTX mul/mad, which the compiler does not turn into selects; host C++: the same
// arithmetic).
__device__ inline unsigned mul_u32(unsigned a, unsigned b) {
#ifdef __CUDA_ARCH__
  unsigned r;
  asm("mul.lo.u32 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b));
  return r;
#else
  return a * b;
#endif
}
__device__ inline unsigned mad_u32(unsigned a, unsigned b, unsigned c) {
#ifdef __CUDA_ARCH__
  unsigned r;
  asm("mad.lo.u32 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(c));
  return r;
#else
  return a * b + c;
#endif
}

// The largest key among the G lanes of this lane's group (groups are aligned runs of G lanes): unsigned, or
// signed (the positive fast path of 16-bit logits).
template <int G, typename Key>
__device__ inline std::enable_if_t<sizeof(Key) == 4, Key> group_max(Key v) {
  if constexpr (G == 32) {
    return __reduce_max_sync(FULL, v);
  } else if constexpr (G == 16) {   // two REDUX, each half's keys alone (0 for the other's: keys of 0 or less are none)
    // The halves' masks and the pick are products with 0 or 1 (IMAD, the FMA pipe) where selects would load the
    // ALU pipe, which the rounds' compares and selects already fill (variant imad16 of
    // results/moe_variants_p16_imad16.json).
    const unsigned up = half_flag(), low = 1u - up;
    const Key lo = __reduce_max_sync(FULL, (Key)mul_u32(low, (unsigned)v));
    const Key hi = __reduce_max_sync(FULL, (Key)mul_u32(up, (unsigned)v));
    return (Key)mad_u32(up, (unsigned)hi, mul_u32(low, (unsigned)lo));
  } else {
#pragma unroll
    for (int off = G / 2; off > 0; off >>= 1) v = max(v, __shfl_xor_sync(FULL, v, off));
    return v;
  }
}

template <int G, typename Key>
__device__ inline std::enable_if_t<sizeof(Key) == 8, Key> group_max(Key v) {
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

// Above every key: the start of a selection with refills.
template <typename Key>
__device__ constexpr Key key_top() { return std::is_signed_v<Key> ? Key(0x7fffffff) : ~Key(0); }

// The best two of this lane's keys that are below `below` (0: none; keys of 0 or less are none).
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

// K + EXTRA rounds over the group, refilling a lane's best two from the keys below the last it gave: round r's
// key goes to slot[r] for r < K (every lane of the group writes the same value; a 32-bit slot keeps a 64-bit
// key's low word, the expert's). Returns the last round's key.
template <typename Key, int G, int K, int EXTRA, int P, typename Slot>
__device__ inline Key select_rounds(const Key (&keys)[P], Slot* slot) {
  Key best, second;
  best_two<Key, P>(keys, key_top<Key>(), best, second);
  Key last = key_top<Key>(), top = 0;
  bool dry = best == 0;
#pragma unroll
  for (int r = 0; r < K + EXTRA; ++r) {
    top = group_max<G>(best);
    if (best == top && best != 0) {   // this lane holds the round's key (keys are unique in a group)
      last = best;
      best = second;
      second = 0;
    }
    if (r < K) slot[r] = (Slot)top;
    if (r + 1 < K + EXTRA && __any_sync(FULL, best == 0 && !dry)) {
      if (best == 0 && !dry) {
        best_two<Key, P>(keys, last, best, second);
        dry = best == 0;
      }
    }
  }
  return top;
}

template <typename Key>
__device__ inline Key kmax(Key a, Key b) { return a < b ? b : a; }
template <typename Key>
__device__ inline Key kmin(Key a, Key b) { return a < b ? a : b; }

// The best two of 8 keys by a tournament: pairs, then merges of (best, second) lists.
template <typename Key>
__device__ inline void best_two_of_8(const Key (&k)[8], Key& best, Key& second) {
  Key hi[4], lo[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) { hi[i] = kmax(k[2 * i], k[2 * i + 1]); lo[i] = kmin(k[2 * i], k[2 * i + 1]); }
  const Key h01 = kmax(hi[0], hi[1]), s01 = kmax(kmin(hi[0], hi[1]), kmax(lo[0], lo[1]));
  const Key h23 = kmax(hi[2], hi[3]), s23 = kmax(kmin(hi[2], hi[3]), kmax(lo[2], lo[3]));
  best = kmax(h01, h23);
  second = kmax(kmin(h01, h23), kmax(s01, s23));
}

// Four keys sorted, largest first: sorted pairs merged (x and y, the middle two, compared once).
template <typename Key>
__device__ inline void sorted_four(Key a, Key b, Key c, Key d, Key (&q)[4]) {
  const Key h0 = kmax(a, b), l0 = kmin(a, b), h1 = kmax(c, d), l1 = kmin(c, d);
  const Key x = kmin(h0, h1), y = kmax(l0, l1);
  q[0] = kmax(h0, h1);
  q[1] = kmax(x, y);
  q[2] = kmin(x, y);
  q[3] = kmin(l0, l1);
}

// The top N (1 to 4) of two sorted lists of four, largest first: the j-th largest (from 0) is the largest of c[j],
// d[j] and min(c[a], d[j - 1 - a]) for a = 0 .. j - 1.
template <typename Key, int N>
__device__ inline void merge_top(const Key (&c)[4], const Key (&d)[4], Key (&t)[N]) {
  static_assert(N >= 1 && N <= 4, "merge_top keeps 1 to 4 keys");
  t[0] = kmax(c[0], d[0]);
  if constexpr (N >= 2) t[1] = kmax(kmax(c[1], d[1]), kmin(c[0], d[0]));
  if constexpr (N >= 3) t[2] = kmax(kmax(c[2], d[2]), kmax(kmin(c[1], d[0]), kmin(c[0], d[1])));
  if constexpr (N >= 4) t[3] = kmax(kmax(c[3], d[3]), kmax(kmin(c[2], d[0]), kmax(kmin(c[1], d[1]), kmin(c[0], d[2]))));
}

// The best N (3 or 4) of 8 keys, largest first.
template <typename Key, int N>
__device__ inline void best_of_8(const Key (&k)[8], Key (&t)[N]) {
  static_assert(N == 3 || N == 4, "best_of_8 keeps 3 or 4 keys (best_two_of_8: 2)");
  Key c[4], d[4];
  sorted_four(k[0], k[1], k[2], k[3], c);
  sorted_four(k[4], k[5], k[6], k[7], d);
  merge_top<Key, N>(c, d, t);
}

// The best N (1 to 4) of 16 keys, largest first: the best four of each half, merged.
template <typename Key, int N>
__device__ inline void best_of_16(const Key (&k)[16], Key (&t)[N]) {
  Key c[4], d[4];
  best_of_8<Key, 4>(reinterpret_cast<const Key(&)[8]>(k[0]), c);
  best_of_8<Key, 4>(reinterpret_cast<const Key(&)[8]>(k[8]), d);
  merge_top<Key, N>(c, d, t);
}

// K + EXTRA rounds over the group with each lane's best N keys (2, 3 or 4) and no refills on the way, round r's key
// to slot[r] for r < K; returns the last round's key. A lane whose N keys were all taken may hold one more of the
// top k: if its next key is above the last round's, the selection is done again with refills (select_rounds),
// for the whole warp.
template <typename Key, int G, int K, int EXTRA, int N, int P, typename Slot>
__device__ inline Key select_fast(const Key (&keys)[P], Slot* slot) {
  // With two keys per lane at k 8 (a whole warp per token), 57% of warps have a lane whose two were both taken
  // (iid logits): there the lane's third key comes with its best two (best_of_8, six more min/max) for the check
  // after the rounds, where otherwise it is looked for again among the 8 (about 25 instructions).
  constexpr bool THIRD = P == 8 && N == 2 && K >= 8;
  Key held[N];
  Key third = 0;
  if constexpr (THIRD) {
    Key three[3];
    best_of_8<Key, 3>(keys, three);
    held[0] = three[0];
    held[1] = three[1];
    third = three[2];
  } else if constexpr (P == 16) {
    best_of_16<Key, N>(keys, held);
  } else if constexpr (N == 2) {
    best_two_of_8<Key>(keys, held[0], held[1]);
  } else {
    best_of_8<Key, N>(keys, held);
  }
  const Key lowest = held[N - 1];
  Key top = 0;
#pragma unroll
  for (int r = 0; r < K + EXTRA; ++r) {
    top = group_max<G>(held[0]);
    const bool win = held[0] == top;
#pragma unroll
    for (int i = 0; i + 1 < N; ++i) held[i] = win ? held[i + 1] : held[i];
    held[N - 1] = win ? Key(0) : held[N - 1];
    if (r < K) slot[r] = (Slot)top;
  }
  const bool spent = held[0] == 0;
  if constexpr (THIRD) {
    if (__any_sync(FULL, spent && third > top)) top = select_rounds<Key, G, K, EXTRA, P>(keys, slot);
  } else if (__any_sync(FULL, spent)) {
    bool wrong = false;
    if (spent) {
      Key next, unused;
      best_two<Key, P>(keys, lowest, next, unused);
      wrong = next > top;
    }
    if (__any_sync(FULL, wrong)) top = select_rounds<Key, G, K, EXTRA, P>(keys, slot);
  }
  return top;
}

// The selection for a group of G lanes. Each lane keeps its best two keys where a lane seldom holds three of the
// top k (a whole warp per token: 3.3% of tokens for 256 experts, k 8; 16 lanes and k 4: 2% of warps), its best
// four where k is as large as the group (64 experts, k 8: with three, 18% of warps would select again; with
// four, 1.2%), and its best three otherwise (64 experts, k 4; 128 experts, k 8, where 23% of warps would
// select again with two, and 1.3% do with three). With 16 experts per lane: three at k 4 for 128 experts (17.6% of
// warps look for a lane's fourth key, 0.5% select again), four for 64 (a lane may hold all four, never more).
// The shares are for iid logits.
template <typename Key, int G, int K, int EXTRA = 0, int P, typename Slot>
__device__ inline Key select(const Key (&keys)[P], Slot* slot) {
  constexpr int N = G == 32 || 4 * K <= G ? 2 : K >= G ? 4 : 3;
  return select_fast<Key, G, K, EXTRA, N, P>(keys, slot);
}

// The index bytes of experts e0 .. e0 + 4W - 1 (255 - expert: the lower expert first among equal scores), four per
// word, kept in registers across passes (the asm keeps the compiler from computing them again in every pass).
template <int W>
__device__ inline void index_bytes(int e0, unsigned (&idx)[W]) {
  const unsigned b = (255u - (unsigned)e0) * 0x01010101u;
#pragma unroll
  for (int i = 0; i < W; ++i) {
    idx[i] = b - (0x03020100u + 0x04040404u * i);
    asm volatile("" : "+r"(idx[i]));
  }
}

// Keys of 2W consecutive fp16 or bf16 values (W words of two; idx from index_bytes), two per word: [the
// word's 16-bit half, 255 - expert, 255 - expert].
template <int W>
__device__ inline void keys_of_words(const unsigned (&words)[W], const unsigned (&idx)[W / 2], unsigned (&keys)[2 * W]) {
#pragma unroll
  for (int p = 0; p < W; ++p) {
    const unsigned k2 = words[p];
    const unsigned ib = idx[p / 2], s = 4u + 2u * (p % 2);
    keys[2 * p] = __byte_perm(k2, ib, 0x1000u | (s << 4) | s);
    keys[2 * p + 1] = __byte_perm(k2, ib, 0x3200u | ((s + 1) << 4) | (s + 1));
  }
}

// Exact keys of 2W fp16 or bf16 logits: the 16-bit order keys (half_order_keys), then the expert.
template <int W>
__device__ inline void keys_of_halves(const unsigned (&words)[W], const unsigned (&idx)[W / 2], unsigned (&keys)[2 * W]) {
  unsigned ordered[W];
#pragma unroll
  for (int p = 0; p < W; ++p) ordered[p] = half_order_keys(words[p]);
  keys_of_words(ordered, idx, keys);
}

// Signed keys of P fp16 or bf16 logits, the words' halves then the expert (keys_of_words), which order like the
// logits where those are positive: every positive logit's key is at least POSITIVE_KEY and above every key of a
// zero or a negative logit (those are 0 or less: none, to the selection). A selection whose last key is at least
// POSITIVE_KEY chose only positive logits and is exact.
constexpr int POSITIVE_KEY = 0x00010000;

// An exact key as the positive keys hold it: the logit's bits, then the expert.
__device__ inline unsigned positive_form(unsigned key) {
  const unsigned k = key >> 16;
  const unsigned bits = k >= 0x8000u ? k - 0x8000u : (0x10000u - k);   // 0x8000 | magnitude for negative keys
  return (bits << 16) | (key & 0xffffu);
}

// The exact 64-bit key of a score: its order key, then 255 - expert.
__device__ inline unsigned long long exact_key(float score, int expert) {
  return ((unsigned long long)order_key(score) << 32) | (255u - (unsigned)expert);
}

// The signed 32-bit key of an fp32 logit: its top 24 bits, then the index byte. Among positive logits it orders
// like them where no two share those bits.
__device__ inline int top24_key(float x, unsigned index_byte) {
  return (int)((__float_as_uint(x) & 0xffffff00u) | index_byte);
}

// The least bias over the warp (each lane holding P values; REDUX through order keys), and whether the bias is
// too wide for 32-bit keys (spanning 1.5 or more).
template <int P>
__device__ inline bool bias_low(const float (&b)[P], float& lo) {
  float l = b[0], h = b[0];
#pragma unroll
  for (int j = 1; j < P; ++j) { l = fminf(l, b[j]); h = fmaxf(h, b[j]); }
  lo = from_order_key(__reduce_min_sync(FULL, order_key(l)));
  h = from_order_key(__reduce_max_sync(FULL, order_key(h)));
  return !(h - lo < 1.5f);
}

// What moves an expert's score sigmoid(x) + b into [1, 4) where the bias is narrow: 1 - lo + b, at least 1
// whatever the rounding.
__device__ inline float bias_shift(float b, float lo) { return fmaxf((1.0f - lo) + b, 1.0f); }

// The 32-bit key of a score in [1, 4): its float bits less 1.0's, shifted by 8, then the index byte (0x3f800000 << 8
// is 2^31).
__device__ inline unsigned biased_key(float score, unsigned index_byte) {
  return __float_as_uint(score) * 256u + (0x80000000u + index_byte);
}

// The row a group past the last token selects on (it writes nothing): logits j * 256 + lane + 1 for its j-th
// expert, positive, distinct, and with each lane's largest above every other lane's second, so the top k comes
// from k lanes, one each. Zeros would make every expert equal, the top k one lane's, and the warp select
// again on exact keys with refills, the token in the same warp (or block) waiting.
template <typename T, int P, int V>
__device__ inline void past_the_end(int lane_in_group, uint4 (&raw)[V]) {
  static_assert(V * 16 == P * (int)sizeof(T), "a row is V 16-byte vectors");
  T* e = reinterpret_cast<T*>(raw);
#pragma unroll
  for (int j = 0; j < P; ++j) {
    const float x = (float)(j * 256 + lane_in_group + 1);
    if constexpr (std::is_same_v<T, float>) {
      e[j] = x;
    } else if constexpr (std::is_same_v<T, __half>) {
      e[j] = __float2half_rn(x);
    } else {
      e[j] = __float2bfloat16_rn(x);
    }
  }
}

// Experts per lane: 16 for 64 and 128 experts at k 4 with 16-bit logits and no bias (groups of 4 or 8 lanes: a
// round's shuffles serve twice the tokens), 8 otherwise. At k 8 a lane of 16 experts more often holds several of
// the top k, and the 64 registers its rows take cost the occupancy the rounds save; with a bias the shifts spill.
// (Variants p16 and p16b of results/moe_variants_p16_imad16.json.)
template <typename T, int EXPERTS, int K, bool HAS_BIAS>
__host__ __device__ constexpr int experts_per_lane() {
  return (EXPERTS == 64 || EXPERTS == 128) && K == 4 && sizeof(T) == 2 && !HAS_BIAS ? 16 : 8;
}

constexpr int WARPS_PER_BLOCK = 4;   // blocks of 128 threads

// Tokens per pass of a warp (32 lanes, EXPERTS / experts_per_lane of them per token) and of a block.
template <typename T, int EXPERTS, int K, bool HAS_BIAS>
__host__ __device__ constexpr int tokens_per_warp() { return 32 / (EXPERTS / experts_per_lane<T, EXPERTS, K, HAS_BIAS>()); }
template <typename T, int EXPERTS, int K, bool HAS_BIAS>
__host__ __device__ constexpr int tokens_per_pass() { return WARPS_PER_BLOCK * tokens_per_warp<T, EXPERTS, K, HAS_BIAS>(); }

// Passes whose results one tail writes, at most: a warp's 32 lanes hold 32 round keys.
template <typename T, int EXPERTS, int K, bool HAS_BIAS>
constexpr int max_passes() { return 32 / (tokens_per_warp<T, EXPERTS, K, HAS_BIAS>() * K); }

// `passes` (1 to max_passes) passes of each warp over its tokens store their round keys in shared memory; then
// all 32 lanes write the weights and ids of those tokens at once, lane l the round l % K of a token.
// Blocks of 128 threads per SM the build is made for: 12 (40 registers) for 16-bit logits without a bias, where
// that keeps the index bytes in registers across passes; 8 (64 registers) for the others, which spill at 40,
// and for 16 experts per lane (two rows of 32 bytes, the current and the next, and 16 keys).
template <typename T, int EXPERTS, int K, bool HAS_BIAS>
constexpr int min_blocks() {
  return experts_per_lane<T, EXPERTS, K, HAS_BIAS>() == 16 ? 8 : !HAS_BIAS && sizeof(T) == 2 ? 12 : 8;
}

template <typename T, int EXPERTS, int K, bool HAS_BIAS>
__global__ __launch_bounds__(32 * WARPS_PER_BLOCK, min_blocks<T, EXPERTS, K, HAS_BIAS>()) void topk_sigmoid_keys(const T* __restrict__ logits, const float* __restrict__ bias,
                                                         float* __restrict__ weights, int* __restrict__ ids,
                                                         int tokens, int passes) {
  constexpr int P = experts_per_lane<T, EXPERTS, K, HAS_BIAS>();
  constexpr int G = EXPERTS / P;
  constexpr int PER_WARP = tokens_per_warp<T, EXPERTS, K, HAS_BIAS>();
  constexpr int WARPS = WARPS_PER_BLOCK;
  static_assert(EXPERTS == 64 || EXPERTS == 128 || EXPERTS == 256, "EXPERTS must be 64, 128 or 256");
  static_assert(K >= 1 && K <= G && K <= 8, "K must be 1..EXPERTS/P and at most 8");
  __shared__ unsigned long long slot_store[WARPS][32];   // round keys of this tail's tokens, per warp
  const int lane = threadIdx.x % 32;
  const int warp = threadIdx.x / 32;
  const int sub = lane % G;
  const int e0 = sub * P;
  // Passes over the tokens are counted per block (values the compiler knows are the same for the whole warp,
  // so the warp-wide reductions need no fallback for diverged lanes); a warp past the last token still takes
  // part, on rows of its own (past_the_end), and writes nothing. One pass of a block: WARPS * PER_WARP
  // consecutive tokens.
  constexpr int PER_PASS = tokens_per_pass<T, EXPERTS, K, HAS_BIAS>();
  const int span = PER_PASS * passes;   // the block's tokens per tail
  const int step = gridDim.x * span;
  const int in_pass = warp * PER_WARP + lane / G;   // this lane's token within a pass

  // With a bias: its shift into [1, 4) and whether it is too wide for 32-bit keys, once per warp.
  bool wide = false;
  float shift[P];                // 1 - min(bias) + bias[e]
  if constexpr (HAS_BIAS) {
    float b[P];
    load_row<float, P>(bias + e0, b);
    float lo;
    wide = bias_low<P>(b, lo);
#pragma unroll
    for (int j = 0; j < P; ++j) shift[j] = bias_shift(b[j], lo);
  }
  unsigned* const slots32 = reinterpret_cast<unsigned*>(slot_store[warp]);
  unsigned long long* const slots64 = slot_store[warp];

  // Each pass's row is loaded during the previous pass's selection: its token and address move by a pass, or
  // to the next tail's first pass. A row is V 16-byte vectors (1 for 16-bit logits, 2 for fp32).
  constexpr int V = P * (int)sizeof(T) / 16;
  constexpr bool HALVES = !HAS_BIAS && sizeof(T) == 2;   // keys straight from the bits
  int next_token = blockIdx.x * span + in_pass;
  const uint4* next_row = reinterpret_cast<const uint4*>(logits + (size_t)next_token * EXPERTS + e0);
  uint4 next[V];
  const auto load_next = [&]() {
#pragma unroll
    for (int v = 0; v < V; ++v) next[v] = next_token < tokens ? __ldg(next_row + v) : make_uint4(0u, 0u, 0u, 0u);
  };
  load_next();
  unsigned idx[P / 4];
  if constexpr (HALVES) index_bytes(e0, idx);

  for (int base = blockIdx.x * span; base < tokens; base += step) {
    const int nb = min(passes, (tokens - base + PER_PASS - 1) / PER_PASS);
    for (int b = 0; b < nb; ++b) {
      const int slot = (b * PER_WARP + lane / G) * K;
      uint4 raw[V];
#pragma unroll
      for (int v = 0; v < V; ++v) raw[v] = next[v];
      const int ahead = b + 1 < nb ? PER_PASS : step - b * PER_PASS;
      next_token += ahead;
      next_row += (ptrdiff_t)ahead * (EXPERTS * (int)sizeof(T) / 16);
      load_next();
      if (base + b * PER_PASS + warp * PER_WARP + PER_WARP > tokens && base + b * PER_PASS + in_pass >= tokens) {
        past_the_end<T, P>(sub, raw);   // a group past the last token (the warp's test first: the same for all lanes)
      }
      if constexpr (HALVES) {
        unsigned words[P / 2];
#pragma unroll
        for (int v = 0; v < V; ++v) {
          words[4 * v] = raw[v].x;
          words[4 * v + 1] = raw[v].y;
          words[4 * v + 2] = raw[v].z;
          words[4 * v + 3] = raw[v].w;
        }
        int fast[P];
        keys_of_words(words, idx, reinterpret_cast<unsigned(&)[P]>(fast));
        const int last = select<int, G, K>(fast, slots32 + slot);
        if (__any_sync(FULL, last < POSITIVE_KEY)) {   // a zero or a negative logit in some token's top k
          unsigned keys[P];
          keys_of_halves(words, idx, keys);
          select<unsigned, G, K>(keys, slots32 + slot);
          __syncwarp();
          const int r = lane % G;
          if (r < K) slots32[slot + r] = positive_form(slots32[slot + r]);
        }
      } else {
        float x[P];
        const T* e = reinterpret_cast<const T*>(raw);
#pragma unroll
        for (int j = 0; j < P; ++j) x[j] = to_float<T>(e[j]);
        if constexpr (!HAS_BIAS) {   // fp32: 24 bits of the logit, then the expert; exact where no two differ
          int fast[P];                // only below those bits among the top k + 1
#pragma unroll
          for (int j = 0; j < P; ++j) fast[j] = top24_key(x[j], 255u - (unsigned)(e0 + j));
          const int fast_after = select<int, G, K, 1>(fast, slots32 + slot);
          unsigned after = (unsigned)fast_after;
          if (__any_sync(FULL, fast_after < 0x100)) {   // a zero or a negative logit in some token's top k + 1
            unsigned keys[P];                        // the order key's 24 bits
#pragma unroll
            for (int j = 0; j < P; ++j) keys[j] = (order_key(x[j]) & 0xffffff00u) | (255u - (unsigned)(e0 + j));
            after = select<unsigned, G, K, 1>(keys, slots32 + slot);
          }
          __syncwarp();
          const int r = lane % G;
          const bool alike = r < K && (slots32[slot + r] >> 8) == ((r + 1 < K ? slots32[slot + r + 1] : after) >> 8);
          if (__any_sync(FULL, alike)) {   // select again on exact 64-bit keys; the slots keep the expert
            unsigned long long exact[P];
#pragma unroll
            for (int j = 0; j < P; ++j) exact[j] = exact_key(x[j], e0 + j);
            select<unsigned long long, G, K>(exact, slots32 + slot);
          }
        } else if (!wide) {   // 32-bit keys of the biased score: (its bits - 1.0's) << 8, then the expert
          unsigned keys[P];
#pragma unroll
          for (int j = 0; j < P; ++j) {
            const float s = sigmoid(x[j]) + shift[j];   // in [1, 4)
            keys[j] = biased_key(s, 255u - (unsigned)(e0 + j));
          }
          select<unsigned, G, K>(keys, slots32 + slot);
        } else {       // 64-bit keys of a score with a wide bias
          unsigned long long keys[P];
#pragma unroll
          for (int j = 0; j < P; ++j) keys[j] = exact_key(sigmoid(x[j]) + shift[j], e0 + j);
          select<unsigned long long, G, K>(keys, slots64 + slot);
        }
      }
    }
    __syncwarp();

    // The tail: lane l writes round l % K of the token whose keys are in slots l - l % K ...
    const int token = base + (lane / (PER_WARP * K)) * PER_PASS + warp * PER_WARP + (lane / K) % PER_WARP;
    const bool writes = lane < nb * PER_WARP * K && token < tokens;
    const unsigned long long key = !writes ? 0ull : wide ? slots64[lane] : (unsigned long long)slots32[lane];
    const int expert = 255 - (int)(key & 0xffu);
    float w = 0.0f;
    if (writes) {   // 16-bit logits without a bias: the key holds the logit exactly, no second load
      float x;
      if constexpr (HALVES) {
        x = from_bits<T>((unsigned)key >> 16);
      } else {
        x = to_float<T>(logits[(size_t)token * EXPERTS + expert]);
      }
      w = sigmoid(x);
    }
    if constexpr (HAS_BIAS) w = w / group_sum<K>(w);
    if (writes) {
      weights[(size_t)token * K + lane % K] = w;
      ids[(size_t)token * K + lane % K] = expert;
    }
    __syncwarp();
  }
}

}  // namespace moe

#if defined(MOE_EXPERTS) && !defined(MOE_SORT)   // one instantiation for `kpilot isa analyze` (-D MOE_EXPERTS, MOE_K, MOE_BIAS, MOE_DTYPE)
template __global__ void moe::topk_sigmoid_keys<MOE_DTYPE, MOE_EXPERTS, MOE_K, (bool)MOE_BIAS>(const MOE_DTYPE*, const float*,
                                                                                    float*, int*, int, int);
#endif
#endif  // MOE_TOPK_SIGMOID_KEYS_CU
