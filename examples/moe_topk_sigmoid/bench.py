"""Time this example's kernels and the baselines with `kpilot bench` on the GPU it runs on, and write
results/<gpu>.json and results/<gpu>.md: per case, PyTorch eager, torch.compile, each kernel (CUDA events
with the L2 flushed, new inputs every call; and CUDA-graph replay), the floor, and the speedups.

Floor: the larger of the bytes the case must move over the GPU's peak bandwidth (the problem's [cost]) and
the launch floor, a one-element kernel timed the same way on this GPU. Each bench run measures the launch floor
once (its rows file keeps that floor); the reports take the least launch floor of all the runs behind the GPU's
rows files, one floor for every case and dtype, since from run to run it moves by more than some cases' margin.
Stream floor (cases of 8192 tokens or more): a kernel that only reads the inputs and writes outputs of the case's
size, timed the same way (stream_floor.py): what memory traffic alone takes in practice.
Bound: the launch floor plus the bytes over the peak bandwidth. A kernel pays its launch, then moves its bytes, so
no kernel takes less; where the bound is above 1.5x the floor, no kernel is within 1.5x of it, whatever its code.

Each variant's rows go to results/<gpu>.<variant>.<dtype>.rows.json, and every rows file of the GPU and dtype
is merged into the report (results/<gpu>.<dtype>.md/.json and a plot), so the two variants can run at once (on
two GPUs, say). results/<gpu>.summary.json sums up every rows file of the GPU, all dtypes, for the kernels
timed on all of them. A run of some cases or kernels (--tokens, --kernel) updates the rows file it writes
to: the rows and kernels it did not time stay as they were, and the file lists every run that wrote to it.

A kernel whose event-timed median at a case is more than twice its CUDA-graph replay median (and 3 us or
more above it) was disturbed while it was timed (the graph replay runs the same kernels): that case is timed
again once, and the second median stands (the first is kept in the row as first_median_us).

    python examples/moe_topk_sigmoid/bench.py [--dtype bfloat16] [--budget 0.5] [--variant plain] [--tokens ...]
                                              [--kernel dispatch.py ...]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1] / "src"))
sys.path.insert(0, str(HERE.parents[1] / "benchmarks"))

from _common import environment  # noqa: E402

from kernelpilot.evaluate.problem import load_problem  # noqa: E402
from kernelpilot.evaluate.runner import EvalOptions, bench  # noqa: E402

STREAM_FROM_TOKENS = 8192   # the stream floor is measured for these cases (the floor target's)

KERNELS = ["topk_sigmoid_triton.py", "topk_sigmoid_cuda_warp.py", "topk_sigmoid_cuda.py", "topk_sigmoid_cuda_persistent.py",
           "dispatch.py"]
VARIANTS = ["plain", "biased", "softmax", "grouped"]
# The kernels that define each problem's entry: the sigmoid kernels serve plain and biased alone.
VARIANT_KERNELS = {"plain": KERNELS, "biased": KERNELS, "softmax": ["dispatch.py"], "grouped": ["dispatch.py"]}
WITH_BIAS = {"biased", "grouped"}
# The kernels written for the tuned grid alone (64, 128, 256 experts; k 4 or 8): timed on those cases only.
GRID_ONLY = {"topk_sigmoid_cuda_warp.py", "topk_sigmoid_cuda.py", "topk_sigmoid_cuda_persistent.py"}


def serves(kernel: str, params: dict) -> bool:
    return kernel not in GRID_ONLY or (params["experts"] in (64, 128, 256) and params["k"] in (4, 8))
# The routing a user writes in PyTorch (kernels/natural_pytorch.py): the headline baseline.
NATURAL = HERE / "kernels" / "natural_pytorch.py"


def launch_floor_us() -> float:
    """The launch floor: a one-element kernel timed as `kpilot bench` times a candidate (L2 flushed, the GPU
    kept busy while the host launches, CUDA events around the call), median of 200."""
    import torch

    from stream_floor import flushed_median_us

    x = torch.zeros(1, device="cuda")
    return flushed_median_us(lambda: x.add_(0))


def bench_variant(variant: str, dtype: str, budget: float, tokens: list[int] | None, floor_launch: float,
                  kernels: list[str]) -> list:
    """One row per case of the variant: the baselines, each kernel, the floor."""
    prob = load_problem(HERE / variant)
    cases = [c.name for c in prob.cases if not c.hidden and c.params["dtype"] == dtype
             and (not tokens or c.params["tokens"] in tokens)]
    per_kernel, baselines, floors, first, untimed = {}, {}, {}, {}, []
    # the first kernel serves the most cases and times the baselines on them; a case no kernel serves is left out
    kernels = sorted(kernels, key=lambda k: k in GRID_ONLY)
    cases = [c for c in cases if serves(kernels[0], prob.case(c).params)]
    for i, kernel in enumerate(kernels):
        served = [c for c in cases if serves(kernel, prob.case(c).params)]
        opts = EvalOptions(device="cuda", cases=served, graphs=True, timing={"budget_s": budget},
                           baselines=["eager", "compile", str(NATURAL)] if i == 0 else [])
        res = bench(prob, HERE / "kernels" / kernel, opts)
        per_kernel[kernel] = {b.case: b for b in res.bench}
        again = disturbed(per_kernel[kernel])
        if again:
            print(f"{variant} {kernel}: timed again (event median over twice the graph replay's): {', '.join(again)}")
            retimed = bench(prob, HERE / "kernels" / kernel, EvalOptions(
                device="cuda", cases=again, graphs=True, timing={"budget_s": budget}))
            for b in retimed.bench:
                first[kernel, b.case] = _us(per_kernel[kernel][b.case].timing)
                per_kernel[kernel][b.case] = b
        if i == 0:
            baselines = {b.case: b.baselines for b in res.bench}
            floors = {b.case: (b.roofline or {}).get("floor_us") for b in res.bench}
            untimed = [n for n in res.notes if n.startswith("baseline ") and " on case " in n]
        if not res.passed:
            print(f"{variant} {kernel}: did not pass: {res.error or [f.message for f in res.flags][:2]}")
    from stream_floor import stream_floor_us

    rows = []
    for case in cases:
        p = prob.case(case).params
        stream = (stream_floor_us(p["tokens"], p["experts"], p["k"], dtype, variant in WITH_BIAS)
                  if p["tokens"] >= STREAM_FROM_TOKENS else None)
        base = baselines.get(case, {})
        eager = _us(base["eager"].timing) if "eager" in base else None
        comp = _us(base["compile"].timing) if "compile" in base else None
        natural = base.get(NATURAL.name)
        floor = max(floors.get(case) or 0.0, floor_launch)
        row = {"variant": variant, "case": case, "params": prob.case(case).params, "eager_us": eager,
               "compile_us": comp, "natural_us": _us(natural.timing) if natural else None,
               "natural_graph_us": _us(natural.graph_timing) if natural else None, "floor_us": round(floor, 3),
               "stream_us": stream and stream["us"], "stream_shape": stream and [stream["rows"], stream["warps"]]}
        missing = [n for n in untimed if n.endswith(f" on case {case}") or f" on case {case}: " in n]
        if missing:
            row["baseline_errors"] = missing        # why a baseline has no time on this case
        for kernel, by_case in per_kernel.items():
            if not serves(kernel, row["params"]):
                continue                        # a kernel for the tuned grid alone: no entry, not a failure
            b = by_case.get(case)
            t, g = medians(b) if b else (None, None)
            row[kernel] = ratios(row, {"median_us": t, "graph_us": g, "check_ok": b.check_ok if b else False})
            if (kernel, case) in first:
                row[kernel]["first_median_us"] = first[kernel, case]
        rows.append(row)
        print(json.dumps(row))
    return rows


def medians(b) -> tuple[float | None, float | None]:
    """A case's bench result: its event-timed median and its CUDA-graph replay median (us)."""
    return _us(b.timing), _us(b.graph_timing)


