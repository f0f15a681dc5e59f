// reg_heavy.cu: each thread keeps a 16x4 block of accumulators (plus operands) live across a loop,
// so ptxas uses ~100-128 registers and does not spill. With __launch_bounds__(256) a 256-thread block
// then runs with register-limited occupancy (sm_90 at 114..128 registers: 2 blocks = 16 of 64 warps).
// A naive register-blocked matrix product: C[M x N] = A[M x K] * B[K x N], row-major, each thread
// computing TM x TN outputs (M a multiple of 16, N of 4).

#define TM 16
#define TN 4

__global__ void __launch_bounds__(256) reg_blocked_gemm(const float* __restrict__ A, const float* __restrict__ B,
                                                        float* __restrict__ C, int M, int N, int K) {
    int row0 = (blockIdx.y * blockDim.y + threadIdx.y) * TM;
    int col0 = (blockIdx.x * blockDim.x + threadIdx.x) * TN;
    if (row0 >= M || col0 >= N) return;
    float acc[TM][TN];
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) acc[i][j] = 0.f;
    for (int k = 0; k < K; ++k) {
        float b[TN];
#pragma unroll
        for (int j = 0; j < TN; ++j) b[j] = B[k * N + col0 + j];
#pragma unroll
        for (int i = 0; i < TM; ++i) {
            float a = A[(row0 + i) * K + k];
#pragma unroll
            for (int j = 0; j < TN; ++j) acc[i][j] = fmaf(a, b[j], acc[i][j]);
        }
    }
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) C[(row0 + i) * N + col0 + j] = acc[i][j];
}
