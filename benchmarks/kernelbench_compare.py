"""kernelpilot's `eval` against KernelBench's own `eval_kernel_against_ref`, side by side on real KernelBench
problems, on a GPU: verdicts, speedups and wall time per evaluation.

For each problem three candidates are written (into a temporary folder):

- `ref`: the problem's own Model as ModelNew (an honest candidate, speedup 1),
- `compile`: ModelNew runs the Model's forward under torch.compile (honest, usually faster),
- one cheat, by problem (`--cheat`): `zeros` (right shape, all zeros), `side_stream` (the work on another
  stream, returned without waiting), `patched_timer` (CUDA events report a hundredth of the time) or `cached`
  (the first output returned for every later call).

Each candidate is evaluated by:

- kernelpilot, cold, as a user runs it: `python -m kernelpilot eval PROBLEM -c CAND --baseline eager --json`
  (check with its default 3 secret seeds, then bench against the eager reference); the speedup is kernelpilot's
  `baselines.eager.speedup`;
- kernelpilot, warm: the `ref` candidate through the Python API with a WorkerPool that already served the
  `compile` candidate on the problem (workers started ahead, the reference's outputs and the eager baseline's
  timing kept), as an agent's loop runs it; compared with KernelBench's wall time for `ref`;
- KernelBench: `eval_kernel_against_ref(ref_src, cand_src, num_correct_trials=5, num_perf_trials=100,
  measure_performance=True)` in a fresh process; its speedup is the `ref` candidate's runtime over this one's
  (its runtimes are in milliseconds).

KernelBench's package imports modules it does not need for this (its `utils` pulls in LLM clients; `eval.py`
needs pydantic for one result class): where they are missing, a staging folder gets minimal stand-ins for them
(`get_gpu_vendor`, a `BaseModel` that stores its fields). Its evaluation code runs unchanged.

Writes benchmarks/results/kernelbench_compare.json (and .jsonl). Needs a GPU; not used by any test.
Run: python benchmarks/kernelbench_compare.py --kernelbench PATH/TO/KernelBench [--problem level1/23_Softmax ...]
[--resume] (a long list can be measured over several runs: each measured candidate is appended to
results/NAME.partial.jsonl as it finishes, with the commit and GPU it was measured at, and --resume measures only
what is not there yet; --summarize rebuilds the results file from that file alone).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import partial, write_results  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]

# (problem, cheat): level 1 and 2, six of them with inputs of 4 GB or more.
DEFAULT = [
    ("level1/88_MinGPTNewGelu", "side_stream"),
    ("level1/40_LayerNorm", "patched_timer"),
    ("level1/23_Softmax", "zeros"),
    ("level1/36_RMSNorm_", "cached"),
    ("level1/47_Sum_reduction_over_a_dimension", "zeros"),
    ("level1/94_MSELoss", "patched_timer"),
    ("level1/26_GELU_", "side_stream"),
    ("level1/89_cumsum", "cached"),
    ("level1/19_ReLU", "zeros"),
    ("level1/1_Square_matrix_multiplication_", "side_stream"),
    ("level2/1_Conv2D_ReLU_BiasAdd", "zeros"),
    ("level2/12_Gemm_Multiply_LeakyReLU", "patched_timer"),
    ("level2/40_Matmul_Scaling_ResidualAdd", "cached"),
]

CHEATS = {
    "zeros": '''
class ModelNew(Model):
    def forward(self, *args):
        out = super().forward(*args)
        return torch.zeros_like(out)
''',
    "side_stream": '''
_side = None


class ModelNew(Model):
    def forward(self, *args):
        global _side
        if _side is None:
            _side = torch.cuda.Stream()
        _side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(_side):
            out = super().forward(*args)
        return out
''',
    "patched_timer": '''
_elapsed = torch.cuda.Event.elapsed_time
torch.cuda.Event.elapsed_time = lambda self, end: _elapsed(self, end) / 100.0


class ModelNew(Model):
    pass
''',
    "cached": '''
_first = []


class ModelNew(Model):
    def forward(self, *args):
        if not _first:
            _first.append(super().forward(*args))
        return _first[0].clone()
''',
}

HONEST = {
    "ref": '''
class ModelNew(Model):
    pass
''',
    "compile": '''
class ModelNew(Model):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._compiled = torch.compile(super().forward)

    def forward(self, *args):
        return self._compiled(*args)
''',
}

# Stand-ins for what KernelBench imports but this evaluation does not use.
_UTILS = '''
def get_gpu_vendor(device=None):
    import torch
    return "amd" if getattr(torch.version, "hip", None) else "nvidia"
'''
_PYDANTIC = '''
class BaseModel:
    def __init__(self, **kw):
        for cls in reversed(type(self).__mro__):
            for k, v in vars(cls).items():
                if not k.startswith("_") and not callable(v):
                    setattr(self, k, v.copy() if isinstance(v, (dict, list)) else v)
        for k, v in kw.items():
            setattr(self, k, v)

    def model_dump(self):
        return {k: v for k, v in vars(self).items() if not k.startswith("_")}

    dict = model_dump
'''

_KB_RUN = '''
import json, sys, time
t0 = time.perf_counter()
import torch
from kernelbench.eval import eval_kernel_against_ref
ref, cand, build = (open(sys.argv[1]).read(), open(sys.argv[2]).read(), sys.argv[3])
r = eval_kernel_against_ref(ref, cand, num_correct_trials=5, num_perf_trials=100, measure_performance=True,
                            build_dir=build, device=torch.cuda.current_device())
d = r.model_dump() if hasattr(r, "model_dump") else vars(r)
print("KBRESULT " + json.dumps({k: d.get(k) for k in ("compiled", "correctness", "runtime", "ref_runtime",
                                                       "metadata")}, default=str))
'''


def stage_kernelbench(clone: Path, into: Path) -> Path:
    """A folder to put on PYTHONPATH: KernelBench's package, with stand-ins where its imports would fail."""
    src = clone / "src" / "kernelbench"
    if not src.is_dir():
        raise SystemExit(f"{clone}: no src/kernelbench (point --kernelbench at a KernelBench clone)")
    pkg = into / "kernelbench"
    shutil.copytree(src, pkg)
    (pkg / "__init__.py").touch()
    if not (pkg / "utils.py").exists() or subprocess.run(
            [sys.executable, "-c", "import kernelbench.utils"], cwd=into, capture_output=True).returncode != 0:
        (pkg / "utils.py").write_text(_UTILS)
    if subprocess.run([sys.executable, "-c", "import pydantic"], capture_output=True).returncode != 0:
        (into / "pydantic.py").write_text(_PYDANTIC)
    return into


