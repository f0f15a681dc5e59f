// Wave-per-row argmax with DPP only: fused max steps, row broadcasts, one readlane (the "after" code).
//
// Problem: as in wave_argmax_bpermute.hip: for every row of a [rows, EXPERTS] float matrix, the
// largest value and the lowest index holding it (finite inputs; -0.0 == +0.0).
//
// Why it is correct:
// 1. Lane l holds elements [l*P, l*P + P) and scans them with a strict '>', so it keeps the lowest
//    index of its own maximum.
// 2. Each lane's maximum becomes an int32 key that orders like the float (flip the magnitude bits of
//    negative numbers; -0.0 is first turned into +0.0 by adding +0.0). Integer max is then exact,
//    associative and idempotent, and -2^31 is its identity.
// 3. The wave reduces the key with six DPP steps, each max(v, dpp(v)) with update_dpp's `old` = -2^31:
//      quad_perm:[1,0,3,2], quad_perm:[2,3,0,1]  every lane holds its quad's max
//      row_shr:4, row_shr:8                      lane 15 of each 16-lane row holds the row's max
//      row_bcast:15 (row_mask 0xa)               lane 15 of rows 0 and 2 into rows 1 and 3: lane 31
//                                                holds max(rows 0-1), lane 63 max(rows 2-3)
//      row_bcast:31 (row_mask 0xc)               lane 31 into rows 2 and 3: lane 63 holds the wave's max
//    Lanes with no DPP source (outside the row, or rows masked off) read the identity, so max() leaves
//    them unchanged. With integer max and its identity as `old` (and bound_ctrl off), LLVM's DPP
//    combiner fuses each step into one `v_max_i32_dpp v, v, v <ctrl>`: six instructions for the whole
//    wave (clang 19, gfx90a/gfx942). A float max would not fuse: IEEE mode inserts canonicalizing
//    v_max_f32 v, v, v around each operand and the steps stay v_mov_b32_dpp + v_max_f32.
// 4. One __builtin_amdgcn_readlane(v, 63) puts the wave's max in a scalar register. Lanes own
//    increasing index ranges, so the answer's index is in the lowest lane whose own maximum equals
//    it: a ballot and a find-first-set (s_ff1_i32_b64) name that lane, and it writes the result.
// row_bcast exists on GFX9 only (gfx90a, gfx942, gfx950 are GFX9); RDNA would need permlanex16.
//
// Launch: blockDim.x = 256 (4 waves); num_waves = gridDim.x * 4.
#include <hip/hip_runtime.h>

#ifndef EXPERTS
#define EXPERTS 128
#endif
static_assert(EXPERTS % 64 == 0 && EXPERTS >= 64 && EXPERTS <= 256, "EXPERTS must be 64, 128, 192 or 256");
constexpr int WAVE = 64;
constexpr int PER_LANE = EXPERTS / WAVE;

// DPP control codes (GFX9 ISA, DPP_CTRL).
constexpr int DPP_QUAD_1032 = 0xB1;      // quad_perm:[1,0,3,2]
constexpr int DPP_QUAD_2301 = 0x4E;      // quad_perm:[2,3,0,1]
constexpr int DPP_ROW_SHR4 = 0x114;      // row_shr:4
constexpr int DPP_ROW_SHR8 = 0x118;      // row_shr:8
constexpr int DPP_ROW_BCAST15 = 0x142;   // row_bcast:15
constexpr int DPP_ROW_BCAST31 = 0x143;   // row_bcast:31
constexpr int KEY_IDENTITY = (int)0x80000000;

__device__ inline int order_key(float f) {
  const int b = __float_as_int(f + 0.0f);   // -0.0 + 0.0 == +0.0
  return b ^ ((b >> 31) & 0x7fffffff);
}

template <int CTRL, int ROW_MASK>
__device__ inline int max_dpp(int v) {
  const int o = __builtin_amdgcn_update_dpp(KEY_IDENTITY, v, CTRL, ROW_MASK, 0xf, false);
  return o > v ? o : v;
}

extern "C" __global__ __launch_bounds__(256) void wave_argmax_dpp(
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
    const int mine = order_key(best_v);
    int key = mine;
    key = max_dpp<DPP_QUAD_1032, 0xf>(key);
    key = max_dpp<DPP_QUAD_2301, 0xf>(key);
    key = max_dpp<DPP_ROW_SHR4, 0xf>(key);
    key = max_dpp<DPP_ROW_SHR8, 0xf>(key);
    key = max_dpp<DPP_ROW_BCAST15, 0xa>(key);
    key = max_dpp<DPP_ROW_BCAST31, 0xc>(key);
    const int wave_max = __builtin_amdgcn_readlane(key, 63);

    // Lowest lane whose own maximum is the wave's maximum; it holds the lowest index.
    const unsigned long long hits = __ballot(mine == wave_max);
    const int winner = __builtin_ctzll(hits);
    if (lane == winner) {
      out_val[row] = best_v;
      out_idx[row] = best_i;
    }
  }
}