def _us(timing) -> float | None:
    return timing.median_us if timing is not None else None


def disturbed(by_case: dict) -> list[str]:
    """The cases whose event-timed median is more than twice the CUDA-graph replay's and 3 us or more above it."""
    out = []
    for case, b in by_case.items():
        t, g = medians(b)
        if t and g and t > 2 * g and t - g >= 3.0:
            out.append(case)
    return out


def measured(entry: dict) -> dict:
    """A kernel's entry of a row without its ratios: what was measured, for ratios() to take them again."""
    return {f: v for f, v in entry.items() if not f.startswith(("vs_", "of_"))}


def ratios(row: dict, timed: dict) -> dict:
    """A kernel's entry of a row: its times and their ratios to the row's baselines and floors."""
    t, eager, comp, stream = timed["median_us"], row["eager_us"], row["compile_us"], row.get("stream_us")
    natural, natural_graph, g = row.get("natural_us"), row.get("natural_graph_us"), timed.get("graph_us")
    return timed | {"vs_eager": round(eager / t, 3) if eager and t else None,
                    "vs_compile": round(comp / t, 3) if comp and t else None,
                    "vs_natural": round(natural / t, 3) if natural and t else None,
                    "vs_natural_graphs": round(natural_graph / g, 3) if natural_graph and g else None,
                    "of_floor": round(t / row["floor_us"], 3) if t else None,
                    "of_stream": round(t / stream, 3) if t and stream else None}


