"""A quick look at every router of the case study on the GPU: for each case of the four problems (plain, biased,
softmax, grouped), the dispatcher's output checked with the problem's own check, its time and the natural
PyTorch's (kernels/natural_pytorch.py), both timed as `kpilot bench` times a candidate (L2 flushed, events, median
of 200), and, at 8192 tokens or more, the case's stream floor (stream_floor.py). For iterating on the kernels
between full runs of bench.py; writes examples/moe_topk_sigmoid/results/moe_routers.json.

    python examples/moe_topk_sigmoid/benchmarks/moe_routers.py [--variant softmax ...] [--dtype bfloat16 ...]
                                                               [--tokens 100000 ...] [--router-only]

--router-only: only the cases the dispatcher sends to routing_cuda's kernel (every shape of the softmax and grouped
problems, and the sigmoid shapes outside the tuned kernels' grid).

With --kernels NAME=FOLDER (twice or more: folders holding a routing_cuda.py and its kernel files, say a copy of
kernels/ with a changed topk_router.cu), each case runs routing_cuda's router from each folder in turn, in one
process on the same inputs, over --rounds rounds (the order reversed every other round; moe_large.py's
checked_times_in_turn), each output checked; a row's "kernels" holds each one's time and check, and the summary
each one's speedups and floor counts and its time against the first's, case by case.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
MOE = ROOT / "examples" / "moe_topk_sigmoid"
sys.path[:0] = [str(ROOT / "src"), str(MOE), str(MOE / "kernels"), str(ROOT / "benchmarks")]

import moe_large  # noqa: E402
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
    ap.add_argument("--kernels", action="append", type=kernels_arg,
                    help="NAME=FOLDER, twice or more: their routing_cuda routers interleaved")
    ap.add_argument("--rounds", type=int, default=2, help="with --kernels: rounds per case (default 2)")
    ap.add_argument("--out", type=Path, default=MOE / "results" / "moe_routers.json")
    args = ap.parse_args(argv)
    if args.kernels is not None and (len(args.kernels) < 2 or len({n for n, _ in args.kernels}) != len(args.kernels)):
        ap.error("--kernels takes two or more folders, each with a name of its own")
    if args.rounds < 1:
        ap.error("--rounds must be 1 or more")
    return args


def kernels_arg(text: str) -> tuple[str, Path]:
    """'base=path/to/kernels' -> ('base', Path('path/to/kernels')), the folder holding a routing_cuda.py."""
    return moe_large.kernels_arg(text, "routing_cuda.py")


def summarize(rows: list[dict], names: list[str] | None = None) -> dict:
    """The run's summary: cases, correct ones, the geometric mean over the natural PyTorch, the large cases within
    1.5x of the stream floor and the farthest; with kernel names (rows from --kernels), those per kernel, and each
    one's time against the first's by geometric mean over the cases."""
    from bench import geomean

    def one(get) -> dict:
        large = [get(r)["us"] / r["stream"]["us"] for r in rows if "stream" in r]
        return {"cases": len(rows), "correct": sum(get(r)["ok"] for r in rows),
                "geomean_vs_natural": geomean([r["natural_us"] / get(r)["us"] for r in rows]),
                "large_cases": len(large), "large_within_1_5x_stream": sum(v <= 1.5 for v in large),
                "worst_vs_stream": round(max(large), 3) if large else None}

    if not names:
        return one(lambda r: {"us": r["ours_us"], "ok": r["ok"]})
    first = names[0]
    out = {}
    for n in names:
        out[n] = one(lambda r, n=n: r["kernels"][n])
        out[n]["speedup_over_" + first] = geomean([r["kernels"][first]["us"] / r["kernels"][n]["us"] for r in rows])
    return out


def main() -> None:
    import torch

    import dispatch
    import natural_pytorch
    import reference as ref
    from stream_floor import flushed_median_us, stream_floor_us

    from kernelpilot.evaluate.problem import load_problem

    args = parse_args()
    if not torch.cuda.is_available():
        sys.exit("moe_routers.py needs a GPU")
    modules = {n: moe_large.load_kernels(n, f, "routing_cuda.py") for n, f in args.kernels} if args.kernels else None
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
            want = want_fn(*inputs)
            row = {"variant": variant, "case": case.name, "tokens": p["tokens"], "experts": p["experts"], "k": k,
                   "dtype": p["dtype"]}
            if modules:
                routers = {n: getattr(m, entry) for n, m in modules.items()}
                times, failures = moe_large.checked_times_in_turn(list(routers), lambda n: routers[n](*inputs),
                                                                  lambda out: check(inputs, out, want), args.rounds)
                row["kernels"] = {n: {"us": round(times[n], 3), "ok": not failures[n],
                                      "message": failures[n][0] if failures[n] else "ok"} for n in routers}
            else:
                ok, msg = check(inputs, ours(*inputs), want)
                row |= {"ok": ok, "message": msg, "ours_us": round(flushed_median_us(lambda: ours(*inputs)), 3)}
            row["natural_us"] = round(flushed_median_us(lambda: natural(*inputs)), 3)
            if not modules:
                row["vs_natural"] = round(row["natural_us"] / row["ours_us"], 3)
            if p["tokens"] >= 8192:
                bias = inputs[1] if variant in ("biased", "grouped") else None
                row["stream"] = stream_floor_us(p["tokens"], p["experts"], k, p["dtype"], bias is not None)
                if not modules:
                    row["vs_stream"] = round(row["ours_us"] / row["stream"]["us"], 3)
            rows.append(row)
            print(json.dumps(row), flush=True)

    summary = summarize(rows, list(modules) if modules else None)
    print(json.dumps(summary))
    args.out.parent.mkdir(exist_ok=True)
    meta = {"kernels": {n: str(f) for n, f in args.kernels}, "rounds": args.rounds} if args.kernels else {}
    args.out.write_text(json.dumps({"environment": environment(), **meta, "summary": summary, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
