// Helpers of the MoE routing kernels (topk_sigmoid_warp.cu, topk_sigmoid_keys.cu, topk_sigmoid_sort.cu,
// topk_router.cu).
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

#include <type_traits>

#ifdef MOE_EXPERTS   // an analysis build of one instantiation (`kpilot isa analyze ... -D MOE_EXPERTS=256`)
#ifndef MOE_K
#define MOE_K 8
#endif
#ifndef MOE_BIAS
#define MOE_BIAS 0
#endif
#ifndef MOE_DTYPE
#define MOE_DTYPE float
#endif
#endif

namespace moe {

template <typename T> __device__ inline float to_float(T v);
template <> __device__ inline float to_float<float>(float v) { return v; }
template <> __device__ inline float to_float<__half>(__half v) { return __half2float(v); }
template <> __device__ inline float to_float<__nv_bfloat16>(__nv_bfloat16 v) { return __bfloat162float(v); }

// Unsigned keys that order like the floats (-0.0 first made +0.0).
__device__ inline unsigned order_key(float f) {
  const unsigned b = __float_as_uint(f + 0.0f);
  return b ^ ((b >> 31) ? 0xffffffffu : 0x80000000u);
}

// The float of an order key (order_key's inverse).
__device__ inline float from_order_key(unsigned k) {
  return __uint_as_float((k >> 31) ? (k ^ 0x80000000u) : ~k);
}

// The fp16 or bf16 logit of its bits.
template <typename T>
__device__ inline float from_bits(unsigned h) {
  if constexpr (std::is_same_v<T, __half>) {
    return __half2float(__ushort_as_half((unsigned short)h));
  } else {
    return __uint_as_float(h << 16);
  }
}

// v through a move the compiler cannot see into (so that it is not folded into what uses it; host C++: v).
__device__ inline unsigned opaque(unsigned v) {
#ifdef __CUDA_ARCH__
  asm("mov.b32 %0, %0;" : "+r"(v));
#endif
  return v;
}

// 0xffff in each 16-bit half whose sign bit is set (PTX prmt's sign-replicating selectors, which __byte_perm
// does not pass through).
__device__ inline unsigned sign_halves(unsigned w) {
#ifdef __CUDA_ARCH__
  unsigned m;
  asm("prmt.b32 %0, %1, 0, 0xbb99;" : "=r"(m) : "r"(w));
  return m;
#else   // host C++ (emulation/simt_host.h)
  return (w & 0x8000u ? 0xffffu : 0u) | (w & 0x80000000u ? 0xffff0000u : 0u);
#endif
}

// The order keys of two fp16 or bf16 values: 0x8000 + magnitude for positive halves, 0x8000 - magnitude for
// negative ones, so -0 and +0 share 0x8000. For a negative half (w | 0x8000) ^ 0xffff is 0x7fff - magnitude,
// one below its key; no half carries into the next.
__device__ inline unsigned half_order_keys(unsigned w) {
  const unsigned m = sign_halves(w);
  return ((w | 0x80008000u) ^ m) + (m & 0x00010001u);
}

// The logit's 16 bits of an exact key's order key (half_order_keys): 0x8000 + magnitude for positive values,
// 0x8000 - magnitude for negative ones.
__device__ inline unsigned bits_of_order16(unsigned o) {
  return o >= 0x8000u ? o - 0x8000u : 0x8000u | (0x8000u - o);
}

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
// sequence of them, which a bitonic sorter orders. With TRACK, `below` also takes the largest key left out.
template <int N, bool TRACK = false, typename Key>
__device__ inline void merge_best(Key (&top)[N], const Key (&c)[N], Key& below) {
#pragma unroll
  for (int j = 0; j < N; ++j) {
    if constexpr (TRACK) below = max(below, min(top[j], c[N - 1 - j]));
    top[j] = max(top[j], c[N - 1 - j]);
  }
#pragma unroll
  for (int d = N / 2; d > 0; d /= 2) {
#pragma unroll
    for (int i = 0; i < N; ++i) {
      if ((i / d) % 2 == 0) cx(top[i], top[i + d]);
    }
  }
}

// The least key of its type: the start of a tracked maximum, and what a lane with no chunk to give contributes.
template <typename Key>
__device__ constexpr Key least_key() {
  return std::is_signed_v<Key> ? Key(~(std::make_unsigned_t<Key>(~0ull) >> 1)) : Key(0);
}

// A lane's best K keys, sorted: keys_of(v, keys) makes the eight keys of this lane's v-th chunk of experts, which
// the networks merge into the list. With TRACK, `below` is the lane's best key left out.
template <typename Key, int K, int CHUNKS, bool TRACK = false, typename KeysOf>
__device__ inline void lane_best_keys(KeysOf keys_of, Key (&top)[K], Key& below) {
  below = least_key<Key>();
#pragma unroll
  for (int v = 0; v < CHUNKS; ++v) {
    Key keys[8];
    keys_of(v, keys);
    if constexpr (K == 8) {
      sort_network<8>(keys);
      if (v == 0) {
#pragma unroll
        for (int j = 0; j < 8; ++j) top[j] = keys[j];
      } else {
        merge_best<8, TRACK>(top, keys, below);
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
          merge_best<4, TRACK>(top, four, below);
        }
      }
    }
  }
}