def merged(old: list, new: list) -> list:
    """The rows of an earlier run updated by a later one that timed some cases or kernels: a case timed again
    takes the new baselines and floors, and the kernels the new run did not time keep their times, their
    ratios taken again against the new baselines; cases the new run did not time stay as they were. Cases
    keep the earlier order; new ones come last."""
    timed = {r["case"]: r for r in new}
    out = []
    for r in old:
        n = timed.pop(r["case"], None)
        if n is None:
            out.append(r)
            continue
        keep = {k: ratios(n, measured(e)) for k, e in r.items() if k in KERNELS and k not in n}
        out.append(n | keep)
    return out + list(timed.values())


def write_rows(path: Path, part: dict) -> None:
    """Write a variant's rows file; where one is there already, update it (merged) and list every run."""
    run = {k: part[k] for k in ("date", "git", "launch_floor_us")} | {
        "cases": len(part["rows"]), "kernels": present(part["rows"])}
    old = json.loads(path.read_text()) if path.exists() else {"rows": []}
    if {r["case"] for r in old["rows"]} <= {r["case"] for r in part["rows"]} and set(present(old["rows"])) <= set(run["kernels"]):
        part = part | {"runs": [run]}   # nothing of the earlier file is left
    else:
        runs = old.get("runs") or [{k: old.get(k) for k in ("date", "git", "launch_floor_us")}
                                   | {"cases": len(old["rows"]), "kernels": present(old["rows"])}]
        part = part | {"rows": merged(old["rows"], part["rows"]), "runs": runs + [run]}
    path.write_text(json.dumps(part, indent=1))


