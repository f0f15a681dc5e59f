"""Where the seconds of a small evaluation go, stage by stage, in a fresh process (run on a GPU machine).

Stages, in the order a candidate worker meets them: interpreter and kernelpilot imports, `import torch`,
CUDA context, `import triton`, the first profiled call (PyTorch profiler start-up), loading the example
Triton candidate (its compiled kernel from Triton's cache), its first call, and a second profiled call; and
around them, the interpreter's start and the process's exit (which tears down the CUDA context).
(The whole evaluation of a small case, cold and with workers started ahead: eval_timing.py --only speed.)

Writes benchmarks/results/eval_startup.json.   Run: python benchmarks/eval_startup.py
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import write_results  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
CANDIDATE = ROOT / "examples" / "problems" / "row_softmax" / "candidates" / "triton_softmax.py"

STAGES = r"""
import json, os, sys, time
began = time.time()
t = {"start": time.perf_counter()}
def mark(name):
    t[name] = time.perf_counter()
sys.path.insert(0, %(src)r)
import kernelpilot.evaluate.worker
mark("kernelpilot")
import torch
mark("import torch")
torch.cuda.init(); torch.zeros(1, device="cuda"); torch.cuda.synchronize()
mark("cuda context")
import triton
mark("import triton")
from kernelpilot.evaluate.probe import probe_call
probe_call(lambda: torch.ones(4, device="cuda") * 2, "cuda")
mark("first profiled call")
from kernelpilot.evaluate.pyload import import_file
fn = getattr(import_file(%(cand)r), "softmax")
mark("load candidate")
x = torch.randn(64, 1024, device="cuda", dtype=torch.float16)
fn(x); torch.cuda.synchronize()
mark("first call (kernel from cache)")
probe_call(lambda: fn(x), "cuda")
mark("second profiled call")
names = list(t)
print(json.dumps({"stages": {b: round(t[b] - t[a], 3) for a, b in zip(names, names[1:])}, "began": began,
                  "ended": time.time()}), flush=True)
os._exit(0)   # as the worker leaves: the CUDA context is torn down by the process's exit
"""


def main() -> None:
    import torch

    if not torch.cuda.is_available():
        sys.exit("eval_startup.py needs a CUDA GPU")
    code = STAGES % {"src": str(ROOT / "src"), "cand": str(CANDIDATE)}
    runs = []
    for _ in range(2):   # the first run may fill Triton's cache; the second is what a user sees
        t0, spawned = time.perf_counter(), time.time()
        p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
        gone = time.time()
        if p.returncode:
            sys.exit(p.stderr[-3000:])
        rec = json.loads(p.stdout.strip().splitlines()[-1])
        runs.append({"stages_s": rec["stages"], "process_s": round(time.perf_counter() - t0, 3),
                     # from the spawn to the child's first line, and from its last line until it was gone
                     "interpreter_start_s": round(rec["began"] - spawned, 3),
                     "exit_s": round(gone - rec["ended"], 3)})
    out = {"process_stages": runs[-1], "first_process_stages": runs[0]}
    print(json.dumps(out, indent=1))
    print(f"written to {write_results('eval_startup', out)}")


if __name__ == "__main__":
    main()
