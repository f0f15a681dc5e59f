// spill.cu: a kernel whose per-thread working set (64 live floats, mixed in a data-dependent way)
// does not fit in the registers it is allowed. Compile with `-maxrregcount=32` (the tests do) and
// ptxas spills: `-Xptxas -v` reports "N bytes spill stores" and the SASS holds STL/LDL.
// Without the cap it needs roughly 80-90 registers and does not spill.

#define W 64

extern "C" __global__ void spill_kernel(const float* __restrict__ in, float* __restrict__ out, int n, int iters) {
    int tid = blockIdx.x * blockDim.x + threadIdx.x;
    if (tid >= n) return;
    float v[W];
#pragma unroll
    for (int k = 0; k < W; ++k) v[k] = in[(tid + k * 131) % n];
    for (int it = 0; it < iters; ++it) {
#pragma unroll
        for (int k = 0; k < W; ++k) {
            v[k] = fmaf(v[k], v[(k + 7) % W], v[(k + 29) % W] * 0.5f);
        }
    }
    float s = 0.f;
#pragma unroll
    for (int k = 0; k < W; ++k) s += v[k] * (float)(k + 1);
    out[tid] = s;
}
