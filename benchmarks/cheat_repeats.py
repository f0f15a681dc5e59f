"""How often a cheat gets through: one candidate evaluated many times (`kpilot eval` through the Python API, a few
at once), optionally with CPU hogs running beside it, and the verdicts counted. A cheat whose luck depends on
which timed calls are re-checked, or on timing under load, shows here what one test run cannot.

Writes benchmarks/results/cheat_repeats.json. Run:

    python benchmarks/cheat_repeats.py [--candidate examples/problems/row_softmax/cheats/repaired_samples.py]
                                       [--runs 300] [--parallel 4] [--hogs 2] [--device cpu]
"""

from __future__ import annotations

import argparse
import multiprocessing
import sys
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "src"), str(Path(__file__).resolve().parent)]

from _common import environment, write_results  # noqa: E402

ROW = ROOT / "examples" / "problems" / "row_softmax"
# Enough timed calls per case that the re-checked ones are a small part of them.
TIMING = {"budget_s": 2.0, "min_n": 200, "max_n": 300, "warmup": 1, "warmup_s": 0.01, "batch": 10, "rel_tol": 1e-9}


def _hog(stop) -> None:
    while not stop.is_set():
        pass


def main() -> None:
    from kernelpilot.evaluate.runner import EvalOptions, evaluate

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--problem", type=Path, default=ROW)
    ap.add_argument("--candidate", type=Path, default=ROW / "cheats" / "repaired_samples.py")
    ap.add_argument("--case", default="rows=64,cols=128,dtype=float32")
    ap.add_argument("--runs", type=int, default=300)
    ap.add_argument("--parallel", type=int, default=4)
    ap.add_argument("--hogs", type=int, default=2, help="busy-looping processes beside the runs")
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args()

    def one(_: int) -> tuple[str, tuple[str, ...]]:
        opts = EvalOptions(device=args.device, seeds=1, timeout=300, cases=[args.case], timing=dict(TIMING))
        r = evaluate(args.problem, args.candidate, opts)
        errors = tuple(sorted({f.id for f in r.flags if f.level == "error"}))
        verdict = "passed" if r.passed else ("failed" if r.correct is False or r.error else "rejected")
        return verdict, errors

    stop = multiprocessing.Event()
    hogs = [multiprocessing.Process(target=_hog, args=(stop,), daemon=True) for _ in range(args.hogs)]
    for h in hogs:
        h.start()
    t0 = time.perf_counter()
    try:
        with ThreadPoolExecutor(args.parallel) as ex:
            results = list(ex.map(one, range(args.runs)))
    finally:
        stop.set()
        for h in hogs:
            h.join(timeout=5)
    wall = time.perf_counter() - t0
    verdicts = Counter(v for v, _ in results)
    flags = Counter(", ".join(e) or "none" for _, e in results)
    payload = {"environment": environment(), "problem": str(args.problem.relative_to(ROOT)),
               "candidate": str(args.candidate.relative_to(ROOT)), "case": args.case, "runs": args.runs,
               "parallel": args.parallel, "hogs": args.hogs, "device": args.device, "timing": TIMING,
               "wall_s": round(wall, 1), "verdicts": dict(verdicts), "error_flags": dict(flags)}
    print({k: payload[k] for k in ("runs", "verdicts", "error_flags", "wall_s")})
    write_results("cheat_repeats", payload)


if __name__ == "__main__":
    main()
