// Warp reductions with shuffles and REDUX (sm_80+), right and planted wrong, for `kpilot isa lanes`. Each kernel
// reads one value per lane and stores every lane's result (out[lane]): with a one-hot input (1 in lane s, 0
// elsewhere) out[l] is how many times lane s reaches lane l, which a test compares with the lane summary.

extern "C" __global__ void warp_sum_bfly(const float* x, float* out) {
  float v = x[threadIdx.x];
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  out[threadIdx.x] = v;
}

extern "C" __global__ void warp_sum_down(const float* x, float* out) {
  float v = x[threadIdx.x];
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_down_sync(0xffffffffu, v, offset);
  out[threadIdx.x] = v;                      // lane 0 holds the warp; lane l the lanes l.. of its steps
}

extern "C" __global__ void warp_sum_down_no_1(const float* x, float* out) {   // wrong: offset 1 missing
  float v = x[threadIdx.x];
  for (int offset = 16; offset > 1; offset >>= 1) v += __shfl_down_sync(0xffffffffu, v, offset);
  out[threadIdx.x] = v;
}

extern "C" __global__ void warp_sum_xor8_twice(const float* x, float* out) {  // wrong: offset 8 twice
  float v = x[threadIdx.x];
  v += __shfl_xor_sync(0xffffffffu, v, 16);
  v += __shfl_xor_sync(0xffffffffu, v, 8);
  v += __shfl_xor_sync(0xffffffffu, v, 8);
  v += __shfl_xor_sync(0xffffffffu, v, 4);
  v += __shfl_xor_sync(0xffffffffu, v, 2);
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  out[threadIdx.x] = v;
}

extern "C" __global__ void warp_sum_redux(const int* x, int* out) {
  out[threadIdx.x] = __reduce_add_sync(0xffffffffu, x[threadIdx.x]);
}
