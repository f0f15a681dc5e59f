#!/usr/bin/env bash
# The search strategy on a GPU: the naive start (one warp per row, one row per program) of the tunable Triton
# row softmax on benchmarks/problems/softmax_wide, its tuning space compiled for sm_90 and pruned first, then
# successive halving. Writes the run store, the JSON events and the exported report into OUTDIR.
# Usage, from the repository root on the GPU machine: bash benchmarks/optimize_search.sh OUTDIR [BUDGET]
set -uo pipefail
out=${1:?usage: optimize_search.sh OUTDIR [BUDGET]}
budget=${2:-24}
mkdir -p "$out"
export PYTHONPATH=src PYTHONUNBUFFERED=1
python3 -m kernelpilot optimize benchmarks/problems/softmax_wide \
    -c examples/problems/row_softmax/candidates/triton_softmax_tunable.py --arch sm_90 --budget "$budget" \
    --store "$out/runs.db" --json > "$out/events.jsonl" 2> "$out/stderr.txt"
echo "optimize exit $?"
python3 -m kernelpilot runs show 1 --store "$out/runs.db"
python3 -m kernelpilot runs export 1 --store "$out/runs.db" --out "$out/report"
