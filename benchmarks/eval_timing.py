"""Is the harness's timing right? Run on a GPU machine (it refuses without one).

1. Agreement with Nsight Compute: for each case of benchmarks/problems/softmax_large, the harness's median
   (CUDA events, L2 flushed) against ncu's gpu__time_duration of the same kernel on the same inputs (ncu
   flushes caches between kernels by default). Target: within 5% for kernels of 20 us or more. Also the
   kernel's CUPTI duration in-process (where a difference comes from: the events or the GPU's state), and the
   harness's host launch time and untimed tail.
2. Repeatability: the same candidate benchmarked twice in separate runs; median-to-median difference.
   Target: under 2%.
3. Speed: `evaluate` (check on one small case with one seed, then bench it) of one candidate with Triton's
   cache warm (compile excluded). Target: under 5 s.

   Measured twice: cold (worker processes started for the job, as one `kpilot eval` does) and with workers
   started ahead (a WorkerPool, as the optimization loop keeps them).

Writes benchmarks/results/eval_timing.json (and appends to eval_timing.jsonl).
Run: python benchmarks/eval_timing.py [--only agreement|speed]   (ncu must be on PATH for part 1)
"""

from __future__ import annotations

import csv
import io
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import write_results  # noqa: E402

from kernelpilot.evaluate.isolation import WorkerPool  # noqa: E402
from kernelpilot.evaluate.runner import EvalOptions, bench, evaluate  # noqa: E402
from kernelpilot.profile.ncu_csv import to_base  # noqa: E402
from kernelpilot.toolchain.run import kernelpilot_env  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
PROBLEM = ROOT / "benchmarks" / "problems" / "softmax_large"
CANDIDATE = ROOT / "examples" / "problems" / "row_softmax" / "candidates" / "triton_softmax.py"
TIMED_CASES = ["20us", "100us", "400us"]

def ncu_times(case: str, reps: int = 20) -> list[float]:
    """gpu__time_duration (us) of each launch of the candidate's kernel under Nsight Compute: the candidate
    driven on the case as `kpilot profile --problem` drives it (warm-up outside the profiled range)."""
    from kernelpilot.evaluate.drive import command

    cmd = ["ncu", "--clock-control", "none", "--profile-from-start", "off", "--metrics", "gpu__time_duration.sum",
           "-k", "regex:softmax_kernel", "--csv", *command(PROBLEM, CANDIDATE, case=case, calls=reps, device="cuda")]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=kernelpilot_env())
    if p.returncode != 0:
        raise RuntimeError(f"ncu failed ({p.returncode}): {p.stderr[-2000:]}")
    lines = [l for l in p.stdout.splitlines() if l.startswith('"')]
    rows = list(csv.DictReader(io.StringIO("\n".join(lines))))
    out = []
    for r in rows:
        if r.get("Metric Name") == "gpu__time_duration.sum":
            out.append(to_base(float(r["Metric Value"].replace(",", "")), r.get("Metric Unit", ""))[0])   # us
    return out


def cupti_times(case: str, reps: int = 20) -> list[float]:
    """The kernel's duration per launch from CUPTI's activity records (the PyTorch profiler), in this process,
    the L2 flushed (read pass) before each call as the harness does. Against the harness it isolates what the
    events add (their own overhead, gaps before a late launch); against ncu, what differs in the GPU's state."""
    import torch

    from kernelpilot.evaluate.formats import runtime_for
    from kernelpilot.evaluate.problem import load_problem
    from kernelpilot.evaluate.timing import l2_flusher
    from kernelpilot.profile.torch_timing import launches_from_trace

    prob = load_problem(PROBLEM)
    rt = runtime_for(prob)
    fn = rt.load_candidate(CANDIDATE, "cuda", 0)
    x = rt.make_inputs(prob.case(case), 1234, "cuda")
    flush = l2_flusher("cuda", "read")
    for _ in range(3):
        fn(*x)
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            flush()
            fn(*x)
        torch.cuda.synchronize()
    with tempfile.TemporaryDirectory() as d:
        trace = Path(d) / "trace.json"
        prof.export_chrome_trace(str(trace))
        launches = launches_from_trace(json.loads(trace.read_text()), kernel="softmax_kernel")
    return [k.duration_us for k in launches if k.duration_us]


