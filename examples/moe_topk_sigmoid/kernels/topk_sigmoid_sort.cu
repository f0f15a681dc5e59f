// MoE top-k sigmoid routing for NVIDIA sm_80+ by sorting networks in each thread: EXPERTS / PT threads per token
// (consecutive lanes), PT experts per thread (16, 32 or 64; topk_sigmoid_cuda.py picks by shape), fp16/bf16 logits
// without a bias. A thread loads its PT logits at once (16-byte vectors, its token's lanes taking neighbouring
// ones), makes one 32-bit key per expert (the logit's bits, then 255 - expert: equal logits, the lower expert
// first) and keeps its best K keys sorted: each vector's eight keys are sorted by a network (19 compare-exchanges
// at k 8; two networks of four at k 4) and merged into the list by the bitonic top-k merge (the larger of the list
// and the reversed chunk, then a bitonic sorter). The token's lanes merge their lists through xor shuffles, and
// its first lane writes the weights and ids. The selection is integer min and max alone (VIMNMX): no REDUX, no
// shared memory, no rounds. Where a token has fewer than K positive logits (the signed keys order only those
// exactly) the warp selects again on exact keys (the 16-bit order keys), the row loaded again.
//
// Analysis build: nvcc -arch=sm_90 -O3 -cubin -DMOE_SORT -DMOE_EXPERTS=128 -DMOE_K=8 -DMOE_PT=64 -DMOE_DTYPE=__nv_bfloat16 topk_sigmoid_sort.cu
#pragma once
#include "topk_sigmoid_keys.cu"

namespace moe {

// Compare-exchange, largest first.
template <typename Key>
__device__ inline void cx(Key& a, Key& b) {
  const Key hi = max(a, b);
  b = min(a, b);
  a = hi;
}

// The N keys sorted, largest first (N 4 or 8: 5 or 19 compare-exchanges).
template <int N, typename Key>
__device__ inline void sort_network(Key (&v)[N]) {
  static_assert(N == 4 || N == 8, "networks of 4 or 8");
  if constexpr (N == 4) {
    cx(v[0], v[1]); cx(v[2], v[3]);
    cx(v[0], v[2]); cx(v[1], v[3]);
    cx(v[1], v[2]);
  } else {
    cx(v[0], v[2]); cx(v[1], v[3]); cx(v[4], v[6]); cx(v[5], v[7]);
    cx(v[0], v[4]); cx(v[1], v[5]); cx(v[2], v[6]); cx(v[3], v[7]);
    cx(v[0], v[1]); cx(v[2], v[3]); cx(v[4], v[5]); cx(v[6], v[7]);
    cx(v[2], v[4]); cx(v[3], v[5]);
    cx(v[1], v[4]); cx(v[3], v[6]);
    cx(v[1], v[2]); cx(v[3], v[4]); cx(v[5], v[6]);
  }
}

// The best N of two sorted lists of N, sorted, into `top`: the larger of top[j] and c[N - 1 - j] is a bitonic
// sequence of them, which a bitonic sorter orders.
template <int N, typename Key>
__device__ inline void merge_best(Key (&top)[N], const Key (&c)[N]) {
#pragma unroll
  for (int j = 0; j < N; ++j) top[j] = max(top[j], c[N - 1 - j]);
#pragma unroll
  for (int d = N / 2; d > 0; d /= 2) {
#pragma unroll
    for (int i = 0; i < N; ++i) {
      if ((i / d) % 2 == 0) cx(top[i], top[i + d]);
    }
  }
}

// The best K keys of a token, sorted, in every one of its TPT lanes: this lane's V vectors of eight 16-bit logits
// (vector v holds experts (v * TPT + t) * 8 ..., index bytes from `base`), then the lanes' lists merged. Keys:
// int, the logit's bits then the expert twice (keys_of_words: exact among positive logits, whose keys are at
// least POSITIVE_KEY and above all others); unsigned, the exact order keys (keys_of_halves).
template <typename Key, int K, int TPT, int V>
__device__ inline void best_keys(const uint4 (&raw)[V], unsigned base, Key (&top)[K]) {
#pragma unroll
  for (int v = 0; v < V; ++v) {
    const unsigned words[4] = {raw[v].x, raw[v].y, raw[v].z, raw[v].w};
    const unsigned b = base - 8u * TPT * v * 0x01010101u;
    const unsigned idx[2] = {b - 0x03020100u, b - 0x07060504u};
    Key keys[8];
    if constexpr (std::is_signed_v<Key>) {
      keys_of_words(words, idx, reinterpret_cast<unsigned(&)[8]>(keys));
    } else {
      keys_of_halves(words, idx, keys);
    }
    if constexpr (K == 8) {
      sort_network<8>(keys);
      if (v == 0) {
#pragma unroll
        for (int j = 0; j < 8; ++j) top[j] = keys[j];
      } else {
        merge_best<8>(top, keys);
      }
    } else {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        Key four[4] = {keys[4 * h], keys[4 * h + 1], keys[4 * h + 2], keys[4 * h + 3]};
        sort_network<4>(four);
        if (v == 0 && h == 0) {
#pragma unroll
          for (int j = 0; j < 4; ++j) top[j] = four[j];
        } else {
          merge_best<4>(top, four);
        }
      }
    }
  }
#pragma unroll
  for (int d = 1; d < TPT; d *= 2) {
    Key other[K];
#pragma unroll
    for (int j = 0; j < K; ++j) other[j] = __shfl_xor_sync(FULL, top[j], d);
    merge_best<K>(top, other);
  }
}

