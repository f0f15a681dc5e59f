"""Routers of two or more kernel folders side by side over a range of token counts, for placing a dispatch
threshold (router_launch.h's merge_serves): for each shape, dtype and token count, each folder's routing_cuda router
timed in turn in one process on the same inputs (moe_large.checked_times_in_turn: L2 flushed, events, median of
200, the order reversed every other round), each output checked by the problem's check, and from 8,192 tokens the
stream floor (stream_floor.py). Writes examples/moe_topk_sigmoid/results/moe_token_sweep.json.

    python examples/moe_topk_sigmoid/benchmarks/moe_token_sweep.py --kernels base=DIR --kernels new=DIR
        [--shape softmax:8:2 ...] [--tokens 4096 ...] [--dtype bfloat16 ...] [--rounds 2] [--out FILE]

A shape is ROUTER:EXPERTS:K (plain, biased or softmax; the softmax renormalised over the k); by default the
shipped small-expert routers (Mixtral's softmax 8:2, Llama 4 Scout's plain 16:1) and the path shapes of 12 to 32
experts. The summary gives, per token count, each folder's time against the first's (geometric mean over shapes and
dtypes) and, per row width in bytes, the least token count from which the last folder was faster at every larger
one.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
MOE = ROOT / "examples" / "moe_topk_sigmoid"
sys.path[:0] = [str(ROOT / "src"), str(MOE), str(MOE / "kernels"), str(ROOT / "benchmarks"), str(Path(__file__).parent)]

import moe_large  # noqa: E402
from _common import environment  # noqa: E402

ROUTERS = ("plain", "biased", "softmax")
SHAPES = ("softmax:8:2", "plain:16:1", "biased:12:3", "softmax:24:5", "plain:32:4", "plain:8:8")
TOKENS = (4096, 8192, 16384, 32768, 65536, 100000)
DTYPES = ("float32", "bfloat16")
ITEMSIZE = {"float32": 4, "float16": 2, "bfloat16": 2}


def shape_arg(text: str) -> tuple[str, int, int]:
    """'softmax:8:2' -> ('softmax', 8, 2)."""
    parts = text.split(":")
    if len(parts) != 3 or parts[0] not in ROUTERS or not (parts[1].isdigit() and parts[2].isdigit()):
        raise argparse.ArgumentTypeError(f"--shape takes ROUTER:EXPERTS:K with ROUTER one of {', '.join(ROUTERS)}, "
                                         f"not {text!r}")
    router, experts, k = parts[0], int(parts[1]), int(parts[2])
    if not 1 <= k <= min(16, experts) or experts > 512:
        raise argparse.ArgumentTypeError(f"--shape {text}: experts 1 to 512 and k 1 to min(16, experts)")
    return router, experts, k


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kernels", action="append", required=True,
                    type=lambda t: moe_large.kernels_arg(t, "routing_cuda.py"),
                    help="NAME=FOLDER holding a routing_cuda.py (twice or more)")
    ap.add_argument("--shape", action="append", type=shape_arg, help="ROUTER:EXPERTS:K; default " + " ".join(SHAPES))
    ap.add_argument("--tokens", type=int, action="append", help="default " + " ".join(map(str, TOKENS)))
    ap.add_argument("--dtype", action="append", choices=sorted(ITEMSIZE), help="default float32 and bfloat16")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--out", type=Path, default=MOE / "results" / "moe_token_sweep.json")
    args = ap.parse_args(argv)
    if len(args.kernels) < 2 or len({n for n, _ in args.kernels}) != len(args.kernels):
        ap.error("--kernels takes two or more folders, each with a name of its own")
    if args.rounds < 1 or (args.tokens and min(args.tokens) < 1):
        ap.error("--rounds and --tokens must be 1 or more")
    return args


def summarize(rows: list[dict], names: list[str]) -> dict:
    """Per token count each folder's time against the first's (geometric mean over the rows); per row width (bytes
    a token's logits take) the least token count from which the last folder was faster than the first at that
    count and every larger one swept (None: at none)."""
    from bench import geomean

    first, last = names[0], names[-1]
    by_tokens = {}
    for t in sorted({r["tokens"] for r in rows}):
        at = [r for r in rows if r["tokens"] == t]
        by_tokens[str(t)] = {n: geomean([r["kernels"][first]["us"] / r["kernels"][n]["us"] for r in at])
                             for n in names}
    from_tokens = {}
    for width in sorted({r["row_bytes"] for r in rows}):
        counts = sorted({r["tokens"] for r in rows if r["row_bytes"] == width})
        wins = {t: all(r["kernels"][last]["us"] < r["kernels"][first]["us"]
                       for r in rows if r["row_bytes"] == width and r["tokens"] == t) for t in counts}
        least = None
        for t in reversed(counts):
            if not wins[t]:
                break
            least = t
        from_tokens[str(width)] = least
    return {"correct": {n: sum(r["kernels"][n]["ok"] for r in rows) for n in names}, "cases": len(rows),
            f"speedup_over_{first}_by_tokens": by_tokens,
            f"least_tokens_{last}_faster_by_row_bytes": from_tokens}


def main() -> None:
    import torch

    import reference as ref
    from stream_floor import stream_floor_us

    args = parse_args()
    if not torch.cuda.is_available():
        sys.exit("moe_token_sweep.py needs a GPU")
    modules = {n: moe_large.load_kernels(n, f, "routing_cuda.py") for n, f in args.kernels}
    names = list(modules)
    g = torch.Generator(device="cuda").manual_seed(0)
    rows = []
    for router, experts, k in args.shape or [shape_arg(s) for s in SHAPES]:
        extra = {"renormalize": True} if router == "softmax" else {}
        for dtype in args.dtype or DTYPES:
            for tokens in args.tokens or TOKENS:
                x = torch.randn(tokens, experts, device="cuda", generator=g).to(getattr(torch, dtype))
                bias = torch.randn(experts, device="cuda", generator=g) * 0.1 if router == "biased" else None

                def call(n):
                    return modules[n].route(router, x, bias, k, **extra)

                def check(out):
                    return ref.check_router(lambda *a, **kw: out, router, x, bias, k, extra)

                times, failures = moe_large.checked_times_in_turn(names, call, check, args.rounds)
                row = {"router": router, "experts": experts, "k": k, "dtype": dtype, "tokens": tokens,
                       "row_bytes": experts * ITEMSIZE[dtype],
                       "kernels": {n: {"us": round(times[n], 3), "ok": not failures[n],
                                       "message": failures[n][0] if failures[n] else "ok"} for n in names}}
                if tokens >= 8192:
                    row["stream"] = stream_floor_us(tokens, experts, k, dtype, bias is not None)
                rows.append(row)
                print(json.dumps(row), flush=True)
    summary = summarize(rows, names)
    print(json.dumps(summary))
    args.out.parent.mkdir(exist_ok=True)
    args.out.write_text(json.dumps({"environment": environment(), "kernels": {n: str(f) for n, f in args.kernels},
                                    "rounds": args.rounds, "summary": summary, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
