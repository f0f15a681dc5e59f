"""torch.compile of a problem's reference over its cases, in one process and outside kernelpilot's box: whether
each case compiles and runs, and where it does not, the error with its cause (the end of a compile worker's
traceback). `kpilot bench --baseline compile` compiles the same way (PyTorch's defaults: shapes made dynamic once
they change) in a boxed worker; a case that fails there and passes here points at the box, one that fails in
both at torch.compile itself. Writes benchmarks/results/compile_probe.json.

    python benchmarks/compile_probe.py PROBLEM [--dtype bfloat16] [--first N] [--device cpu]
"""

from __future__ import annotations

import argparse
import sys
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from _common import environment, write_results  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("problem", help="a problem folder or file, as kpilot bench takes")
    ap.add_argument("--dtype", help="only the cases of this dtype")
    ap.add_argument("--first", type=int, help="only the first N cases (after --dtype)")
    ap.add_argument("--device", default="cuda", help="cuda (default), or cpu: Inductor's C++ code instead")
    args = ap.parse_args()

    import torch

    from kernelpilot.errors import KernelpilotError, shorten
    from kernelpilot.evaluate.formats import runtime_for
    from kernelpilot.evaluate.problem import load_problem

    try:
        prob = load_problem(args.problem)
    except KernelpilotError as e:
        sys.exit(f"compile_probe.py: {e}")
    cases = [c for c in prob.cases if not c.hidden and (not args.dtype or c.params.get("dtype") == args.dtype)]
    if not cases:
        sys.exit(f"compile_probe.py: {args.problem} has no cases{' of dtype ' + args.dtype if args.dtype else ''}")
    if args.device == "cuda" and not torch.cuda.is_available():
        sys.exit("compile_probe.py needs a GPU")
    runtime = runtime_for(prob)
    fn = runtime.baseline("compile")   # what a baseline worker times
    rows = []
    for case in cases[:args.first]:
        inputs = runtime.make_inputs(case, 0, args.device)
        t0 = time.perf_counter()
        try:
            fn(*inputs)
            if args.device == "cuda":
                torch.cuda.synchronize()
            row = {"case": case.name, "ok": True}
        except Exception as e:   # the probe's whole point: what torch.compile raised, kept with its cause
            text = "".join(traceback.format_exception_only(type(e), e))
            row = {"case": case.name, "ok": False, "error": shorten(text, 6000)}
        row["seconds"] = round(time.perf_counter() - t0, 2)
        print(row["case"], "ok" if row["ok"] else "FAILED: " + row["error"][-400:], flush=True)
        rows.append(row)
    device = torch.cuda.get_device_name() if args.device == "cuda" else "cpu"
    out = write_results("compile_probe", {"problem": str(args.problem), "device": device, "torch": torch.__version__,
                                          "environment": environment(), "cases": rows,
                                          "failed": sum(not r["ok"] for r in rows)})
    print(out)


if __name__ == "__main__":
    main()