def summarize(rows: list, kernels: list[str]) -> dict:
    """Per kernel, over the rows that time it: the cases, those whose timed outputs were right, the geometric-mean
    speedup over the natural PyTorch (events, and CUDA-graph replays of both) and over eager, the cases faster than
    torch.compile (and the cases the natural PyTorch or torch.compile gave no time on, which no speedup counts), and
    the distance from the floor at 8192 tokens or more: how many of those
    cases are within 1.5x of it, on how many the stream floor itself is not (no kernel can be), on how many the
    bound is not (launch floor plus bytes at peak bandwidth: no kernel can be, whatever its code), and the others
    that the kernel misses (with the kernel's time over the floor, closest first)."""
    everywhere = rows
    summary = {}
    for kernel in kernels:
        rows = [r for r in everywhere if kernel in r]
        large = [r for r in rows if r["params"]["tokens"] >= 8192]
        unreachable = set(out_of_reach(rows))
        bounded = beyond_bound(rows)

        def met(r: dict) -> bool:   # right outputs in 1.5x of the floor or less
            return r[kernel]["check_ok"] and (r[kernel]["of_floor"] or 99) <= 1.5

        ok = [r for r in rows if r[kernel]["check_ok"]]   # a time of wrong outputs is no result
        summary[kernel] = {
            "cases": len(rows),
            "cases_with_outputs_ok": len(ok),
            "geomean_vs_natural": geomean(r[kernel].get("vs_natural") for r in ok),
            "geomean_vs_natural_graphs": geomean(r[kernel].get("vs_natural_graphs") for r in ok),
            "geomean_vs_eager": geomean(r[kernel]["vs_eager"] for r in ok),
            # the most any kernel could reach on these cases: the natural PyTorch's times over each case's bound
            "geomean_vs_natural_at_bound": geomean(r["natural_us"] / least_us(r) for r in ok if r.get("natural_us")),
            "geomean_vs_natural_graphs_at_bound": geomean(
                r["natural_graph_us"] / least_us(r) for r in ok if r.get("natural_graph_us")),
            "faster_than_compile": sum(1 for r in ok if (r[kernel]["vs_compile"] or 0) > 1),
            # cases a baseline gave no time on (its reason in the row's baseline_errors): left out of the speedups
            "cases_without_natural_time": sum(1 for r in rows if not r.get("natural_us")),
            "cases_without_compile_time": sum(1 for r in rows if not r.get("compile_us")),
            "worst_of_floor_at_8192_tokens_or_more": max(
                (r[kernel]["of_floor"] or 99 for r in ok if r["params"]["tokens"] >= 8192), default=None),
            "worst_of_stream_at_8192_tokens_or_more": max(
                (r[kernel].get("of_stream") or 99 for r in ok if r["params"]["tokens"] >= 8192 and r.get("stream_us")),
                default=None),
            "within_1_5x_floor_at_8192_tokens_or_more": len(ok) == len(rows) and all(met(r) for r in large),
            "cases_at_8192_tokens_or_more": len(large),
            "cases_within_1_5x_floor": sum(1 for r in large if met(r)),
            "cases_stream_floor_above_1_5x_floor": len(unreachable),
            "cases_bound_above_1_5x_floor": len(bounded),
            "reachable_not_within_1_5x_floor": dict(sorted(
                ((case_name(r), r[kernel]["of_floor"] if r[kernel]["check_ok"] else None)
                 for r in large if case_name(r) not in unreachable and not met(r)),
                key=lambda item: item[1] or 99)),
        }
    return summary


def least_us(r: dict) -> float:
    """The least time any kernel can take on a row's case: its bound (the launch floor plus the bytes at peak
    bandwidth), or its floor where the row has no bound."""
    return r.get("bound_us") or r["floor_us"]


def geomean(values) -> float | None:
    kept = [v for v in values if v]
    return round(math.exp(sum(map(math.log, kept)) / len(kept)), 3) if kept else None


def above_1_5x_floor(rows: list, field: str) -> list[str]:
    """The cases of 8192 tokens or more whose `field` (a time no kernel beats) is above 1.5x the floor."""
    return [case_name(r) for r in rows if r["params"]["tokens"] >= 8192 and r.get(field)
            and r[field] > 1.5 * r["floor_us"]]


def out_of_reach(rows: list) -> list[str]:
    """The cases of 8192 tokens or more whose stream floor is above 1.5x the floor: no kernel is within 1.5x."""
    return above_1_5x_floor(rows, "stream_us")


def beyond_bound(rows: list) -> list[str]:
    """The cases of 8192 tokens or more whose bound (bound_us: the launch floor plus the bytes at peak bandwidth)
    is above 1.5x the floor: no kernel can be within 1.5x, since it pays both."""
    return above_1_5x_floor(rows, "bound_us")


def case_name(r: dict) -> str:
    """A row's name in the summary: its variant, then its case."""
    return f"{r['variant']} {r['case']}"


def rows_files(name: str, dtype: str = "*") -> list:
    """The rows files of results/ of the GPU (NAME.<variant>.<dtype>.rows.json), every dtype's or one's."""
    return [json.loads(f.read_text()) for f in sorted((HERE / "results").glob(f"{name}.*.{dtype}.rows.json"))]


