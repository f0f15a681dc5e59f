"""The stream floor of a case: the time of a kernel that only reads the case's inputs and writes outputs of its
size, timed as `kpilot bench` times a candidate. No top-k kernel can be faster in practice, so the distance from
it says how much of a kernel's time is selection rather than memory traffic.

The kernel reads every logit (and the bias) once, takes each row's maximum, and writes it as the k weights and
0 as the k ids: the bytes of the problem's [cost], in 128-bit loads where the rows allow. The floor is the
fastest of a few tile shapes, each timed with L2 flushed before every call (the median of 200 calls).
"""

from __future__ import annotations

import statistics

import torch
import triton
import triton.language as tl

SHAPES = [(4, 4), (8, 4), (16, 4), (16, 8), (32, 8)]   # (rows per program, warps)


def results_name(gpu: str) -> str:
    """The GPU's name as the results files carry it: 'NVIDIA H200' -> 'h200'."""
    return gpu.replace("NVIDIA ", "").replace(" ", "_").lower()


@triton.jit
def stream_kernel(x_ptr, bias_ptr, w_ptr, ids_ptr, tokens, E: tl.constexpr, EP: tl.constexpr, K: tl.constexpr,
                  KP: tl.constexpr, ROWS: tl.constexpr, HAS_BIAS: tl.constexpr):
    # EP, KP: E and K rounded up to powers of two (a tile's sides), the rest masked
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    cols = tl.arange(0, EP)
    ok = rows[:, None] < tokens
    x = tl.load(x_ptr + rows[:, None] * E + cols[None, :], mask=ok & (cols < E)[None, :],
                other=-float("inf")).to(tl.float32)
    if HAS_BIAS:
        x = x + tl.load(bias_ptr + cols, mask=cols < E, other=0.0)[None, :]
    m = tl.max(x, axis=1)
    ks = tl.arange(0, KP)
    out = rows[:, None] * K + ks[None, :]
    written = ok & (ks < K)[None, :]
    tl.store(w_ptr + out, m[:, None] + tl.zeros([ROWS, KP], dtype=tl.float32), mask=written)
    tl.store(ids_ptr + out, tl.zeros([ROWS, KP], dtype=tl.int32), mask=written)


def stream(logits: torch.Tensor, bias, k: int, rows: int = 16, warps: int = 4):
    """Row maxima as the k weights, zeros as the ids (any expert count and k)."""
    tokens, experts = logits.shape
    w = torch.empty(tokens, k, device=logits.device, dtype=torch.float32)
    ids = torch.empty(tokens, k, device=logits.device, dtype=torch.int32)
    stream_kernel[(triton.cdiv(tokens, rows),)](logits, bias if bias is not None else logits, w, ids, tokens,
                                                E=experts, EP=triton.next_power_of_2(experts), K=k,
                                                KP=triton.next_power_of_2(k), ROWS=rows, HAS_BIAS=bias is not None,
                                                num_warps=warps)
    return w, ids


def flushed_median_us(call, calls: int = 200, flush_l2: bool = True) -> float:
    """A call timed as `kpilot bench` times a candidate (L2 flushed, the GPU kept busy while the host launches,
    CUDA events around the call): the median of `calls`, after 20 calls not counted. With `flush_l2` False the
    call finds in L2 what the one before left there."""
    from kernelpilot.evaluate.timing import gpu_sampler

    sample = gpu_sampler(call, flush_l2=flush_l2)
    for i in range(-20, 0):
        sample(i)
    return statistics.median(sample(i) for i in range(calls))


def stream_floor_us(tokens: int, experts: int, k: int, dtype: str, with_bias: bool, calls: int = 200) -> dict:
    """The fastest tile shape's median time on the GPU: {"us": .., "rows": .., "warps": ..}."""
    logits = torch.randn(tokens, experts, device="cuda").to(getattr(torch, dtype))
    bias = torch.randn(experts, device="cuda") * 0.1 if with_bias else None
    best = None
    for rows, warps in SHAPES:
        us = flushed_median_us(lambda: stream(logits, bias, k, rows, warps), calls)
        if best is None or us < best["us"]:
            best = {"us": round(us, 3), "rows": rows, "warps": warps}
    return best


def main() -> None:
    """Every case of 8192 tokens or more, all dtypes, both variants: results/<gpu>.stream.json."""
    import json
    import sys
    from pathlib import Path

    here = Path(__file__).resolve().parent
    sys.path.insert(0, str(here.parents[1] / "src"))
    if not torch.cuda.is_available():
        sys.exit("stream_floor.py needs a GPU")
    gpu = torch.cuda.get_device_name()
    rows = []
    for dtype in ("bfloat16", "float16", "float32"):
        for with_bias in (False, True):
            for experts in (64, 128, 256):
                for tokens in (8192, 65536):
                    for k in (4, 8):
                        best = stream_floor_us(tokens, experts, k, dtype, with_bias)
                        row = {"variant": "biased" if with_bias else "plain", "dtype": dtype, "experts": experts,
                               "tokens": tokens, "k": k} | best
                        rows.append(row)
                        print(json.dumps(row), flush=True)
    (here / "results" / f"{results_name(gpu)}.stream.json").write_text(json.dumps({"gpu": gpu, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
