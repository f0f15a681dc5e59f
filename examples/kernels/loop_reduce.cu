// loop_reduce.cu: sum of a vector with a grid-stride loop, a warp-shuffle reduction and one atomic
// per warp. Demonstrates a loop in SASS (a backward branch: BRA to a lower address), SHFL.BFLY and RED.
// *out must be zeroed before the launch.

__global__ void grid_stride_sum(const float* __restrict__ x, float* __restrict__ out, int n) {
    float s = 0.f;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        s += x[i];
    }
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) s += __shfl_xor_sync(0xffffffffu, s, off);
    if ((threadIdx.x & 31) == 0) atomicAdd(out, s);
}
