// Wave-per-row argmax: DPP inside each row of 16 lanes, then a chain of v_readlane_b32 to gather the
// four row results (the "before" code of the DPP story: rows gathered with readlanes).
//
// Problem: as in wave_argmax_bpermute.hip: for every row of a [rows, EXPERTS] float matrix, the
// largest value and the lowest index holding it (finite inputs; -0.0 == +0.0).
//
// Lane l holds elements [l*P, l*P + P) and scans them with a strict '>' (lowest index among equals).
// Within each DPP row (16 lanes) the (value, index) pair moves with v_mov_b32_dpp and is combined
// with better() (a total order, so the combine is associative and idempotent):
//   quad_perm:[1,0,3,2], quad_perm:[2,3,0,1]  -> every lane holds its quad's best
//   row_shr:4, row_shr:8                      -> lane 15 of each row holds the row's best
// A lane whose row_shr source falls outside the row keeps its own pair (update_dpp's `old` operand
// is the lane's own value and bound_ctrl is off), and combining a pair with itself changes nothing.
// The four row results (lanes 15, 31, 47, 63) are then read into scalar registers with eight
// __builtin_amdgcn_readlane calls (value and index per row) and combined on the scalar side.
//
// Launch: blockDim.x = 256 (4 waves); num_waves = gridDim.x * 4.
#include <hip/hip_runtime.h>

#ifndef EXPERTS
#define EXPERTS 128
#endif
static_assert(EXPERTS % 64 == 0 && EXPERTS >= 64 && EXPERTS <= 256, "EXPERTS must be 64, 128, 192 or 256");
constexpr int WAVE = 64;
constexpr int PER_LANE = EXPERTS / WAVE;

// DPP control codes (GFX9): quad_perm [a,b,c,d] = a | b<<2 | c<<4 | d<<6; row_shr:N = 0x110 + N.
constexpr int DPP_QUAD_1032 = 0xB1;   // quad_perm:[1,0,3,2]
constexpr int DPP_QUAD_2301 = 0x4E;   // quad_perm:[2,3,0,1]
constexpr int DPP_ROW_SHR4 = 0x114;
constexpr int DPP_ROW_SHR8 = 0x118;

__device__ inline bool better(float v, int i, float w, int j) { return v > w || (v == w && i < j); }

template <int CTRL>
__device__ inline void dpp_step(float& v, int& i) {
  const int vb = __float_as_int(v);
  const float ov = __int_as_float(__builtin_amdgcn_update_dpp(vb, vb, CTRL, 0xf, 0xf, false));
  const int oi = __builtin_amdgcn_update_dpp(i, i, CTRL, 0xf, 0xf, false);
  if (better(ov, oi, v, i)) { v = ov; i = oi; }
}

__device__ inline float readlane_f(float v, int lane) {
  return __int_as_float(__builtin_amdgcn_readlane(__float_as_int(v), lane));
}

extern "C" __global__ __launch_bounds__(256) void wave_argmax_readlane(
    const float* __restrict__ logits, float* __restrict__ out_val, int* __restrict__ out_idx,
    int rows, int num_waves) {
  const int tid = __builtin_amdgcn_workitem_id_x();
  const int lane = tid % WAVE;
  const int wave = __builtin_amdgcn_workgroup_id_x() * (256 / WAVE) + tid / WAVE;

  for (int row = wave; row < rows; row += num_waves) {
    const float* x = logits + (size_t)row * EXPERTS + lane * PER_LANE;
    float v = x[0];
    int i = lane * PER_LANE;
#pragma unroll
    for (int k = 1; k < PER_LANE; ++k) {
      if (x[k] > v) { v = x[k]; i = lane * PER_LANE + k; }
    }
    dpp_step<DPP_QUAD_1032>(v, i);
    dpp_step<DPP_QUAD_2301>(v, i);
    dpp_step<DPP_ROW_SHR4>(v, i);
    dpp_step<DPP_ROW_SHR8>(v, i);

    // Gather the four row results: 8 readlanes, each a VALU->SALU transfer the wave waits on.
    float row_v[4];
    int row_i[4];
    row_v[0] = readlane_f(v, 15); row_i[0] = __builtin_amdgcn_readlane(i, 15);
    row_v[1] = readlane_f(v, 31); row_i[1] = __builtin_amdgcn_readlane(i, 31);
    row_v[2] = readlane_f(v, 47); row_i[2] = __builtin_amdgcn_readlane(i, 47);
    row_v[3] = readlane_f(v, 63); row_i[3] = __builtin_amdgcn_readlane(i, 63);
    float best_v = row_v[0];
    int best_i = row_i[0];
#pragma unroll
    for (int r = 1; r < 4; ++r) {
      // Rows hold increasing index ranges, so a strict '>' keeps the lowest index among equals.
      if (row_v[r] > best_v) { best_v = row_v[r]; best_i = row_i[r]; }
    }
    if (lane == 0) {
      out_val[row] = best_v;
      out_idx[row] = best_i;
    }
  }
}