def agreement() -> dict:
    """Parts 1 and 2: the harness against Nsight Compute, and against itself."""
    opts = EvalOptions(device="cuda", cases=TIMED_CASES, verify=2, timing={"budget_s": 3.0, "max_n": 500})
    first = bench(PROBLEM, CANDIDATE, opts)
    second = bench(PROBLEM, CANDIDATE, opts)
    # the flush most harnesses use (zeroing a buffer leaves L2 full of dirty lines), for comparison
    dirty = bench(PROBLEM, CANDIDATE, EvalOptions(device="cuda", cases=TIMED_CASES, verify=0,
                                                  timing={**opts.timing, "flush_mode": "write"}))
    rows = []
    for a, b, w in zip(first.bench, second.bench, dirty.bench):
        row = {"case": a.case, "params": a.params, "harness_median_us": a.timing.median_us,
               "harness_iqr_us": a.timing.iqr_us, "n": a.timing.n,
               "repeat_median_us": b.timing.median_us,
               "repeat_diff_pct": round(100 * abs(a.timing.median_us - b.timing.median_us) / a.timing.median_us, 3),
               "floor_us": (a.roofline or {}).get("floor_us"), "timed_outputs_ok": a.check_ok and b.check_ok,
               "prepare_s": a.timing.prepare_s, "converged": a.timing.converged,
               "write_flush_median_us": w.timing.median_us if w.timing else None,
               "host_median_us": a.timing.host_median_us, "untimed_tail_us": a.timing.untimed_tail_us}
        try:
            t = cupti_times(a.case)
            row["cupti_median_us"] = round(statistics.median(t), 3)
            row["diff_vs_cupti_pct"] = round(100 * (a.timing.median_us - row["cupti_median_us"]) / row["cupti_median_us"], 3)
        except Exception as e:  # record why, keep the rest
            row["cupti_error"] = str(e)[:500]
        if shutil.which("ncu"):
            try:
                t = ncu_times(a.case)
                row["ncu_median_us"] = round(statistics.median(t), 3)
                row["ncu_n"] = len(t)
                row["diff_vs_ncu_pct"] = round(100 * (a.timing.median_us - row["ncu_median_us"]) / row["ncu_median_us"], 3)
                if row["write_flush_median_us"]:
                    row["write_flush_diff_vs_ncu_pct"] = round(
                        100 * (row["write_flush_median_us"] - row["ncu_median_us"]) / row["ncu_median_us"], 3)
            except Exception as e:  # record why, keep the rest
                row["ncu_error"] = str(e)[:500]
        rows.append(row)
        print(row, flush=True)
    agree = [r for r in rows if "diff_vs_ncu_pct" in r and r["harness_median_us"] >= 20]
    return {"cases": rows, "gpu": first.gpu,
            "ncu_within_5pct": bool(agree) and all(abs(r["diff_vs_ncu_pct"]) <= 5 for r in agree),
            "repeat_within_2pct": all(r["repeat_diff_pct"] < 2 for r in rows),
            "method": "harness: CUDA events around each call, L2 flushed (read pass; write_flush: zeroing pass) "
                      "and new inputs before every call, median; ncu: gpu__time_duration.sum per launch "
                      "(--clock-control none, default cache control: flush all); cupti: the kernel's duration in "
                      "the PyTorch profiler's activity records, same process, L2 flushed (read pass) before each "
                      "call"}


def _small(res, seconds: float) -> dict:
    return {"seconds": round(seconds, 3), "passed": res.passed, "elapsed_s": res.elapsed_s,
            "flags": [f"{f.level} {f.id}: {f.message}" for f in res.flags if f.level != "info"],
            "failures": [c.message for c in res.cases if not c.ok][:3] + ([res.error] if res.error else [])}


def speed() -> dict:
    """Part 3: check (one seed) and bench of the small case, Triton's cache warm. Cold: worker processes
    started for the job, as one `kpilot eval` does. Ready: workers started ahead (a WorkerPool, as a loop or
    server that evaluates candidate after candidate keeps them), the job timed from when they are ready."""
    small = EvalOptions(device="cuda", cases=["small"], seeds=1, verify=1, timing={"budget_s": 0.5})
    evaluate(PROBLEM, CANDIDATE, small)                     # warm Triton's cache
    t0 = time.perf_counter()
    cold = _small(evaluate(PROBLEM, CANDIDATE, small), time.perf_counter() - t0)
    ready = []
    with WorkerPool() as pool:
        pool.prestart("cuda", warm=True)
        for _ in range(3):
            pool.wait_ready()
            t0 = time.perf_counter()
            res = evaluate(PROBLEM, CANDIDATE, EvalOptions(**{**small.__dict__, "pool": pool}))
            ready.append(_small(res, time.perf_counter() - t0))
    best = statistics.median(r["seconds"] for r in ready)
    return {"cold": cold, "ready_workers": ready, "ready_workers_median_s": round(best, 3),
            "under_5s_cold": cold["seconds"] < 5, "under_5s_ready_workers": best < 5,
            "all_passed": cold["passed"] and all(r["passed"] for r in ready)}


def main() -> None:
    import argparse

    import torch

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", choices=["agreement", "speed"], help="run one part; the other keeps its last results")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        sys.exit("eval_timing.py needs a CUDA GPU")
    latest = ROOT / "benchmarks" / "results" / "eval_timing.json"
    previous = json.loads(latest.read_text()) if args.only and latest.exists() else {}
    stamp = {"date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "gpu": torch.cuda.get_device_name()}
    out = {k: previous.get(k) for k in ("agreement", "speed") if previous.get(k)}
    if args.only in (None, "agreement"):
        out["agreement"] = {**stamp, **agreement()}
    if args.only in (None, "speed"):
        out["speed"] = {**stamp, **speed()}
        print(out["speed"])
    print(f"written to {write_results('eval_timing', out)}")


if __name__ == "__main__":
    main()
