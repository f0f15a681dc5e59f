// Wave reductions with DPP on a 64-lane wave (gfx9), right and planted wrong, for `kpilot isa lanes`.
// Each kernel reads one float per lane and stores every lane's result (out[lane]), so that a test can compare
// what each lane holds with the lane summary; the readlane kernels store the lane they read.
// Steps: row_shr:1, 2, 4, 8 with bound_ctrl (lane 15 of each row holds its row), row_bcast:15 into rows 1 and 3
// (lane 31 holds rows 0-1, lane 63 rows 2-3), row_bcast:31 into rows 2 and 3 (lane 63 holds the wave).
#include <hip/hip_runtime.h>

constexpr int SHR1 = 0x111, SHR2 = 0x112, SHR4 = 0x114, SHR8 = 0x118, BCAST15 = 0x142, BCAST31 = 0x143;

template <int CTRL, int ROW_MASK = 0xf, bool BOUND = true>
__device__ inline float step(float v) {
  return v + __int_as_float(__builtin_amdgcn_update_dpp(0, __float_as_int(v), CTRL, ROW_MASK, 0xf, BOUND));
}

__device__ inline float rows(float v) { return step<SHR8>(step<SHR4>(step<SHR2>(step<SHR1>(v)))); }

extern "C" __global__ void wave_sum(const float* x, float* out) {
  float v = rows(x[threadIdx.x]);
  v = step<BCAST31, 0xc, false>(step<BCAST15, 0xa, false>(v));
  out[threadIdx.x] = v;
}

extern "C" __global__ void wave_sum_no_bcast31(const float* x, float* out) {   // wrong: the last step dropped
  float v = step<BCAST15, 0xa, false>(rows(x[threadIdx.x]));
  out[threadIdx.x] = v;
}

extern "C" __global__ void row_sum_shr4_twice(const float* x, float* out) {    // wrong: row_shr:4 for row_shr:8
  float v = step<SHR4>(step<SHR4>(step<SHR2>(step<SHR1>(x[threadIdx.x]))));
  out[threadIdx.x] = v;
}

extern "C" __global__ void wave_sum_readlane(const float* x, float* out) {
  float v = step<BCAST31, 0xc, false>(step<BCAST15, 0xa, false>(rows(x[threadIdx.x])));
  out[0] = __int_as_float(__builtin_amdgcn_readlane(__float_as_int(v), 63));
}

extern "C" __global__ void wave_sum_readlane_31(const float* x, float* out) {  // wrong: lane 31 holds half
  float v = step<BCAST31, 0xc, false>(step<BCAST15, 0xa, false>(rows(x[threadIdx.x])));
  out[0] = __int_as_float(__builtin_amdgcn_readlane(__float_as_int(v), 31));
}

extern "C" __global__ void wave_sum_shfl32(const float* x, float* out) {       // wrong: a 32-lane warp's pattern
  float v = x[threadIdx.x];
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor(v, offset);
  out[threadIdx.x] = v;
}

extern "C" __global__ void wave_sum_shfl64(const float* x, float* out) {
  float v = x[threadIdx.x];
  for (int offset = 32; offset > 0; offset >>= 1) v += __shfl_xor(v, offset);
  out[threadIdx.x] = v;
}

template <int PATTERN>
__device__ inline float swz(float v) { return __int_as_float(__builtin_amdgcn_ds_swizzle(__float_as_int(v), PATTERN)); }

extern "C" __global__ void wave_sum_swizzle(const float* x, float* out) {
  // ds_swizzle in bitmask mode (and 0x1f, xor k: swap with lane ^ k within 32 lanes), then the two halves read
  float v = x[threadIdx.x];
  v += swz<0x1f | (16 << 10)>(v);
  v += swz<0x1f | (8 << 10)>(v);
  v += swz<0x1f | (4 << 10)>(v);
  v += swz<0x1f | (2 << 10)>(v);
  v += swz<0x1f | (1 << 10)>(v);
  const float lo = __int_as_float(__builtin_amdgcn_readlane(__float_as_int(v), 0));
  const float hi = __int_as_float(__builtin_amdgcn_readlane(__float_as_int(v), 32));
  out[0] = lo + hi;
}

template <int CTRL, bool BOUND, int ROW_MASK = 0xf>
__device__ inline float max_step(float v, float old) {
  return fmaxf(v, __int_as_float(__builtin_amdgcn_update_dpp(__float_as_int(old), __float_as_int(v), CTRL, ROW_MASK,
                                                             0xf, BOUND)));
}

__device__ inline float row_max(float v) {   // row_shr with bound_ctrl: lane 15 of each row never takes the 0
  return max_step<SHR8, true>(max_step<SHR4, true>(max_step<SHR2, true>(max_step<SHR1, true>(v, 0.0f), 0.0f), 0.0f),
                              0.0f);
}

// Row maxima, then one more step (row_shl:1, which an idempotent max may take), then row 0's result from lane 15.
constexpr int SHL1 = 0x101;

extern "C" __global__ void row0_max_bound_ctrl(const float* x, float* out) {  // wrong: lane 15 takes bound_ctrl's 0
  const float v = max_step<SHL1, true>(row_max(x[threadIdx.x]), 0.0f);       // lane 15 = max(row 0, 0)
  out[0] = __int_as_float(__builtin_amdgcn_readlane(__float_as_int(v), 15));
}

extern "C" __global__ void row0_max_identity(const float* x, float* out) {    // right: -inf where no source lane
  const float v = max_step<SHL1, false>(row_max(x[threadIdx.x]), -__builtin_inff());
  out[0] = __int_as_float(__builtin_amdgcn_readlane(__float_as_int(v), 15));
}
