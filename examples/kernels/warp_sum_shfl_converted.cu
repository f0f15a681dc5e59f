// Two warp sums with shuffles: a wrong one that sends each float through an int variable (F2I before every
// SHFL, I2F after: the fractions are lost), and the right one that shuffles the float itself. `kpilot isa
// analyze` names the first with the finding crosslane.conversion and finds nothing in the second.
// Launch: blockDim.x = 32; one warp per block.

__global__ void warp_sum_converted(const float* x, float* out) {
  float v = x[blockIdx.x * 32 + threadIdx.x];
  for (int offset = 16; offset > 0; offset >>= 1) {
    int sent = (int)v;                                          // the bug: a value, not its bits
    v += (float)__shfl_xor_sync(0xffffffffu, sent, offset);
  }
  if (threadIdx.x == 0) out[blockIdx.x] = v;
}

__global__ void warp_sum(const float* x, float* out) {
  float v = x[blockIdx.x * 32 + threadIdx.x];
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  if (threadIdx.x == 0) out[blockIdx.x] = v;
}
