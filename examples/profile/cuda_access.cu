// Two planted access problems, each on its own line: a global load in which each thread of a warp reads its own
// 32-byte sector (a stride of 32 floats: 32 sectors a request where 4 would do), and a shared-memory store down a
// column of a [32][32] tile (the warp's 32 lanes in one bank: 32-way bank conflicts). The other load, the barrier
// and the row-wise shared read are clean, so a profile that names where the excess is should name those two lines.
//
//   nvcc -arch=sm_90 -O3 -lineinfo -o cuda_access examples/profile/cuda_access.cu
//   kpilot profile --source --kernel access_problems -- ./cuda_access
#include <cstdio>
#include <cuda_runtime.h>

__global__ void __launch_bounds__(256) access_problems(const float* __restrict__ x, float* __restrict__ y, int n) {
    __shared__ float tile[32][32];   // 32 floats a row: a column is one bank
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const float a = x[i];                                   // coalesced
    const float b = x[(static_cast<long long>(i) * 32) % n];  // strided: a sector per thread
    tile[lane][warp] = a + b;                               // down a column: one bank for the whole warp
    __syncthreads();
    y[i] = tile[warp][lane];                                // along a row: conflict-free
}

int main() {
    const int threads = 256, blocks = 132 * 64, n = blocks * threads;
    float *x, *y;
    cudaMalloc(&x, sizeof(float) * n);
    cudaMalloc(&y, sizeof(float) * n);
    cudaMemset(x, 0, sizeof(float) * n);
    for (int r = 0; r < 3; ++r) access_problems<<<blocks, threads>>>(x, y, n);
    cudaError_t e = cudaDeviceSynchronize();
    printf("%s\n", cudaGetErrorString(e));
    return e == cudaSuccess ? 0 : 1;
}
