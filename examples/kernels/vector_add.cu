// vector_add.cu: c[i] = a[i] + b[i] with one float per thread.
// Demonstrates scalar 32-bit global loads (SASS `LDG.E`) where a float4 (`LDG.E.128`) would fit:
// the input for kernelpilot's "vectorize global loads" finding. Compare vector_add_vec4.cu.

extern "C" __global__ void vector_add(const float* __restrict__ a, const float* __restrict__ b,
                                      float* __restrict__ c, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        c[i] = a[i] + b[i];
    }
}