// The lists of a token's TPT lanes (neighbours, TPT a power of two) merged into every one of them by xor shuffles.
template <typename Key, int K, int TPT, bool TRACK = false>
__device__ inline void merge_lanes(Key (&top)[K], Key& below) {
#pragma unroll
  for (int d = 1; d < TPT; d *= 2) {
    Key other[K];
#pragma unroll
    for (int j = 0; j < K; ++j) other[j] = __shfl_xor_sync(0xffffffffu, top[j], d);
    if constexpr (TRACK) below = max(below, __shfl_xor_sync(0xffffffffu, below, d));
    merge_best<K, TRACK>(top, other, below);
  }
}

// The best K keys of a token, sorted, in every one of its TPT lanes: each lane's (lane_best_keys), then the lanes'
// lists merged. With TRACK, `below` is the token's best key left out (the (K + 1)-th).
template <typename Key, int K, int TPT, int CHUNKS, bool TRACK = false, typename KeysOf>
__device__ inline void best_keys(KeysOf keys_of, Key (&top)[K], Key& below) {
  lane_best_keys<Key, K, CHUNKS, TRACK>(keys_of, top, below);
  merge_lanes<Key, K, TPT, TRACK>(top, below);
}

template <typename Key, int K, int TPT, int CHUNKS, typename KeysOf>
__device__ inline void best_keys(KeysOf keys_of, Key (&top)[K]) {
  Key below;
  best_keys<Key, K, TPT, CHUNKS, false>(keys_of, top, below);
}

// 2^y by the hardware's approximation, subnormal results flushed to 0 (ex2.approx.ftz: one MUFU, where __expf
// adds a range check and two scalings for subnormal results).
__device__ inline float exp2_ftz(float y) {
#ifdef __CUDA_ARCH__
  float e;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(e) : "f"(y));
  return e;
#else   // host C++ (emulation/simt_host.h): the exact 2^y, flushed like ex2.approx.ftz
  const float e = exp2f(y);
  return e < FLT_MIN ? 0.0f : e;
#endif
}

// log2(e): e^x is computed as 2^(x log2(e)), the hardware having a 2^x (ex2) and no e^x.
inline constexpr float kLog2E = 1.4426950408889634f;

// 1 / (1 + e^-x) with the hardware's approximate 2^x, subnormal results flushed (where e^-x is that small the
// weight is 1 either way): a few instructions, where an IEEE division takes a branch to a slow path.
__device__ inline float sigmoid(float x) { return __fdividef(1.0f, 1.0f + exp2_ftz(x * -kLog2E)); }

// A softmax's term e^(x - m), m the row's largest logit: the difference's 2^ by exp2_ftz (a term flushed to 0 is
// below 1e-38, nothing beside the largest term, 1).
__device__ inline float softmax_term(float x, float m) { return exp2_ftz((x - m) * kLog2E); }

// P consecutive elements of type T, loaded as wide as they allow (16 or 8 bytes; the caller keeps rows
// 16-byte aligned): from global memory through the read-only path (__ldg), or, with SHARED, from shared memory.
template <typename V, typename T, int P, bool SHARED = false>
__device__ inline void load_vectors(const T* __restrict__ src, float (&out)[P]) {
  constexpr int PER_VEC = sizeof(V) / sizeof(T);
#pragma unroll
  for (int v = 0; v < P / PER_VEC; ++v) {
    const V* at = reinterpret_cast<const V*>(src) + v;
    const V raw = SHARED ? *at : __ldg(at);
    const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
    for (int j = 0; j < PER_VEC; ++j) out[v * PER_VEC + j] = to_float<T>(e[j]);
  }
}

template <typename T, int P, bool SHARED = false>
__device__ inline void load_row(const T* __restrict__ src, float (&out)[P]) {
  constexpr int BYTES = P * (int)sizeof(T);
  if constexpr (BYTES % 16 == 0) {
    load_vectors<uint4, T, P, SHARED>(src, out);
  } else if constexpr (BYTES % 8 == 0) {
    load_vectors<uint2, T, P, SHARED>(src, out);
  } else {
#pragma unroll
    for (int j = 0; j < P; ++j) out[j] = to_float<T>(src[j]);
  }
}

// J 4-byte values stored at once, as wide as they allow (16-byte stores, or one of 8 or 4 bytes; dst aligned to
// the store's width).
template <int J, typename V>
__device__ inline void store_vector(V* __restrict__ dst, const V (&v)[J]) {
  static_assert(sizeof(V) == 4 && (J == 1 || J == 2 || J % 4 == 0), "1, 2 or a multiple of 4 values of 4 bytes");
  const auto& u = reinterpret_cast<const unsigned(&)[J]>(v);
  if constexpr (J == 1) {
    dst[0] = v[0];
  } else if constexpr (J == 2) {
    *reinterpret_cast<uint2*>(dst) = make_uint2(u[0], u[1]);
  } else {
#pragma unroll
    for (int q = 0; q < J / 4; ++q) {
      *reinterpret_cast<uint4*>(dst + 4 * q) = make_uint4(u[4 * q], u[4 * q + 1], u[4 * q + 2], u[4 * q + 3]);
    }
  }
}

}  // namespace moe
