// smem_heavy.cu: a block-wide 1D stencil staged through 48 KB of static shared memory
// (12288 floats, the most a static __shared__ array may hold). At 256 threads per block the
// shared memory, not registers or warps, limits how many blocks fit on an SM (4 on sm_90:
// 228 KB / (48 KB + 1 KB reserved)), so occupancy is shared-memory-limited.
// Launch with blockDim.x = 256; each block handles TILE outputs.

#define TILE 12288
#define RADIUS 4

__global__ void smem_stencil(const float* __restrict__ in, float* __restrict__ out, int n) {
    __shared__ float buf[TILE];
    int base = blockIdx.x * (TILE - 2 * RADIUS);
    for (int i = threadIdx.x; i < TILE; i += blockDim.x) {
        int g = base + i - RADIUS;
        buf[i] = (g >= 0 && g < n) ? in[g] : 0.f;
    }
    __syncthreads();
    for (int i = threadIdx.x + RADIUS; i < TILE - RADIUS; i += blockDim.x) {
        int g = base + i - RADIUS;
        if (g < n) {
            float s = 0.f;
#pragma unroll
            for (int r = -RADIUS; r <= RADIUS; ++r) s += buf[i + r];
            out[g] = s * (1.f / (2 * RADIUS + 1));
        }
    }
}
