// local_array.cu: a per-thread array indexed by a value known only at run time.
// Registers cannot be indexed dynamically, so the array lives in local memory: the SASS holds STL/LDL
// and `cuobjdump -res-usage` reports LOCAL/STACK bytes, yet ptxas reports 0 bytes of spills.
// This is the case a "local memory" finding must tell apart from register spills.

extern "C" __global__ void local_array(const int* __restrict__ idx, const float* __restrict__ in,
                                       float* __restrict__ out, int n) {
    int tid = blockIdx.x * blockDim.x + threadIdx.x;
    if (tid >= n) return;
    float table[32];
#pragma unroll
    for (int k = 0; k < 32; ++k) table[k] = in[tid] * (float)k;
    float acc = 0.f;
    for (int k = 0; k < 8; ++k) {
        acc += table[idx[tid * 8 + k] & 31];   // dynamic index -> local memory
    }
    out[tid] = acc;
}
