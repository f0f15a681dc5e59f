"""Run a candidate on one case of a problem, for a profiler to watch:

    python -m kernelpilot.evaluate.drive PROBLEM CANDIDATE [--case NAME] [--calls N] [--device cuda|cpu]
    kpilot profile --problem PROBLEM --candidate CANDIDATE [--case NAME]        (builds this command)

The candidate is imported and called twice (compile, warm-up), then ``--calls`` times between
``cudaProfilerStart`` and ``cudaProfilerStop``, so that ``ncu --profile-from-start off`` sees only the
steady-state calls. Exit status 0 when every call returned; the output is not checked here (``kpilot
check`` does that).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

__all__ = ["main", "command"]


def command(problem: str | Path, candidate: str | Path, *, case: str | None = None, calls: int = 3,
            device: str | None = None) -> list[str]:
    """The command line that drives ``candidate`` on ``problem`` (for ``kpilot profile``)."""
    cmd = [sys.executable, "-m", "kernelpilot.evaluate.drive", str(problem), str(candidate), "--calls", str(calls)]
    if case:
        cmd += ["--case", case]
    if device:
        cmd += ["--device", device]
    return cmd


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m kernelpilot.evaluate.drive", description=__doc__.splitlines()[0])
    ap.add_argument("problem")
    ap.add_argument("candidate")
    ap.add_argument("--case", help="The case to run (default: the first benchmark case).")
    ap.add_argument("--calls", type=int, default=3)
    ap.add_argument("--device", default=None)
    args = ap.parse_args(argv)
    if args.device == "cpu":
        import os

        os.environ.setdefault("TRITON_INTERPRET", "1")    # Triton kernels on CPU tensors, as `kpilot check` runs them

    import torch

    from kernelpilot.errors import KernelpilotError
    from kernelpilot.evaluate.formats import runtime_for
    from kernelpilot.evaluate.problem import load_problem

    try:
        prob = load_problem(args.problem)
        rt = runtime_for(prob)
        pool = prob.benchmark_cases or [c for c in prob.cases if not c.hidden] or prob.cases
        case = prob.case(args.case) if args.case else pool[0]
        device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
        inputs = rt.make_inputs(case, 12345, device)
        fn = rt.load_candidate(Path(args.candidate), device, 0)
    except KernelpilotError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    cuda = device.startswith("cuda")
    try:
        for _ in range(2):
            fn(*inputs)
        if cuda:
            torch.cuda.synchronize()
            torch.cuda.cudart().cudaProfilerStart()
        for _ in range(max(1, args.calls)):
            fn(*inputs)
        if cuda:
            torch.cuda.synchronize()
            torch.cuda.cudart().cudaProfilerStop()
    except Exception as e:
        print(f"error: the candidate failed on {case.name}: {type(e).__name__}: {str(e).splitlines()[0][:300]}",
              file=sys.stderr)
        return 1
    print(f"ran {case.name} {args.calls} times on {device}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
