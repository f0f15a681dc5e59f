"""Row softmax over a [tokens, experts] matrix of router logits (the first step of MoE routing).

    out[t, e] = exp(x[t, e] - max_e' x[t, e']) / sum_e'' exp(x[t, e''] - max_e' x[t, e'])

One program per row; the row is held in registers (BLOCK_SIZE >= n_cols), so the kernel is two cross-lane
reductions (max, then sum) around an exp. Those reductions are what the ISA shows: warp shuffles (SHFL.BFLY)
on NVIDIA, DPP / ds_bpermute / readlane on AMD. Formula and layout follow Triton's fused-softmax tutorial.

    kpilot isa analyze examples/kernels/softmax_triton.py:softmax_kernel --arch sm_90
    kpilot isa analyze examples/kernels/softmax_triton.py:softmax_kernel --arch gfx942
"""

import triton
import triton.language as tl


@triton.jit
def softmax_kernel(out_ptr, in_ptr, in_row_stride, out_row_stride, n_rows, n_cols, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_SIZE)
    mask = cols < n_cols
    x = tl.load(in_ptr + row * in_row_stride + cols, mask=mask, other=-float("inf")).to(tl.float32)
    x = x - tl.max(x, axis=0)
    num = tl.exp(x)
    den = tl.sum(num, axis=0)
    tl.store(out_ptr + row * out_row_stride + cols, num / den, mask=mask)


# What `kpilot` compiles this kernel with when the command line does not say (see
# kernelpilot/toolchain/triton_compile.py). The first variant is the default: 256 experts in fp32, as in a
# DeepSeek-V3-style router; "wide" is a 1024-column row, e.g. a vocabulary slice.
KPILOT_SPECS = {
    "softmax_kernel": [
        {
            "name": "experts256",
            "signature": "out_ptr:*fp32, in_ptr:*fp32, in_row_stride:i32:16, out_row_stride:i32:16, "
                         "n_rows:i32, n_cols:i32:16",
            "constexprs": {"BLOCK_SIZE": 256},
            "num_warps": 4,
        },
        {
            "name": "wide",
            "signature": "out_ptr:*fp32, in_ptr:*fp32, in_row_stride:i32:16, out_row_stride:i32:16, "
                         "n_rows:i32, n_cols:i32:16",
            "constexprs": {"BLOCK_SIZE": 1024},
            "num_warps": 8,
        },
    ],
}


def softmax(x):
    """Launch on a 2-D CUDA/ROCm tensor (needs torch and a GPU; not used by offline compilation)."""
    import torch

    n_rows, n_cols = x.shape
    out = torch.empty_like(x, dtype=torch.float32)
    block = triton.next_power_of_2(n_cols)
    softmax_kernel[(n_rows,)](out, x, x.stride(0), out.stride(0), n_rows, n_cols, BLOCK_SIZE=block,
                              num_warps=4 if block <= 256 else 8)
    return out
