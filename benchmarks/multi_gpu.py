"""Several GPUs of one host: `kpilot eval-batch` over KernelBench candidates with one worker against one per GPU,
and `kpilot optimize --parallel N` on a KernelBench problem. Each part fits one call of a few minutes and adds a
row to benchmarks/results/multi_gpu.partial.jsonl; --summarize writes benchmarks/results/multi_gpu.json.

- **batch**: level-1 problems of a KernelBench clone (--count of them, each reference as `ModelNew` and under
  torch.compile), through the local target with 1 worker, then with one per GPU: the wall times, the scaling
  efficiency (T1 / (N * TN)) and which GPUs the rows ran on (their `target` fields).
- **ray**: the same batch through a Ray cluster started here (`ray start --head`, one GPU per job; with
  --device cpu, one CPU per job), with as many workers as GPUs: its wall time and the node and GPU of each row.
- **optimize**: `kpilot optimize` of KernelBench's 19_ReLU from a tunable Triton start
  (examples/problems/kernelbench_relu/candidates/relu_triton_tunable.py) with --parallel 1, then N.

Without several GPUs (--device cpu --gpus N) CPU workers stand in, as the tests do, on the small batch of
targets_speed.py (ReLU and row-softmax candidates) and the examples' own 19_ReLU (KernelBench's inputs are GBs).

    python benchmarks/multi_gpu.py --kernelbench KB --part batch [--count 20] [--gpus N] [--device cuda]
    python benchmarks/multi_gpu.py --kernelbench KB --part ray
    python benchmarks/multi_gpu.py --kernelbench KB --part optimize [--budget 12]
    python benchmarks/multi_gpu.py --summarize
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import RESULTS, partial, write_results  # noqa: E402
from targets_speed import EXAMPLES, ROOT, batch_tree, kernelbench_tree, kp  # noqa: E402

NAME = "multi_gpu"
TUNABLE = EXAMPLES / "kernelbench_relu" / "candidates" / "relu_triton_tunable.py"


def visible_gpus() -> int:
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return 0
    return sum(1 for line in out.splitlines() if line.startswith("GPU "))


def _where(row: dict) -> str:
    t = row.get("target") or {}
    return str(t.get("gpu", t.get("worker", t.get("node") or "?")))


def batch(problems: Path, cands: Path, workers: int, device: str, tmp: Path, target: str | None = None,
          env: dict | None = None) -> dict:
    where = ["--target", target] if target else ["--workers", workers]
    t0 = time.perf_counter()
    r = kp("eval-batch", problems, cands, *where, "--device", device, "--json", "--store",
           tmp / f"w{workers}{target or ''}.db", cwd=tmp, env=env, timeout=3600)
    wall = time.perf_counter() - t0
    if r.returncode not in (0, 3):
        return {"workers": workers, "error": r.stderr[-800:]}
    d = json.loads(r.stdout)
    used: dict[str, int] = {}
    for row in d["rows"]:
        used[_where(row)] = used.get(_where(row), 0) + 1
    return {"workers": d.get("workers", workers), "wall_s": round(wall, 2), "jobs": d["jobs"],
            "passed": sum(x["passed"] for x in d["rows"]), "fast_p": d["fast_p"], "jobs_per_gpu": used}


def candidates(args, tmp: Path) -> tuple[Path, Path, int]:
    if args.device == "cpu":       # KernelBench's inputs are GBs: the CPU stand-in takes the small test batch
        problems, cands = batch_tree(tmp, 2 * args.count)
        return problems, cands, 2 * args.count
    return kernelbench_tree(args.kernelbench, tmp, args.count, [], compiled=True)


def part_batch(args, tmp: Path) -> dict:
    problems, cands, n = candidates(args, tmp)
    one = batch(problems, cands, 1, args.device, tmp)
    many = batch(problems, cands, args.gpus, args.device, tmp)
    row = {"part": "batch", "device": args.device, "gpus": args.gpus, "candidates": n, "one": one, "all": many}
    if "wall_s" in one and "wall_s" in many:
        row["efficiency"] = round(one["wall_s"] / (args.gpus * many["wall_s"]), 3)
        row["every_gpu_used"] = len(many["jobs_per_gpu"]) == args.gpus
    return row


def part_ray(args, tmp: Path) -> dict:
    """A Ray head on this host with one GPU (or CPU) slot per worker, a target naming it, the batch through it."""
    import os
    import shutil


    ray = shutil.which("ray") or str(Path(sys.executable).parent / "ray")
    if not Path(ray).exists():
        return {"part": "ray", "device": args.device, "gpus": args.gpus, "error": "ray is not installed here"}
    problems, cands, n = candidates(args, tmp)
    short = Path(tempfile.mkdtemp(prefix="kpray-", dir="/tmp"))        # Ray's socket paths must stay short
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "RAY_USAGE_STATS_ENABLED": "0"}
    slots = ["--num-gpus", str(args.gpus), "--num-cpus", str(max(args.gpus, os.cpu_count() or 1))]
    if args.device == "cpu":
        slots = ["--num-gpus", "0", "--num-cpus", str(args.gpus)]
    port = 6390
    start = subprocess.run([ray, "start", "--head", "--port", str(port), *slots, "--include-dashboard=false",
                            "--disable-usage-stats", "--temp-dir", str(short)], capture_output=True, text=True,
                           env=env, timeout=300)
    try:
        if start.returncode != 0:
            return {"part": "ray", "device": args.device, "gpus": args.gpus, "error": start.stderr[-800:]}
        kp("target", "add", "cluster", f"ray:127.0.0.1:{port}", cwd=tmp, env=env)
        row = {"part": "ray", "device": args.device, "gpus": args.gpus, "candidates": n,
               "all": batch(problems, cands, args.gpus, args.device, tmp, target="cluster", env=env)}
    finally:
        subprocess.run([ray, "stop", "--force"], capture_output=True, env=env, timeout=120)
        shutil.rmtree(short, ignore_errors=True)
    return row


def optimize(problem: Path, parallel: int, budget: int, device: str, tmp: Path) -> dict:
    t0 = time.perf_counter()
    r = kp("optimize", problem, "-c", TUNABLE, "--device", device, "--budget", budget, "--parallel", parallel,
           "--json", "--store", tmp / f"opt{parallel}.db", cwd=tmp, timeout=3600)
    wall = time.perf_counter() - t0
    events = [json.loads(line) for line in r.stderr.splitlines() if line.startswith("{")]
    steps = [e for e in events if e.get("event") == "step"]
    out = {"parallel": parallel, "wall_s": round(wall, 2), "exit": r.returncode, "steps": len(steps)}
    try:
        out.update({k: v for k, v in json.loads(r.stdout).items() if k in ("status", "best_speedup", "stop_reason")})
    except json.JSONDecodeError:
        out["error"] = r.stderr[-800:]
    return out


def part_optimize(args, tmp: Path) -> dict:
    problem = EXAMPLES / "kernelbench_relu" / "19_ReLU.py"       # its inputs fit the CPU stand-in
    if args.device == "cuda":
        problem = args.kernelbench / "KernelBench" / "level1" / "19_ReLU.py"
    one = optimize(problem, 1, args.budget, args.device, tmp)
    many = optimize(problem, args.gpus, args.budget, args.device, tmp)
    row = {"part": "optimize", "device": args.device, "gpus": args.gpus, "problem": problem.name, "one": one,
           "all": many}
    if one.get("wall_s") and many.get("wall_s"):
        row["speedup"] = round(one["wall_s"] / many["wall_s"], 3)
    return row


def summarize() -> None:
    rows = [json.loads(line) for line in (RESULTS / f"{NAME}.partial.jsonl").read_text().splitlines() if line]
    latest = {}
    for row in rows:
        latest[(row["part"], row["device"], row["gpus"])] = row
    write_results(NAME, {"rows": list(latest.values())}, rebuilt=True)
    print(json.dumps(list(latest.values()), indent=2))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kernelbench", type=Path, help="a KernelBench clone")
    ap.add_argument("--part", choices=["batch", "ray", "optimize"])
    ap.add_argument("--count", type=int, default=20, help="level-1 problems (two candidates each)")
    ap.add_argument("--gpus", type=int, help="GPUs (or CPU workers with --device cpu); default: every visible GPU")
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--budget", type=int, default=12, help="optimize: evaluations per run")
    ap.add_argument("--summarize", action="store_true")
    args = ap.parse_args()
    if args.summarize:
        return summarize()
    if args.part is None or (args.kernelbench is None and args.device == "cuda"):
        ap.error("--part is needed, and --kernelbench on a GPU (or --summarize)")
    args.gpus = args.gpus or visible_gpus()
    if args.gpus < 2:
        ap.error("fewer than 2 GPUs here: pass --gpus N (with --device cpu, CPU workers stand in)")
    with tempfile.TemporaryDirectory(prefix="kpilot-multi-") as tmp:
        row = {"batch": part_batch, "ray": part_ray, "optimize": part_optimize}[args.part](args, Path(tmp))
    partial(NAME, row)
    print(json.dumps(row, indent=2))


if __name__ == "__main__":
    main()