def candidates(problem: Path, cheat: str, into: Path, only: list[str] | None = None) -> dict[str, Path]:
    """The problem's source with each candidate's ModelNew appended (``only``: ref, compile, cheat)."""
    source = problem.read_text()
    out = {}
    for name, tail in (*HONEST.items(), (f"cheat_{cheat}", CHEATS[cheat])):
        if only and name.split("_")[0] not in only:
            continue
        path = into / f"{problem.stem}__{name}.py"
        path.write_text(source + "\n\n# ---- candidate ----\nimport torch\n" + tail)
        out[name] = path
    return out


def run_kpilot_cold(problem: Path, cand: Path, timeout: float) -> dict:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, "-m", "kernelpilot", "eval", str(problem), "-c", str(cand), "--baseline",
                        "eager", "--json"], capture_output=True, text=True, timeout=timeout, env=env)
    wall = time.perf_counter() - t0
    try:
        d = json.loads(p.stdout)
    except json.JSONDecodeError:
        return {"wall_s": round(wall, 2), "verdict": "error", "error": (p.stderr or p.stdout)[-600:]}
    return {"wall_s": round(wall, 2), **_kpilot_summary(d)}


def _kpilot_summary(d: dict) -> dict:
    if isinstance(d.get("error"), dict):          # kpilot's own error (a problem or setup error), as JSON
        return {"verdict": f"error: {d['error']['message'][:160]}", "speedup": None, "median_us": None,
                "elapsed_s": None}
    flags = [f["id"] for f in d.get("flags", []) if f.get("level") == "error"]
    verdict = "pass" if d.get("passed") else ("rejected: " + ", ".join(flags) if flags else
                                              "fail: " + ((d.get("error") or "")[:160] or _first_failure(d)))
    eager = (d.get("baselines") or {}).get("eager") or {}
    return {"verdict": verdict, "speedup": eager.get("speedup"), "median_us": (d.get("timing") or {}).get("median_us"),
            "elapsed_s": d.get("elapsed_s")}


def _first_failure(d: dict) -> str:
    for c in d.get("cases", []):
        if not c.get("ok"):
            return c.get("message", "")[:160]
    return ""


def run_kpilot_warm(problem: Path, first: Path, second: Path, timeout: float) -> dict:
    """Wall time of evaluating ``second`` with a pool that already evaluated ``first`` on the problem."""
    sys.path.insert(0, str(ROOT / "src"))
    from kernelpilot.evaluate.isolation import WorkerPool
    from kernelpilot.evaluate.runner import EvalOptions, evaluate

    with WorkerPool() as pool:
        pool.prestart("cuda", warm=True)
        pool.wait_ready(120)
        opts = EvalOptions(device="cuda", baselines=["eager"], timeout=timeout, pool=pool)
        evaluate(problem, first, opts)
        pool.wait_ready(120)
        t0 = time.perf_counter()
        d = evaluate(problem, second, opts).to_json()
        wall = time.perf_counter() - t0
    return {"wall_s": round(wall, 2), **_kpilot_summary(d)}


