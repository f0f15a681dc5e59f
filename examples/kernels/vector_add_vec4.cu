// vector_add_vec4.cu: the float4 version of vector_add.cu; each thread adds four floats.
// Demonstrates 128-bit vector global loads and stores (SASS `LDG.E.128`, `STG.E.128`).
// n4 is the number of float4 elements (n / 4); the buffers must be 16-byte aligned.

extern "C" __global__ void vector_add_vec4(const float4* __restrict__ a, const float4* __restrict__ b,
                                           float4* __restrict__ c, int n4) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n4) {
        float4 x = a[i];
        float4 y = b[i];
        c[i] = make_float4(x.x + y.x, x.y + y.y, x.z + y.z, x.w + y.w);
    }
}
