"""Each router's cost inside a CUDA graph of many calls, as a model served under CUDA graphs pays it, against the
natural PyTorch's there.

`kpilot bench --graphs` replays a graph of one call, events around the replay: a kernel of one launch still pays
the graph's launch (about the 3.6 us launch floor on an H100), so on small cases both a one-kernel router and the
natural PyTorch's several kernels are held by it. A served model captures a whole step in one graph, where the
router is one node among many and what it costs is its kernels' run and the gaps between them. Here, for each case
of the four problems, N calls (inputs made from N seeds, each call its own) are captured in one graph, for
`dispatch.py` and for the natural PyTorch (kernels/natural_pytorch.py); the L2 is flushed before each replay (every
call's inputs are then read from memory), events around the replay, the median of the replays over N is the time
of a call. A graph of one call is timed the same way beside it (what `kpilot bench --graphs` measures). The first
and last call's outputs are checked with the problem's own check. Writes
examples/moe_topk_sigmoid/results/moe_in_graph.json:

    python examples/moe_topk_sigmoid/benchmarks/moe_in_graph.py [--calls 16] [--variant grouped ...]
                                                                [--dtype bfloat16 ...] [--tokens 1 ...]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
MOE = ROOT / "examples" / "moe_topk_sigmoid"
sys.path[:0] = [str(ROOT / "src"), str(MOE), str(MOE / "kernels"), str(MOE / "benchmarks"), str(ROOT / "benchmarks")]

from _common import environment  # noqa: E402
from moe_routers import PROBLEM, VARIANTS  # noqa: E402


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=16, help="calls captured in one graph (default 16)")
    ap.add_argument("--variant", action="append", choices=VARIANTS, help="default all four")
    ap.add_argument("--dtype", action="append", choices=["float32", "float16", "bfloat16"], help="default all three")
    ap.add_argument("--tokens", type=int, action="append")
    ap.add_argument("--replays", type=int, default=100, help="timed replays of each graph (default 100)")
    ap.add_argument("--out", type=Path, default=MOE / "results" / "moe_in_graph.json")
    args = ap.parse_args(argv)
    if args.calls < 2:
        ap.error("--calls must be 2 or more (a graph of one call is timed anyway)")
    if args.replays < 3:
        ap.error("--replays must be 3 or more")
    return args


def per_call_us(fn, sets: list, replays: int) -> tuple[float, list]:
    """The time of one call of `fn` inside a graph of len(sets) calls (one a set of inputs): the median replay,
    L2 flushed before each, over the calls; and the captured outputs."""
    import torch
    from stream_floor import flushed_median_us

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):      # warm-up off the capture (compiles, allocations, autotuning)
        for inputs in sets[:2]:
            fn(*inputs)
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        outs = [fn(*inputs) for inputs in sets]
    return flushed_median_us(graph.replay, replays) / len(sets), outs


def summarize(rows: list[dict]) -> dict:
    """Cases, those whose outputs were right, and the geometric means of the natural PyTorch's time over
    dispatch.py's: per call in a graph of many calls, and in a graph of one (as kpilot bench --graphs)."""
    from bench import geomean

    return {"cases": len(rows), "correct": sum(r["ok"] for r in rows),
            "geomean_vs_natural_in_graph": geomean(r["natural_in_graph_us"] / r["ours_in_graph_us"] for r in rows),
            "geomean_vs_natural_graph_of_one": geomean(r["natural_graph_of_one_us"] / r["ours_graph_of_one_us"]
                                                       for r in rows)}


def main() -> None:
    import torch

    import dispatch
    import natural_pytorch
    import reference as ref

    from kernelpilot.evaluate.problem import load_problem

    args = parse_args()
    if not torch.cuda.is_available():
        sys.exit("moe_in_graph.py needs a GPU")
    rows = []
    for variant in args.variant or VARIANTS:
        make_name, check_name, entry = PROBLEM[variant]
        make, check, want_fn = getattr(ref, make_name), getattr(ref, check_name), getattr(ref, entry)
        fns = {"ours": getattr(dispatch, entry), "natural": getattr(natural_pytorch, entry)}
        for case in load_problem(MOE / variant).cases:
            p = case.params
            if case.hidden or (args.dtype and p["dtype"] not in args.dtype) or (args.tokens and p["tokens"] not in args.tokens):
                continue
            sets = [make(p, seed, "cuda") for seed in range(1, args.calls + 1)]
            row = {"variant": variant, "case": case.name, "tokens": p["tokens"], "experts": p["experts"], "k": p["k"],
                   "dtype": p["dtype"], "calls": args.calls, "ok": True, "message": "ok"}
            for name, fn in fns.items():
                us, outs = per_call_us(fn, sets, args.replays)
                row[f"{name}_in_graph_us"] = round(us, 3)
                row[f"{name}_graph_of_one_us"] = round(per_call_us(fn, sets[:1], args.replays)[0], 3)
                if name == "ours":
                    for j in (0, len(sets) - 1):
                        ok, msg = check(sets[j], outs[j], want_fn(*sets[j]))
                        if not ok:
                            row["ok"], row["message"] = False, f"call {j}: {msg}"
                del outs
            row["vs_natural_in_graph"] = round(row["natural_in_graph_us"] / row["ours_in_graph_us"], 3)
            row["vs_natural_graph_of_one"] = round(row["natural_graph_of_one_us"] / row["ours_graph_of_one_us"], 3)
            del sets
            torch.cuda.empty_cache()
            rows.append(row)
            print(json.dumps(row), flush=True)

    summary = summarize(rows)
    print(json.dumps(summary))
    args.out.parent.mkdir(exist_ok=True)
    args.out.write_text(json.dumps({"environment": environment(), "summary": summary, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