def run_kernelbench(staged: Path, problem: Path, cand: Path, timeout: float) -> dict:
    env = {**os.environ, "PYTHONPATH": str(staged)}
    build = tempfile.mkdtemp(prefix="kb-build-")
    t0 = time.perf_counter()
    try:
        p = subprocess.run([sys.executable, "-c", _KB_RUN, str(problem), str(cand), build], capture_output=True,
                           text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return {"wall_s": round(time.perf_counter() - t0, 2), "verdict": "error", "error": "timed out"}
    finally:
        shutil.rmtree(build, ignore_errors=True)
    wall = time.perf_counter() - t0
    line = next((ln for ln in p.stdout.splitlines() if ln.startswith("KBRESULT ")), None)
    if line is None:
        return {"wall_s": round(wall, 2), "verdict": "error", "error": (p.stderr or p.stdout)[-600:]}
    d = json.loads(line[len("KBRESULT "):])
    verdict = "pass" if d.get("correctness") else ("fail" if d.get("compiled") else "error")
    return {"wall_s": round(wall, 2), "verdict": verdict, "runtime_ms": d.get("runtime"),
            "ref_runtime_ms": d.get("ref_runtime"), "metadata": {k: str(v)[:200] for k, v in
                                                                 (d.get("metadata") or {}).items()}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kernelbench", type=Path, help="a KernelBench clone (KernelBench/, src/)")
    ap.add_argument("--problem", action="append", help="level1/23_Softmax (repeatable; default: the built-in list)")
    ap.add_argument("--cheat", choices=sorted(CHEATS), help="the cheat for every --problem (default: by problem)")
    ap.add_argument("--skip", action="append", default=[], choices=["kpilot", "warm", "kernelbench"])
    ap.add_argument("--candidate", action="append", choices=["ref", "compile", "cheat"],
                    help="only these candidates (repeatable; default: all three)")
    ap.add_argument("--timeout", type=float, default=900.0)
    ap.add_argument("--name", default="kernelbench_compare", help="results file name")
    ap.add_argument("--stop-after", type=float, metavar="S",
                    help="start no new problem after S seconds (with --resume, the next run goes on from there)")
    ap.add_argument("--resume", action="store_true",
                    help="keep what results/NAME.partial.jsonl already holds and measure only the rest; the "
                         "results file then covers both")
    ap.add_argument("--summarize", action="store_true",
                    help="measure nothing: write the results file from what results/NAME.partial.jsonl holds")
    args = ap.parse_args()
    if args.summarize:
        rows = list(measured(args.name).values())
        order = [p for p, _ in DEFAULT]
        rows.sort(key=lambda r: order.index(r["problem"]) if r["problem"] in order else len(order))
        for row in rows:
            kernelbench_speedups(row)
        write_results(args.name, {"rows": rows, "summary": summarize(rows)}, rebuilt=True)
        return
    if args.kernelbench is None:
        ap.error("--kernelbench is required (except with --summarize)")
    chosen = [(p, args.cheat or dict(DEFAULT).get(p, "zeros")) for p in args.problem] if args.problem else DEFAULT
    work = Path(tempfile.mkdtemp(prefix="kb-compare-"))
    staged = stage_kernelbench(args.kernelbench.resolve(), work / "staged")
    done = measured(args.name) if args.resume else {}
    rows = []
    t_start = time.perf_counter()
    for name, cheat in chosen:
        if args.stop_after is not None and time.perf_counter() - t_start > args.stop_after:
            if name in done:
                rows.append(done.pop(name))       # as measured before
            print(f"{name}: nothing more measured (--stop-after {args.stop_after:g} s)", file=sys.stderr)
            continue
        problem = args.kernelbench / "KernelBench" / f"{name}.py"
        if not problem.is_file():
            print(f"{name}: not found at {problem}", file=sys.stderr)
            continue
        cands = candidates(problem, cheat, work, args.candidate)
        row = done.pop(name, None) or {"problem": name, "cheat": cheat, "candidates": {}}
        rows.append(row)
        for label, cand in cands.items():
            if label in row["candidates"]:
                continue
            entry = {}
            if "kpilot" not in args.skip:
                entry["kpilot"] = run_kpilot_cold(problem, cand, args.timeout)
            if "kernelbench" not in args.skip:
                entry["kernelbench"] = run_kernelbench(staged, problem, cand, args.timeout)
            line = {"problem": name, "candidate": label, **entry}
            print(json.dumps(line), flush=True)
            entry["measured"] = partial(args.name, line)
            row["candidates"][label] = entry
        if "warm" not in args.skip and "compile" in cands and "warm_second" not in row:
            # An agent's loop: the pool has served one candidate on the problem (here the compiled one, which
            # also warms torch.compile's caches); the second (the reference as ModelNew) is what is timed.
            warm = run_kpilot_warm(problem, cands["compile"], cands["ref"], args.timeout)
            print(json.dumps({"problem": name, "warm_second": warm}), flush=True)
            row["warm_second"] = {**warm, "measured": partial(args.name, {"problem": name, "warm_second": warm})}
    rows.extend(done.values())      # measured before, not asked for this time
    for row in rows:
        kernelbench_speedups(row)
    write_results(args.name, {"rows": rows, "summary": summarize(rows)})
    shutil.rmtree(work, ignore_errors=True)


def kernelbench_speedups(row: dict) -> None:
    """KernelBench's speedup of each candidate of a row: the `ref` candidate's runtime over its own (both as
    KernelBench measured them, in milliseconds)."""
    ref_rt = ((row["candidates"].get("ref") or {}).get("kernelbench") or {}).get("runtime_ms")
    for entry in row["candidates"].values():
        kb = entry.get("kernelbench")
        if kb and kb.get("runtime_ms") and ref_rt and kb["runtime_ms"] > 0:
            kb["speedup"] = round(ref_rt / kb["runtime_ms"], 3)


def measured(name: str) -> dict[str, dict]:
    """Rows by problem from results/NAME.partial.jsonl (what earlier runs measured, a line at a time)."""
    path = ROOT / "benchmarks" / "results" / f"{name}.partial.jsonl"
    rows: dict[str, dict] = {}
    if not path.exists():
        return rows
    for line in path.read_text().splitlines():
        d = json.loads(line)
        row = rows.setdefault(d["problem"], {"problem": d["problem"], "cheat": None, "candidates": {}})
        if "warm_second" in d:
            row["warm_second"] = {**d["warm_second"], "measured": d.get("measured")}
            continue
        if d["candidate"].startswith("cheat_"):
            row["cheat"] = d["candidate"][6:]
        row["candidates"][d["candidate"]] = {k: d.get(k) for k in ("kpilot", "kernelbench", "measured") if k in d}
    return rows


def summarize(rows: list[dict]) -> dict:
    """Wall-time ratios (kpilot / KernelBench) over honest candidates, speedup agreement, and the cheats' verdicts."""
    cold, warm, cheats = [], [], []
    agree: dict[str, list[float]] = {}
    for row in rows:
        for label, e in row["candidates"].items():
            kp, kb = e.get("kpilot"), e.get("kernelbench")
            if not (kp and kb):
                continue
            if label.startswith("cheat_"):
                cheats.append({"problem": row["problem"], "cheat": label[6:], "kpilot": kp["verdict"],
                               "kernelbench": kb["verdict"], "kernelbench_speedup": kb.get("speedup")})
                continue
            cold.append(kp["wall_s"] / kb["wall_s"])
            if kp.get("speedup") and kb.get("speedup"):
                agree.setdefault(label, []).append(abs(kp["speedup"] / kb["speedup"] - 1))
        kb_ref = ((row["candidates"].get("ref") or {}).get("kernelbench") or {}).get("wall_s")
        if row.get("warm_second") and kb_ref:
            warm.append(row["warm_second"]["wall_s"] / kb_ref)
    med = lambda xs: round(statistics.median(xs), 3) if xs else None  # noqa: E731
    return {"cold_wall_ratio_median": med(cold), "cold_wall_ratio_worst": round(max(cold), 3) if cold else None,
            "warm_second_ratio_median": med(warm), "warm_second_ratio_worst": round(max(warm), 3) if warm else None,
            "problems": len(rows), "speedup_rel_diff_median": med([x for xs in agree.values() for x in xs]),
            # `ref` is 1.0x for KernelBench by construction; `compile` is where the two timers can disagree
            "speedup_rel_diff_median_by_candidate": {k: med(v) for k, v in agree.items()},
            "speedup_rel_diff_worst_by_candidate": {k: round(max(v), 3) for k, v in agree.items()},
            "cheats": cheats, "measured_at": _measured_at(rows)}


def _measured_at(rows: list[dict]) -> list[dict]:
    """The distinct (commit, GPUs) the rows were measured at, with how many measurements each."""
    seen: dict[str, dict] = {}
    for row in rows:
        for e in [*row["candidates"].values(), row.get("warm_second") or {}]:
            m = e.get("measured")
            if m:
                key = json.dumps([m.get("git"), m.get("gpus")])
                seen.setdefault(key, {"git": m.get("git"), "gpus": m.get("gpus"), "measurements": 0})
                seen[key]["measurements"] += 1
    return list(seen.values())


if __name__ == "__main__":
    main()