def load_rows(name: str, gpu: str, dtype: str = "*") -> tuple[list, list, float | None]:
    """The GPU's rows files, every dtype's or one's: their headers, all their rows with every floor taken again
    with the GPU's launch floor (common_launch_floor, over every dtype's files), and that floor."""
    parts = rows_files(name, dtype)
    rows = [r for part in parts for r in part["rows"]]
    if not rows:
        return parts, rows, None
    launch = common_launch_floor(parts if dtype == "*" else rows_files(name))
    return parts, refloored(rows, launch, gpu), launch


def common_launch_floor(parts: list) -> float:
    """The launch floor for the reports: the least measured by the bench runs behind these rows files."""
    return min(run["launch_floor_us"] for p in parts for run in (p.get("runs") or [p]) if run.get("launch_floor_us"))


def refloored(rows: list, launch_us: float, gpu: str) -> list:
    """The rows with each case's floor the larger of its bytes over the GPU's peak bandwidth and `launch_us`, its
    bound (bound_us) their sum, and every kernel's ratio to the floor taken again; the floor the row's own run used
    stays as run_floor_us."""
    from kernelpilot.evaluate.roofline import floor, gpu_from_device_name

    spec = gpu_from_device_name(gpu)
    costs = {v: load_problem(HERE / v).cost for v in {r["variant"] for r in rows}}
    out = []
    for r in rows:
        bytes_us = (floor(costs[r["variant"]], r["params"], spec) or {}).get("floor_us") or 0.0
        n = r | {"floor_us": round(max(bytes_us, launch_us), 3), "bound_us": round(bytes_us + launch_us, 3),
                 "run_floor_us": r.get("run_floor_us", r["floor_us"])}
        out.append(n | {k: ratios(n, measured(e)) for k, e in r.items() if k in KERNELS})
    return out


def present(rows: list) -> list[str]:
    """The kernels timed on any of the rows (the sigmoid kernels time plain and biased alone)."""
    return [k for k in KERNELS if any(k in r for r in rows)]


def run_history(part: dict) -> dict:
    """For a rows file more than one run wrote to: {"runs": those runs}."""
    return {"runs": part["runs"]} if len(part.get("runs") or []) > 1 else {}


def overall(name: str, gpu: str) -> None:
    """results/NAME.summary.json: every rows file of the GPU, all dtypes and variants, each kernel over the rows
    that time it."""
    parts, rows, launch = load_rows(name, gpu)
    summary = summarize(rows, present(rows))
    out = {"runs": [{k: p.get(k) for k in ("variant", "date", "git")} | {"dtype": p["rows"][0]["params"]["dtype"]}
                    | run_history(p) for p in parts if p["rows"]],
           "launch_floor_us": launch,
           "summary": summary,
           "stream_floor_above_1_5x_floor": out_of_reach(rows),
           "bound_above_1_5x_floor": beyond_bound(rows)}
    (HERE / "results" / f"{name}.summary.json").write_text(json.dumps(out, indent=1))
    print("all dtypes:", json.dumps(summary, indent=1))


