"""GPU MODE's own solutions through `kpilot check`: every problem of the chosen problem sets of a clone of
gpu-mode/reference-kernels that ships `solutions/correct/` and `solutions/wrong/`; each correct solution must
pass and each wrong one fail. Needs a GPU (the problems make their data on CUDA); not used by any test.

With --own-eval, each solution is also run through the problem set's own `eval.py` in its `test` mode (or, with
--own-mode benchmark, its `benchmark` mode on the `benchmarks:` cases), staged as GPU MODE stages it (the files
`task.yml` lists, the solution as `submission.py`, the cases in a test file, results read from the POPCORN_FD
stream): where a solution listed as correct fails there too, the listing, not the harness, is wrong.

Writes benchmarks/results/gpumode_solutions.json (and .jsonl): per solution the expected and actual verdict,
the first failing case's message, the wall time of the check, and with --own-eval GPU MODE's own verdict.
Run: python benchmarks/gpumode_solutions.py --repo PATH/TO/reference-kernels [--set pmpp_v2 --set pmpp]
[--problem conv2d_py] [--own-eval [--own-mode benchmark]]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import partial, write_results  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def check(problem: Path, solution: Path, timeout: float) -> dict:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    t0 = time.perf_counter()
    try:
        p = subprocess.run([sys.executable, "-m", "kernelpilot", "check", str(problem), "-c", str(solution), "--json"],
                           capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return {"passed": False, "wall_s": round(time.perf_counter() - t0, 1), "message": "timed out"}
    wall = round(time.perf_counter() - t0, 1)
    try:
        d = json.loads(p.stdout)
    except json.JSONDecodeError:
        return {"passed": False, "wall_s": wall, "message": "no JSON: " + (p.stderr or p.stdout)[-400:]}
    failing = [c for c in d.get("cases", []) if not c.get("ok")]
    if isinstance(d.get("error"), dict):          # kpilot's own error (a problem or setup error), as JSON
        return {"passed": False, "wall_s": wall, "message": f"{d['error']['type']}: {d['error']['message']}"[:300]}
    message = d.get("error") or (f"{failing[0]['case']}: {failing[0]['message']}" if failing else "")
    flags = [f"{f['id']} ({f['level']})" for f in d.get("flags", []) if f.get("level") in ("error", "warning")]
    return {"passed": bool(d.get("passed")), "wall_s": wall, "cases": len(d.get("cases", [])),
            "failed_cases": len(failing), "message": message[:300], "flags": flags, "elapsed_s": d.get("elapsed_s")}


def own_eval(problem: Path, solution: Path, timeout: float, mode: str = "test") -> dict:
    """The solution through the problem set's own eval.py, staged as task.yml says: ``test`` mode on the
    ``tests:`` cases, or ``benchmark`` mode on the ``benchmarks:`` cases (one checked call each, then timing)."""
    import yaml

    task = yaml.safe_load((problem / "task.yml").read_text())
    stage = Path(tempfile.mkdtemp(prefix="gm-own-"))
    t0 = time.perf_counter()
    try:
        for f in task.get("files") or []:
            source = solution if f["source"] == "@SUBMISSION@" else problem / f["source"]
            shutil.copyfile(source, stage / f["name"])
        cases = task["tests"] if mode == "test" else task.get("benchmarks") or []
        lines = ["; ".join(f"{k}: {v}" for k, v in case.items()) for case in cases]
        (stage / "tests.txt").write_text("\n".join(lines) + "\n")
        main = (task.get("config") or {}).get("main", "eval.py")
        p = subprocess.run([sys.executable, main, mode, "tests.txt"], cwd=stage, capture_output=True, text=True,
                           timeout=timeout, env={**os.environ, "POPCORN_FD": "1"})
    except subprocess.TimeoutExpired:
        return {"passed": False, "wall_s": round(time.perf_counter() - t0, 1), "message": "timed out"}
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    log = dict(ln.split(": ", 1) for ln in p.stdout.splitlines() if ": " in ln)
    prefix = "test." if mode == "test" else "benchmark."
    failing = sorted(k for k, v in log.items() if k.startswith(prefix) and k.endswith(".status") and v == "fail")
    message = (log.get(failing[0].replace(".status", ".message")) or log.get(failing[0].replace(".status", ".error"))
               or "") if failing else ""
    if "check" not in log:
        message = f"exit {p.returncode}, no check line: " + (p.stderr or p.stdout)[-300:]
    return {"passed": log.get("check") == "pass", "wall_s": round(time.perf_counter() - t0, 1),
            "failed_cases": len(failing), "message": message[:300]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repo", required=True, type=Path, help="a clone of gpu-mode/reference-kernels")
    ap.add_argument("--set", dest="sets", action="append", help="problem set (default: pmpp_v2 and pmpp)")
    ap.add_argument("--problem", action="append", help="only these problems (e.g. sort_py; repeatable)")
    ap.add_argument("--timeout", type=float, default=600.0)
    ap.add_argument("--own-eval", action="store_true", help="also run each solution through the set's own eval.py")
    ap.add_argument("--own-mode", choices=["test", "benchmark"], default="test",
                    help="eval.py's mode with --own-eval: its test cases, or its benchmark cases (default test)")
    args = ap.parse_args()
    rows = []
    for pset in args.sets or ["pmpp_v2", "pmpp"]:
        for problem in sorted((args.repo / "problems" / pset).iterdir()):
            sols = problem / "solutions"
            if not sols.is_dir() or (args.problem and problem.name not in args.problem):
                continue
            for kind in ("correct", "wrong"):
                for sol in sorted((sols / kind).glob("*.py")):
                    row = {"set": pset, "problem": problem.name, "solution": f"{kind}/{sol.name}",
                           "expected": "pass" if kind == "correct" else "fail", **check(problem, sol, args.timeout)}
                    row["as_expected"] = row["passed"] == (kind == "correct")
                    if args.own_eval:
                        row["gpumode"] = own_eval(problem, sol, args.timeout, args.own_mode)
                    rows.append(row)
                    print(json.dumps(row), flush=True)
                    partial("gpumode_solutions", row)
    summary = {"solutions": len(rows), "as_expected": sum(r["as_expected"] for r in rows),
               "correct_passed": sum(r["passed"] for r in rows if r["expected"] == "pass"),
               "correct": sum(r["expected"] == "pass" for r in rows),
               "wrong_failed": sum(not r["passed"] for r in rows if r["expected"] == "fail"),
               "wrong": sum(r["expected"] == "fail" for r in rows)}
    own = [r for r in rows if "gpumode" in r]
    if own:
        summary["own_eval_agrees"] = sum(r["passed"] == r["gpumode"]["passed"] for r in own)
        summary["own_eval_run"] = len(own)
    write_results("gpumode_solutions", {"rows": rows, "summary": summary})
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
