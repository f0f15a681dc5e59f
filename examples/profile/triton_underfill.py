"""A Triton sum over 64 M floats launched with only 8 programs: each loops over an eighth of the input, so
8 of the GPU's SMs work and the rest idle (the planted problem: launch underfill).

    kpilot profile --kernel underfill_sum -- python examples/profile/triton_underfill.py
"""

import torch
import triton
import triton.language as tl

PROGRAMS = 8


@triton.jit
def underfill_sum(x_ptr, out_ptr, n, chunk, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    start = pid * chunk
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for off in range(start, start + chunk, BLOCK):
        idx = off + tl.arange(0, BLOCK)
        acc += tl.load(x_ptr + idx, mask=idx < n, other=0.0)
    tl.atomic_add(out_ptr, tl.sum(acc, axis=0))


def total(x: torch.Tensor) -> torch.Tensor:
    out = torch.zeros(1, device=x.device, dtype=torch.float32)
    chunk = triton.cdiv(x.numel(), PROGRAMS)
    underfill_sum[(PROGRAMS,)](x, out, x.numel(), chunk, BLOCK=1024)
    return out


if __name__ == "__main__":
    x = torch.rand(1 << 26, device="cuda")
    for _ in range(3):
        got = total(x)
    torch.cuda.synchronize()
    want = x.double().sum()
    assert abs(got.item() - want.item()) / want.item() < 1e-4, (got.item(), want.item())
    print("ok", got.item())
