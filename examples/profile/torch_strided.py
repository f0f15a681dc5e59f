"""A PyTorch program that copies every 16th float of a large tensor (a strided view made contiguous): each
thread of the copy kernel reads 4 bytes out of its own 64-byte span, so a warp's read touches 32 sectors
where 4 would do (the planted problem: uncoalesced access).

    kpilot profile --kernel elementwise -- python examples/profile/torch_strided.py
"""

import torch

if __name__ == "__main__":
    x = torch.randn(1 << 28, device="cuda")          # 1 GiB
    for _ in range(3):
        y = x[::16].contiguous()
    torch.cuda.synchronize()
    assert y.numel() == x.numel() // 16 and torch.equal(y[:4], x[:64:16])
    print("ok", y.numel())
