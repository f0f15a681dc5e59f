// Two row sums with DPP (16-lane rows of a 64-lane wave): a wrong one that compiles cleanly, and the right one.
//
// row_sum_converted passes a float to __builtin_amdgcn_update_dpp, which takes ints: clang converts the value
// to int before each exchange and back after it (v_cvt_i32_f32, then v_cvt_f32_i32_dpp), so every fraction is
// lost on the way. row_sum passes the bits instead (__float_as_int / __int_as_float) and the compiler fuses
// each step into one v_add_f32_dpp. `kpilot isa analyze` names the first with the finding
// crosslane.conversion and finds nothing in the second.
//
// Steps: row_shr:1, 2, 4, 8 with bound_ctrl (lanes without a source read 0): lane 15 of each row holds the
// row's sum. Launch: blockDim.x = 64; one wave per block, four rows per wave.
#include <hip/hip_runtime.h>

constexpr int ROW_SHR1 = 0x111, ROW_SHR2 = 0x112, ROW_SHR4 = 0x114, ROW_SHR8 = 0x118;

__global__ void row_sum_converted(const float* __restrict__ x, float* __restrict__ out) {
  float v = x[blockIdx.x * 64 + threadIdx.x];
  v += __builtin_amdgcn_update_dpp(0, v, ROW_SHR1, 0xf, 0xf, false);   // float -> int -> float
  v += __builtin_amdgcn_update_dpp(0, v, ROW_SHR2, 0xf, 0xf, false);
  v += __builtin_amdgcn_update_dpp(0, v, ROW_SHR4, 0xf, 0xf, false);
  v += __builtin_amdgcn_update_dpp(0, v, ROW_SHR8, 0xf, 0xf, false);
  if (threadIdx.x % 16 == 15) out[blockIdx.x * 4 + threadIdx.x / 16] = v;
}

__device__ inline float dpp(float v, int ctrl) {
  // The value's bits through the int-only builtin: nothing is converted.
  switch (ctrl) {
    case ROW_SHR1: return __int_as_float(__builtin_amdgcn_update_dpp(0, __float_as_int(v), ROW_SHR1, 0xf, 0xf, false));
    case ROW_SHR2: return __int_as_float(__builtin_amdgcn_update_dpp(0, __float_as_int(v), ROW_SHR2, 0xf, 0xf, false));
    case ROW_SHR4: return __int_as_float(__builtin_amdgcn_update_dpp(0, __float_as_int(v), ROW_SHR4, 0xf, 0xf, false));
    default: return __int_as_float(__builtin_amdgcn_update_dpp(0, __float_as_int(v), ROW_SHR8, 0xf, 0xf, false));
  }
}

__global__ void row_sum(const float* __restrict__ x, float* __restrict__ out) {
  float v = x[blockIdx.x * 64 + threadIdx.x];
  v += dpp(v, ROW_SHR1);
  v += dpp(v, ROW_SHR2);
  v += dpp(v, ROW_SHR4);
  v += dpp(v, ROW_SHR8);
  if (threadIdx.x % 16 == 15) out[blockIdx.x * 4 + threadIdx.x / 16] = v;
}
