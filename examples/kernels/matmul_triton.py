"""Tiled matrix multiply C = A @ B (fp16 in, fp32 accumulate, fp16 out), one BLOCK_M x BLOCK_N tile of C
per program, stepping over K in BLOCK_K slices with tl.dot, after Triton's matmul tutorial (without its
grouped ordering, to stay small).

tl.dot is where the two vendors' matrix units show in the ISA: on sm_90 Triton emits warpgroup MMA
(PTX `wgmma.mma_async`, SASS `HGMMA`) fed from shared memory by a software pipeline of num_stages copies;
on gfx942 it emits MFMA (`v_mfma_f32_*_f16`) with the accumulator in AGPRs or VGPRs.

    kpilot isa analyze examples/kernels/matmul_triton.py:matmul_kernel --arch sm_90
    kpilot isa analyze examples/kernels/matmul_triton.py:matmul_kernel --arch gfx942
"""

import triton
import triton.language as tl


@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K,
                  stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    pid = tl.program_id(0)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    pid_m = pid // num_pid_n
    pid_n = pid % num_pid_n

    offs_m = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)) % M
    offs_n = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)) % N
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + offs_m[:, None] * stride_am + offs_k[None, :] * stride_ak
    b_ptrs = b_ptr + offs_k[:, None] * stride_bk + offs_n[None, :] * stride_bn

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        a = tl.load(a_ptrs, mask=offs_k[None, :] < K - k * BLOCK_K, other=0.0)
        b = tl.load(b_ptrs, mask=offs_k[:, None] < K - k * BLOCK_K, other=0.0)
        acc = tl.dot(a, b, acc)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk

    c = acc.to(tl.float16)
    offs_cm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_cn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    c_ptrs = c_ptr + offs_cm[:, None] * stride_cm + offs_cn[None, :] * stride_cn
    tl.store(c_ptrs, c, mask=(offs_cm[:, None] < M) & (offs_cn[None, :] < N))


# Row-major contiguous A, B, C with sizes that are multiples of 16: a real launch specializes the unit
# strides to the constant 1 and marks the others divisible by 16, and so does this declaration.
# 128x128x32 tiles, 8 warps (two warpgroups on sm_90), 3 pipeline stages: 48 KiB of shared memory/LDS.
KPILOT_SPECS = {
    "matmul_kernel": {
        "signature": {
            "a_ptr": "*fp16", "b_ptr": "*fp16", "c_ptr": "*fp16",
            "M": "i32:16", "N": "i32:16", "K": "i32:16",
            "stride_am": "i32:16", "stride_bk": "i32:16", "stride_cm": "i32:16",
        },
        "constexprs": {"stride_ak": 1, "stride_bn": 1, "stride_cn": 1,
                       "BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 32},
        "num_warps": 8,
        "num_stages": 3,
    },
}


def matmul(a, b):
    """Launch on 2-D fp16 CUDA/ROCm tensors (needs torch and a GPU; not used by offline compilation)."""
    import torch

    M, K = a.shape
    _, N = b.shape
    c = torch.empty((M, N), device=a.device, dtype=torch.float16)
    grid = (triton.cdiv(M, 128) * triton.cdiv(N, 128),)
    matmul_kernel[grid](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0),
                        c.stride(1), BLOCK_M=128, BLOCK_N=128, BLOCK_K=32, num_warps=8, num_stages=3)
    return c
