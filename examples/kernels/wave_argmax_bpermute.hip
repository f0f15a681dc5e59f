// Wave-per-row argmax, cross-lane reduction through __shfl_xor (the "naive" version).
//
// Problem (MoE routing): logits is a [rows, EXPERTS] row-major float matrix; for every row write the
// largest value and the lowest index holding it: out_val[r] = max_j x[r][j],
// out_idx[r] = min { j : x[r][j] == out_val[r] }. Inputs are finite (NaN-free); -0.0 == +0.0.
//
// One wavefront (64 lanes) owns one row at a time; lane l holds the EXPERTS/64 contiguous elements
// [l*P, l*P + P). Each lane scans its chunk with a strict '>' so it keeps its lowest index among equal
// values. The wave then runs a butterfly (xor 32, 16, 8, 4, 2, 1) on (value, index) pairs, combining
// with better(a, b) = a.v > b.v || (a.v == b.v && a.i < b.i): a total order, so the combine is
// associative and commutative and after six steps every lane holds the row's argmax.
//
// On gfx9 HIP's __shfl_xor is __builtin_amdgcn_ds_bpermute: each step is two ds_bpermute_b32 (value
// and index) that go through the LDS crossbar and need an lgkmcnt wait. Compare
// wave_argmax_dpp.hip, the same kernel with DPP row operations instead.
//
// Launch: blockDim.x = 256 (4 waves), any grid; num_waves = gridDim.x * 4 (waves stride over rows).
// Thread and block ids come from the amdgcn builtins rather than threadIdx/blockIdx so the file
// compiles with -nogpulib (no ROCm device library needed) and its ISA has no library calls.
#include <hip/hip_runtime.h>

#ifndef EXPERTS
#define EXPERTS 128
#endif
static_assert(EXPERTS % 64 == 0 && EXPERTS >= 64 && EXPERTS <= 256, "EXPERTS must be 64, 128, 192 or 256");
constexpr int WAVE = 64;
constexpr int PER_LANE = EXPERTS / WAVE;

__device__ inline bool better(float v, int i, float w, int j) { return v > w || (v == w && i < j); }

extern "C" __global__ __launch_bounds__(256) void wave_argmax_bpermute(
    const float* __restrict__ logits, float* __restrict__ out_val, int* __restrict__ out_idx,
    int rows, int num_waves) {
  const int tid = __builtin_amdgcn_workitem_id_x();
  const int lane = tid % WAVE;
  const int wave = __builtin_amdgcn_workgroup_id_x() * (256 / WAVE) + tid / WAVE;

  for (int row = wave; row < rows; row += num_waves) {
    const float* x = logits + (size_t)row * EXPERTS + lane * PER_LANE;
    float best_v = x[0];
    int best_i = lane * PER_LANE;
#pragma unroll
    for (int k = 1; k < PER_LANE; ++k) {
      if (x[k] > best_v) { best_v = x[k]; best_i = lane * PER_LANE + k; }
    }
#pragma unroll
    for (int offset = WAVE / 2; offset > 0; offset >>= 1) {
      float ov = __shfl_xor(best_v, offset);
      int oi = __shfl_xor(best_i, offset);
      if (better(ov, oi, best_v, best_i)) { best_v = ov; best_i = oi; }
    }
    if (lane == 0) {
      out_val[row] = best_v;
      out_idx[row] = best_i;
    }
  }
}
