"""A quick look at every router of the case study on the GPU: for each case of the four problems (plain, biased,
softmax, grouped), the dispatcher's output checked with the problem's own check, its time and the natural
PyTorch's (kernels/natural_pytorch.py), both timed as `kpilot bench` times a candidate (L2 flushed, events, median
of 200), and, at 8192 tokens or more, the case's stream floor (stream_floor.py). For iterating on the kernels
between full runs of bench.py; writes examples/moe_topk_sigmoid/results/moe_routers.json.

    python examples/moe_topk_sigmoid/benchmarks/moe_routers.py [--variant softmax ...] [--dtype bfloat16 ...]
                                                               [--tokens 100000 ...] [--router-only]

--router-only: only the cases the dispatcher sends to routing_cuda's kernel (every shape of the softmax and grouped
problems, and the sigmoid shapes outside the tuned kernels' grid).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
MOE = ROOT / "examples" / "moe_topk_sigmoid"
sys.path[:0] = [str(ROOT / "src"), str(MOE), str(MOE / "kernels"), str(ROOT / "benchmarks")]

from _common import environment  # noqa: E402

VARIANTS = ("plain", "biased", "softmax", "grouped")
# each problem's make_inputs, check and entry, as its problem.toml names them
PROBLEM = {"plain": ("make_inputs", "check", "topk_sigmoid"),
           "biased": ("make_inputs_biased", "check", "topk_sigmoid"),
           "softmax": ("make_inputs_softmax", "check_softmax", "topk_softmax"),
           "grouped": ("make_inputs_grouped", "check_grouped", "grouped_topk")}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--variant", action="append", choices=VARIANTS, help="default all four")
    ap.add_argument("--dtype", action="append", choices=["float32", "float16", "bfloat16"], help="default all three")
    ap.add_argument("--tokens", type=int, action="append")
    ap.add_argument("--router-only", action="store_true")
    ap.add_argument("--out", type=Path, default=MOE / "results" / "moe_routers.json")
    return ap.parse_args(argv)


def main() -> None:
    import torch

    import dispatch
    import natural_pytorch
    from bench import geomean
    import reference as ref
    from stream_floor import flushed_median_us, stream_floor_us

    from kernelpilot.evaluate.problem import load_problem

    args = parse_args()
    if not torch.cuda.is_available():
        sys.exit("moe_routers.py needs a GPU")
    rows = []
    for variant in args.variant or VARIANTS:
        make_name, check_name, entry = PROBLEM[variant]
        make, check, ours = getattr(ref, make_name), getattr(ref, check_name), getattr(dispatch, entry)
        want_fn, natural = getattr(ref, entry), getattr(natural_pytorch, entry)
        for case in load_problem(MOE / variant).cases:
            p = case.params
            if case.hidden or (args.dtype and p["dtype"] not in args.dtype) or (args.tokens and p["tokens"] not in args.tokens):
                continue
            inputs = make(p, 1, "cuda")
            logits, k = inputs[0], p["k"]
            if args.router_only and variant in ("plain", "biased") and dispatch.pick(logits, k) != "router":
                continue
            ok, msg = check(inputs, ours(*inputs), want_fn(*inputs))
            row = {"variant": variant, "case": case.name, "tokens": p["tokens"], "experts": p["experts"], "k": k,
                   "dtype": p["dtype"], "ok": ok, "message": msg,
                   "ours_us": round(flushed_median_us(lambda: ours(*inputs)), 3),
                   "natural_us": round(flushed_median_us(lambda: natural(*inputs)), 3)}
            row["vs_natural"] = round(row["natural_us"] / row["ours_us"], 3)
            if p["tokens"] >= 8192:
                bias = inputs[1] if variant in ("biased", "grouped") else None
                row["stream"] = stream_floor_us(p["tokens"], p["experts"], k, p["dtype"], bias is not None)
                row["vs_stream"] = round(row["ours_us"] / row["stream"]["us"], 3)
            rows.append(row)
            print(json.dumps(row), flush=True)

    large = [r["vs_stream"] for r in rows if "vs_stream" in r]
    summary = {"cases": len(rows), "correct": sum(r["ok"] for r in rows),
               "geomean_vs_natural": geomean([r["vs_natural"] for r in rows]),
               "large_cases": len(large), "large_within_1_5x_stream": sum(v <= 1.5 for v in large),
               "worst_vs_stream": max(large, default=None)}
    print(json.dumps(summary))
    args.out.parent.mkdir(exist_ok=True)
    args.out.write_text(json.dumps({"environment": environment(), "summary": summary, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
