"""How far 0.5 + 0.5 * tanh.approx.f32(x / 2) is from the sigmoid on the GPU: every bf16 and every fp16 value, and
fp32 values (16.8 million evenly spaced over [-64, 64], 16.8 million drawn from N(0, 4^2)), against torch.sigmoid in
float64. A bound on that distance is what lets a kernel rule chunks of experts out on approximate scores. Prints the
largest error per dtype and where it is; writes examples/moe_topk_sigmoid/results/approx_sigmoid_error.json (and a
line of its .jsonl history).

    python examples/moe_topk_sigmoid/benchmarks/approx_sigmoid_error.py
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
RESULTS = ROOT / "examples" / "moe_topk_sigmoid" / "results"
sys.path[:0] = [str(ROOT / "src"), str(ROOT / "benchmarks")]

import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from _common import write_results  # noqa: E402


@triton.jit
def approx_sigmoid(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    """0.5 + 0.5 * tanh.approx.f32(x / 2) for n fp32 values (NVIDIA only: PTX)."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n)
    th = tl.inline_asm_elementwise("tanh.approx.f32 $0, $1;", "=f,f", [x * 0.5], dtype=tl.float32, is_pure=True,
                                   pack=1)
    tl.store(y_ptr + offs, 0.5 * th + 0.5, mask=offs < n)


def main() -> None:
    import torch

    if not torch.cuda.is_available():
        sys.exit("approx_sigmoid_error.py needs an NVIDIA GPU")

    def worst(x32: torch.Tensor) -> dict:
        x32 = x32[torch.isfinite(x32)].contiguous()
        y = torch.empty_like(x32)
        approx_sigmoid[(triton.cdiv(x32.numel(), 1024),)](x32, y, x32.numel(), BLOCK=1024)
        err = (y.double() - torch.sigmoid(x32.double())).abs()
        i = int(err.argmax())
        return {"values": x32.numel(), "max_abs_error": float(err[i]), "at": float(x32[i])}

    every16 = torch.arange(-32768, 32768, dtype=torch.int32, device="cuda").to(torch.int16)
    out = {
        "bfloat16": worst(every16.view(torch.bfloat16).float()),
        "float16": worst(every16.view(torch.float16).float()),
        "float32": worst(torch.cat([torch.linspace(-64, 64, 1 << 24, device="cuda"),
                                    torch.randn(1 << 24, device="cuda") * 4])),
    }
    for dtype, r in out.items():
        print(f"{dtype:9} {r['values']:9} values: largest error {r['max_abs_error']:.3e} at x = {r['at']:.7g}")
    print(write_results("approx_sigmoid_error", {"gpu": torch.cuda.get_device_name(), **out}, folder=RESULTS))


if __name__ == "__main__":
    main()