def report(name: str, gpu: str, dtype: str) -> None:
    """Merge the rows files of every variant run on this GPU and dtype into NAME.DTYPE.json, .md and a plot."""
    parts, rows, launch = load_rows(name, gpu, dtype)
    kernels = present(rows)
    summary = summarize(rows, kernels)
    out = {"gpu": gpu, "dtype": dtype,
           "runs": [{k: p.get(k) for k in ("variant", "date", "git", "launch_floor_us")}
                    | run_history(p) for p in parts],
           "launch_floor_us": launch,
           "summary": summary, "stream_floor_above_1_5x_floor": out_of_reach(rows),
           "bound_above_1_5x_floor": beyond_bound(rows), "rows": rows, "method": METHOD}
    (HERE / "results" / f"{name}.{dtype}.json").write_text(json.dumps(out, indent=1))
    from kernelpilot.runs.plot import series_png

    series = {k: [r[k]["vs_eager"] if k in r else None for r in rows] for k in kernels}
    series["torch.compile"] = [r["eager_us"] / r["compile_us"] if r["eager_us"] and r["compile_us"] else None
                               for r in rows]
    series_png(series, HERE / "results" / f"{name}.{dtype}_speedup.png", title=f"MoE routing on {gpu} ({dtype})")
    md = [f"# MoE routing on {gpu} ({dtype})", "", METHOD, "",
          f"![speedup over eager per case]({name}.{dtype}_speedup.png)", "",
          "Speedup over PyTorch eager per case (log scale; dotted: 1x; the legend names each kernel).", "",
          "| variant | case | natural PyTorch us (graph us) | eager us | compile us | floor us | bound us | stream us | "
          + " | ".join(f"{k} us (graph us)" for k in kernels) + " |",
          "| --- | --- | --- | --- | --- | --- | --- | --- | " + " | ".join("---" for _ in kernels) + " |"]
    for r in rows:
        md.append(f"| {r['variant']} | {r['case']} | {r.get('natural_us')} ({r.get('natural_graph_us')}) | "
                  f"{r['eager_us']} | {r['compile_us']} | {r['floor_us']} | {r.get('bound_us')} | {r.get('stream_us')} | "
                  + " | ".join("-" if k not in r else f"{r[k]['median_us']} ({r[k]['graph_us']})"
                               + ("" if r[k]["check_ok"] else " WRONG") for k in kernels) + " |")
    md += ["", "WRONG: the kernel's timed outputs failed the re-check, so its time is not a result.", "",
           "```json", json.dumps(summary, indent=1), "```"]
    (HERE / "results" / f"{name}.{dtype}.md").write_text("\n".join(md) + "\n")
    print(json.dumps(summary, indent=1))
    overall(name, gpu)


METHOD = ("kpilot bench: CUDA events around each call, L2 flushed (read pass) and new inputs before every call, "
          "median until stable; timed outputs re-checked; CUDA-graph replay also timed (graph_us). Baselines: the "
          "routing a user writes in PyTorch (kernels/natural_pytorch.py, torch.topk; the headline), and the problem's "
          "reference in eager PyTorch and under torch.compile (default options), all timed the same way, the natural "
          "PyTorch also as CUDA-graph replays (vs_natural_graphs: both replayed). Floor: the "
          "larger of the case's bytes over the GPU's peak bandwidth and the launch floor (a one-element kernel "
          "timed the same way; the least of the runs' measurements, launch_floor_us). Stream floor (8192 tokens or "
          "more): a kernel that only reads the inputs and writes outputs of the case's size (stream_floor.py), the "
          "fastest of a few tile shapes, timed the same way. Bound: the launch floor plus the case's bytes over the "
          "peak bandwidth, the least any kernel can take (it pays its launch, then moves its bytes); where it is "
          "above 1.5x the floor, no kernel is within 1.5x of the floor.")


def main() -> None:
    import torch

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--budget", type=float, default=0.5)
    ap.add_argument("--variant", action="append", choices=VARIANTS)
    ap.add_argument("--tokens", type=int, action="append")
    ap.add_argument("--kernel", action="append", choices=KERNELS, help="only these kernels (default: all)")
    ap.add_argument("--report-only", metavar="GPU", help="rebuild the report from the rows files of this GPU "
                    "(e.g. 'NVIDIA H200') without running anything")
    args = ap.parse_args()
    from stream_floor import results_name

    if args.report_only:
        report(results_name(args.report_only), args.report_only, args.dtype)
        return
    if not torch.cuda.is_available():
        sys.exit("bench.py needs a GPU")
    gpu = torch.cuda.get_device_name()
    name = results_name(gpu)
    floor_launch = launch_floor_us()
    (HERE / "results").mkdir(exist_ok=True)
    for variant in args.variant or VARIANTS:
        kernels = [k for k in VARIANT_KERNELS[variant] if not args.kernel or k in args.kernel]
        rows = bench_variant(variant, args.dtype, args.budget, args.tokens, floor_launch, kernels)
        env = environment()   # tool versions and the commit measured (KPILOT_GIT_REV where git history is absent)
        part = {"variant": variant, "date": env["date"], "git": env["git"], "environment": env,
                "launch_floor_us": round(floor_launch, 3), "rows": rows}
        write_rows(HERE / "results" / f"{name}.{variant}.{args.dtype}.rows.json", part)
    report(name, gpu, args.dtype)


if __name__ == "__main__":
    main()
