"""A quick look at the MoE CUDA kernel on the large cases (65,536 tokens by default): each algorithm's time (timed
as `kpilot bench` times a candidate: L2 flushed, events, median of 200), whether its outputs pass the problem's
check, and the stream floor of the case (examples/moe_topk_sigmoid/stream_floor.py). For iterating on the
kernel between full runs of bench.py; writes benchmarks/results/moe_large.json.

    python benchmarks/moe_large.py [--dtype bfloat16 ...] [--tokens 65536 ...] [--algo keys ...]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MOE = ROOT / "examples" / "moe_topk_sigmoid"
sys.path[:0] = [str(ROOT / "src"), str(MOE), str(MOE / "kernels"), str(ROOT / "benchmarks")]

from _common import environment  # noqa: E402


def main() -> None:
    import torch

    import reference as ref
    import topk_sigmoid_cuda
    from stream_floor import flushed_median_us, stream_floor_us

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dtype", action="append")
    ap.add_argument("--tokens", type=int, action="append")
    ap.add_argument("--algo", action="append", choices=sorted(topk_sigmoid_cuda.ALGOS))
    ap.add_argument("--no-stream", action="store_true", help="skip the stream floor")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        sys.exit("moe_large.py needs a GPU")
    rows = []
    for dtype in args.dtype or ["bfloat16"]:
        for variant in ("plain", "biased"):
            for experts in (64, 128, 256):
                for tokens in args.tokens or [65536]:
                    for k in (4, 8):
                        case = {"experts": experts, "tokens": tokens, "k": k, "dtype": dtype}
                        make = ref.make_inputs_biased if variant == "biased" else ref.make_inputs
                        x, bias, _ = make(case, 1, "cuda")
                        want = ref.topk_sigmoid(x, bias, k)
                        row = {"variant": variant} | case
                        for algo in args.algo or ["keys", "keys_persistent"]:
                            ok, msg = ref.check((x, bias, k), topk_sigmoid_cuda.run(x, bias, k, algo), want)
                            us = flushed_median_us(lambda: topk_sigmoid_cuda.run(x, bias, k, algo))
                            row[algo] = {"us": round(us, 3), "ok": ok, "message": msg}
                        if not args.no_stream:
                            row["stream"] = stream_floor_us(tokens, experts, k, dtype, bias is not None)
                        rows.append(row)
                        print(json.dumps(row), flush=True)
    out = ROOT / "benchmarks" / "results" / "moe_large.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps({"environment": environment(), "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
