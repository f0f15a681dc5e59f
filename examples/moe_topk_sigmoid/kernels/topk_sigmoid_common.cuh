// Helpers of the MoE routing kernels (topk_sigmoid_warp.cu, topk_sigmoid_keys.cu, topk_router.cu).
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

// 0xffff in each 16-bit half whose sign bit is set (PTX prmt's sign-replicating selectors, which __byte_perm
// does not pass through).
__device__ inline unsigned sign_halves(unsigned w) {
  unsigned m;
  asm("prmt.b32 %0, %1, 0, 0xbb99;" : "=r"(m) : "r"(w));
  return m;
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

// 1 / (1 + e^-x) with the hardware's approximate 2^x, subnormal results flushed (where e^-x is that small the
// weight is 1 either way): a few instructions, where an IEEE division takes a branch to a slow path.
__device__ inline float sigmoid(float x) {
  float e;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(e) : "f"(x * -1.4426950408889634f));
  return __fdividef(1.0f, 1.0f + e);
}

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
