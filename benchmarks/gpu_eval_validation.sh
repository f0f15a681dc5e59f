#!/usr/bin/env bash
# Everything the harness must show on a GPU, in one run (for the GPU machine): timing against Nsight
# Compute, repeatability and speed (eval_timing.py), the GPU-only cheats (pytest -m gpu), and KernelBench
# and GPU MODE problems end to end with a correct and a cheating candidate each.
# Usage, from the repository root: bash benchmarks/gpu_eval_validation.sh OUTDIR [timing|cheats|e2e|all]
#   e2e is kernelbench, gpumode and native, which can also be run one at a time.
# The whole run takes more than 10 minutes on an H200: run the parts as separate calls there.
set -uo pipefail
out=${1:?usage: gpu_eval_validation.sh OUTDIR [timing|cheats|e2e|kernelbench|gpumode|native|all]}
part=${2:-all}
mkdir -p "$out"
export PYTHONPATH=src PYTHONUNBUFFERED=1
kp() { python3 -m kernelpilot "$@"; }
{ date -u +%Y-%m-%dT%H:%MZ; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader;
  python3 -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__)'; } > "$out/environment.txt"

if [ "$part" = timing ] || [ "$part" = all ]; then
  python3 benchmarks/eval_timing.py > "$out/eval_timing.log" 2>&1
  cp benchmarks/results/eval_timing.json "$out/" 2>/dev/null
fi

if [ "$part" = cheats ] || [ "$part" = all ]; then
  python3 -m pytest -q -m gpu tests > "$out/pytest_gpu.log" 2>&1
fi

want() { [ "$part" = "$1" ] || [ "$part" = e2e ] || [ "$part" = all ]; }
want kernelbench || want gpumode || want native || exit 0

e2e="$out/e2e_$part.jsonl"; : > "$e2e"
run() {  # label, then kpilot arguments
  local label=$1; shift
  local t0=$(date +%s.%N)
  kp "$@" --json > "$out/tmp.json" 2> "$out/tmp.err"; local rc=$?
  python3 - "$label" "$rc" "$t0" "$out/tmp.json" "$out/tmp.err" >> "$e2e" <<'PY'
import json, sys, time
label, rc, t0, js, err = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), sys.argv[4], sys.argv[5]
try:
    r = json.load(open(js))
except Exception:
    r = {"stderr": open(err).read()[-1500:]}
keep = {k: r.get(k) for k in ("problem", "candidate", "gpu", "correct", "passed", "error", "timing", "baselines", "flags", "notes", "stderr")}
keep["bench"] = [{"case": b["case"], "median_us": (b.get("timing") or {}).get("median_us"), "check_ok": b.get("check_ok"),
                  "roofline": b.get("roofline"), "baselines": {k: v.get("speedup") for k, v in b.get("baselines", {}).items()}}
                 for b in r.get("bench", [])]
keep["failed_cases"] = [c["case"] + ": " + c["message"][:200] for c in r.get("cases", []) if not c.get("ok")][:5]
print(json.dumps({"label": label, "exit": rc, "seconds": round(time.time() - t0, 2), **keep}))
PY
}
KB=examples/problems/kernelbench_relu
GM=examples/problems/gpumode_vectoradd
SM=examples/problems/row_softmax
if want kernelbench; then
run kernelbench-correct eval $KB/19_ReLU.py -c $KB/candidates/relu_triton.py --baseline eager --baseline compile
run kernelbench-library eval $KB/19_ReLU.py -c $KB/candidates/relu_library.py
for f in $KB/cheats/*.py; do run "kernelbench-cheat-$(basename $f .py)" check $KB/19_ReLU.py -c $f --timeout 30; done
fi
if want gpumode; then
run gpumode-correct eval $GM -c $GM/submission_triton.py --baseline eager
run gpumode-wrong check $GM -c $GM/submission_wrong.py
for f in $GM/cheats/*.py; do [ -e "$f" ] && run "gpumode-cheat-$(basename $f .py)" check $GM -c $f --timeout 30; done
fi
if want native; then
run native-correct eval $SM -c $SM/candidates/triton_softmax.py --baseline eager --baseline compile --graphs
for f in $SM/cheats/*.py; do run "native-cheat-$(basename $f .py)" eval $SM -c $f --timeout 30 --budget 0.5; done
fi
rm -f "$out/tmp.json" "$out/tmp.err"
echo "done: $(wc -l < "$e2e") end-to-end runs"
