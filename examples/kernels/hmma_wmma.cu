// hmma_wmma.cu: one warp computes a 16x16 tile of C = A * B (half inputs, float accumulate) with the
// warp-level wmma API. On sm_80..sm_90 this compiles to warp-level `HMMA` instructions, the older
// tensor-core path; on sm_90a the fast path is warpgroup `HGMMA` (wgmma), which wmma never produces.
// That difference is the input for kernelpilot's "warp-level MMA on Hopper" finding.
// A is M x K row-major, B is K x N column-major, C is M x N row-major; M, N, K multiples of 16.
// Launch with blockDim.x = 32 and grid (N/16, M/16).

#include <cuda_fp16.h>
#include <mma.h>

using namespace nvcuda;

__global__ void wmma_gemm(const half* __restrict__ a, const half* __restrict__ b, float* __restrict__ c,
                          int M, int N, int K) {
    int tile_m = blockIdx.y * 16;
    int tile_n = blockIdx.x * 16;
    wmma::fragment<wmma::matrix_a, 16, 16, 16, half, wmma::row_major> fa;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, half, wmma::col_major> fb;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
    wmma::fill_fragment(acc, 0.0f);
    for (int k = 0; k < K; k += 16) {
        wmma::load_matrix_sync(fa, a + tile_m * K + k, K);
        wmma::load_matrix_sync(fb, b + tile_n * K + k, K);
        wmma::mma_sync(acc, fa, fb, acc);
    }
    wmma::store_matrix_sync(c + tile_m * N + tile_n, acc, N, wmma::mem_row_major);
}
