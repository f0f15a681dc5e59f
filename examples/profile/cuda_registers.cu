// Each thread keeps 96 loaded values live in registers before combining them, so the kernel needs 128
// registers per thread: with 256-thread blocks only two blocks fit on an SM (occupancy 25%, limited by
// registers). Each load's address depends on the value loaded before it, so a thread has one load in flight
// at a time and the kernel waits on memory latency, which more resident warps would hide (the planted
// problem: register-limited occupancy).
//
//   nvcc -arch=sm_90 -O3 -o cuda_registers examples/profile/cuda_registers.cu
//   kpilot profile --kernel hold_many -- ./cuda_registers
#include <cstdio>
#include <cuda_runtime.h>

constexpr int VALUES = 96;

__global__ void __launch_bounds__(256, 1) hold_many(const float* __restrict__ x, float* __restrict__ y, int n) {
    int stride = gridDim.x * blockDim.x;
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    float v[VALUES];
    float prev = 0.0f;   // x holds zeros: the dependency is real to the compiler, the offset is 0
#pragma unroll
    for (int j = 0; j < VALUES; ++j) {
        int k = i + j * stride + static_cast<int>(prev);
        v[j] = k < n ? x[k] : 0.0f;
        prev = v[j];
    }
    // every value is needed to the end: pairwise products across the whole array
    float acc = 0.0f;
#pragma unroll
    for (int j = 0; j < VALUES; ++j) acc += v[j] * v[VALUES - 1 - j] + v[(j * 7) % VALUES];
    if (i < stride) y[i] = acc;
}

int main() {
    const int blocks = 132 * 16, threads = 256, stride = blocks * threads, n = stride * VALUES;
    float *x, *y;
    cudaMalloc(&x, sizeof(float) * n);
    cudaMalloc(&y, sizeof(float) * stride);
    cudaMemset(x, 0, sizeof(float) * n);
    for (int r = 0; r < 3; ++r) hold_many<<<blocks, threads>>>(x, y, n);
    cudaError_t e = cudaDeviceSynchronize();
    printf("%s\n", cudaGetErrorString(e));
    return e == cudaSuccess ? 0 : 1;
}
