"""Time this example's kernels and the baselines with `kpilot bench` on the GPU it runs on, and write
results/<gpu>.json and results/<gpu>.md: per case, PyTorch eager, torch.compile, each kernel (CUDA events
with the L2 flushed, new inputs every call; and CUDA-graph replay), the floor, and the speedups.

Floor: the larger of the bytes the case must move over the GPU's peak bandwidth (the problem's [cost]) and
the launch floor, the CUDA-graph replay time of an empty kernel on this GPU.

    python examples/moe_topk_sigmoid/bench.py [--dtype bfloat16] [--budget 0.5] [--variant plain] [--tokens ...]
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1] / "src"))

from kernelpilot.evaluate.problem import load_problem  # noqa: E402
from kernelpilot.evaluate.runner import EvalOptions, bench  # noqa: E402

KERNELS = ["topk_sigmoid_triton.py", "topk_sigmoid_cuda.py", "dispatch.py"]


def launch_floor_us() -> float:
    """CUDA-graph replay time of an empty kernel (median of 200)."""
    import torch

    x = torch.zeros(1, device="cuda")
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        x.add_(0)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        x.add_(0)
    times = []
    for _ in range(200):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        g.replay()
        b.record()
        torch.cuda.synchronize()
        times.append(a.elapsed_time(b) * 1000)
    return statistics.median(times)


def main() -> None:
    import torch

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--budget", type=float, default=0.5)
    ap.add_argument("--variant", action="append", choices=["plain", "biased"])
    ap.add_argument("--tokens", type=int, action="append")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        sys.exit("bench.py needs a GPU")
    gpu = torch.cuda.get_device_name()
    floor_launch = launch_floor_us()
    rows = []
    for variant in args.variant or ["plain", "biased"]:
        prob = load_problem(HERE / variant)
        cases = [c.name for c in prob.cases if not c.hidden and c.params["dtype"] == args.dtype
                 and (not args.tokens or c.params["tokens"] in args.tokens)]
        per_kernel = {}
        baselines = None
        for i, kernel in enumerate(KERNELS):
            opts = EvalOptions(device="cuda", cases=cases, graphs=True, timing={"budget_s": args.budget},
                               baselines=["eager", "compile"] if i == 0 else [])
            res = bench(prob, HERE / "kernels" / kernel, opts)
            per_kernel[kernel] = {b.case: b for b in res.bench}
            if i == 0:
                baselines = {b.case: b.baselines for b in res.bench}
                floors = {b.case: (b.roofline or {}).get("floor_us") for b in res.bench}
            if not res.passed:
                print(f"{variant} {kernel}: did not pass: {res.error or [f.message for f in res.flags][:2]}")
        for case in cases:
            base = baselines.get(case, {})
            eager = (base.get("eager") or {}).get("median_us")
            comp = (base.get("compile") or {}).get("median_us")
            floor = max(floors.get(case) or 0.0, floor_launch)
            row = {"variant": variant, "case": case, "params": prob.case(case).params, "eager_us": eager,
                   "compile_us": comp, "floor_us": round(floor, 3)}
            for kernel, by_case in per_kernel.items():
                b = by_case.get(case)
                t = (b.timing or {}).get("median_us") if b else None
                g = (b.graph_timing or {}).get("median_us") if b and b.graph_timing else None
                row[kernel] = {"median_us": t, "graph_us": g, "check_ok": b.check_ok if b else False,
                               "vs_eager": round(eager / t, 3) if eager and t else None,
                               "vs_compile": round(comp / t, 3) if comp and t else None,
                               "of_floor": round(t / floor, 3) if t else None}
            rows.append(row)
            print(json.dumps(row))
    summary = {}
    for kernel in KERNELS:
        sp = [r[kernel]["vs_eager"] for r in rows if r[kernel]["vs_eager"]]
        summary[kernel] = {
            "geomean_vs_eager": round(math.exp(sum(map(math.log, sp)) / len(sp)), 3) if sp else None,
            "faster_than_compile": sum(1 for r in rows if (r[kernel]["vs_compile"] or 0) > 1),
            "cases": len(rows),
            "within_1_5x_floor_at_8192_tokens_or_more": all(
                (r[kernel]["of_floor"] or 99) <= 1.5 for r in rows if r["params"]["tokens"] >= 8192),
        }
    out = {"gpu": gpu, "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "dtype": args.dtype,
           "launch_floor_us": round(floor_launch, 3), "summary": summary, "rows": rows,
           "method": "kpilot bench: CUDA events around each call, L2 flushed (read pass) and new inputs before every "
                     "call, median until stable; timed outputs re-checked; CUDA-graph replay also timed (graph_us). "
                     "Baselines: the reference in eager PyTorch and under torch.compile, timed the same way."}
    name = gpu.replace("NVIDIA ", "").replace(" ", "_").lower()
    (HERE / "results").mkdir(exist_ok=True)
    (HERE / "results" / f"{name}.json").write_text(json.dumps(out, indent=1))
    from kernelpilot.runs.plot import PALETTE, series_png

    series = {k: [r[k]["vs_eager"] for r in rows] for k in KERNELS}
    series["torch.compile"] = [r["eager_us"] / r["compile_us"] if r["eager_us"] and r["compile_us"] else None
                               for r in rows]
    series_png(series, HERE / "results" / f"{name}_speedup.png")
    legend = ", ".join(f"{k}: rgb{PALETTE[i]}" for i, k in enumerate(series))
    md = [f"# MoE top-k sigmoid routing on {gpu} ({args.dtype})", "", out["method"], "",
          f"![speedup over eager per case]({name}_speedup.png)", "",
          f"Speedup over PyTorch eager per case (log scale; grey: 1x). Colours: {legend}.", "",
          "| variant | case | eager us | compile us | floor us | "
          + " | ".join(f"{k} us (graph us)" for k in KERNELS) + " |",
          "| --- | --- | --- | --- | --- | " + " | ".join("---" for _ in KERNELS) + " |"]
    for r in rows:
        md.append(f"| {r['variant']} | {r['case']} | {r['eager_us']} | {r['compile_us']} | {r['floor_us']} | "
                  + " | ".join(f"{r[k]['median_us']} ({r[k]['graph_us']})" for k in KERNELS) + " |")
    md += ["", "```json", json.dumps(summary, indent=1), "```"]
    (HERE / "results" / f"{name}.md").write_text("\n".join(md) + "\n")
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