// The logit's 16 bits of an exact key's order key (half_order_keys): 0x8000 + magnitude for positive values,
// 0x8000 - magnitude for negative ones.
__device__ inline unsigned bits_of_order16(unsigned o) {
  return o >= 0x8000u ? o - 0x8000u : 0x8000u | (0x8000u - o);
}

template <typename T, int EXPERTS, int K, int PT>
__global__ __launch_bounds__(128, 8) void topk_sigmoid_sort(const T* __restrict__ logits, float* __restrict__ weights,
                                                          int* __restrict__ ids, int tokens) {
  static_assert(sizeof(T) == 2, "16-bit logits");
  static_assert(K == 4 || K == 8, "K must be 4 or 8");
  static_assert(PT % 8 == 0 && EXPERTS % PT == 0 && EXPERTS / PT <= 32, "PT: a multiple of 8 dividing EXPERTS");
  constexpr int TPT = EXPERTS / PT;   // threads per token
  constexpr int V = PT / 8;           // 16-byte vectors per thread
  const int t = threadIdx.x % TPT;
  const int token = (blockIdx.x * blockDim.x + threadIdx.x) / TPT;
  const bool live = token < tokens;
  // A thread's vectors are v * TPT + t of the row (neighbouring lanes, neighbouring 16 bytes); threads past the
  // last token read its row and write nothing (the shuffles need every lane).
  const uint4* row = reinterpret_cast<const uint4*>(logits + (size_t)(live ? token : tokens - 1) * EXPERTS) + t;
  uint4 raw[V];
#pragma unroll
  for (int v = 0; v < V; ++v) raw[v] = __ldg(row + v * TPT);
  // Index bytes of vector v's experts (v * TPT + t) * 8 + j: one base, less a constant per vector.
  const unsigned base = (255u - 8u * (unsigned)t) * 0x01010101u;
  unsigned top[K];
  best_keys<int, K, TPT>(raw, base, reinterpret_cast<int(&)[K]>(top));
  // Exact where every token's K-th key is a positive logit's; otherwise the warp selects again on exact keys,
  // the row loaded again (volatile loads: the compiler would keep the first ones' PT / 2 registers all along).
  const bool exact = __any_sync(FULL, (int)top[K - 1] < POSITIVE_KEY);
  if (exact) {
#pragma unroll
    for (int v = 0; v < V; ++v) {
      asm volatile("ld.volatile.global.v4.u32 {%0, %1, %2, %3}, [%4];"
                   : "=r"(raw[v].x), "=r"(raw[v].y), "=r"(raw[v].z), "=r"(raw[v].w) : "l"(row + v * TPT));
    }
    best_keys<unsigned, K, TPT>(raw, base, top);
  }
  if (live && t == 0) {
    float w[K];
    int e[K];
#pragma unroll
    for (int j = 0; j < K; ++j) {
      // The key's bits through an opaque move: without it nvcc 13's cicc crashes (segmentation fault) on a
      // translation unit that holds this kernel and the packed-key one.
      unsigned h = top[j] >> 16;
      asm("mov.b32 %0, %0;" : "+r"(h));
      w[j] = sigmoid(from_bits<T>(exact ? bits_of_order16(h) : h));
      e[j] = 255 - (int)(top[j] & 0xffu);
    }
    float4* wp = reinterpret_cast<float4*>(weights + (size_t)token * K);
    int4* ip = reinterpret_cast<int4*>(ids + (size_t)token * K);
#pragma unroll
    for (int q = 0; q < K / 4; ++q) {
      wp[q] = make_float4(w[4 * q], w[4 * q + 1], w[4 * q + 2], w[4 * q + 3]);
      ip[q] = make_int4(e[4 * q], e[4 * q + 1], e[4 * q + 2], e[4 * q + 3]);
    }
  }
}

}  // namespace moe

#ifdef MOE_SORT   // one instantiation for `kpilot isa analyze` (-D MOE_SORT, MOE_EXPERTS, MOE_K, MOE_PT, MOE_DTYPE)
template __global__ void moe::topk_sigmoid_sort<MOE_DTYPE, MOE_EXPERTS, MOE_K, MOE_PT>(const MOE_DTYPE*, float*, int*, int);
#endif
