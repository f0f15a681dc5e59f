#!/usr/bin/env bash
# The GPU validation steps of this repository, run within a deadline on a machine with one or more GPUs: each
# lane (a comma-separated list of steps) runs on a GPU of its own, the lanes side by side, a lane's steps in
# turn, each cut off at the deadline. Each step writes into OUTDIR/<step>/ (its console output in log.txt,
# how it ended in exit.txt), and OUTDIR is packed into TARBALL after every step, so a cut-off run keeps what
# it finished.
#
# Usage, from the repository root:  bash benchmarks/gpu_session.sh OUTDIR TARBALL DEADLINE_S LANE [LANE...]
#   e.g. bash benchmarks/gpu_session.sh /tmp/gs $OUT/gs.tar.gz 540 pytest-gpu,timing moe-check,moe-bench
# Steps:
#   pytest-gpu        python -m pytest -m gpu tests
#   pytest-harness    the harness's GPU tests alone: the cheating suite, the evaluation core, the worker pool, the
#                     problem formats (torch.compile as a baseline in the box)
#   timing            benchmarks/eval_timing.py (agreement with Nsight Compute, repeatability, speed)
#   l2-persisting     benchmarks/l2_persisting.py (inputs kept in the L2 through the flush as persisting lines: what it
#                     gains against a flush that does not demote them, and with kpilot's flush)
#   speed             benchmarks/eval_timing.py --only speed, SPEED_RUNS times (check and bench of one small case)
#   startup           benchmarks/eval_startup.py (where a cold evaluation's seconds go)
#   profile-capture   tests/fixtures/ncu_profile/capture.sh (three planted problems under ncu)
#   profile-source    kpilot profile --source on a Triton kernel and a CUDA one built with -lineinfo (per-line hotspots)
#   profile-noperm    kpilot profile run as an unprivileged user (no counter access: the fallback, or ncu allowed it)
#   optimize-search   benchmarks/optimize_search.sh (the search strategy on softmax_wide)
#   e2e-kernelbench, e2e-gpumode, e2e-native    benchmarks/gpu_eval_validation.sh, one part each
#   moe-check         kpilot check of the MoE CUDA kernel and the dispatcher on every case of both variants
#   moe-profile       kpilot profile of the CUDA kernels (MOE_PROFILE_KERNELS) on one case (MOE_PROFILE_CASE, default the
#                     largest bfloat16 one) of both variants, and the warp kernel against the packed-key one
#   moe-bench-large   examples/moe_topk_sigmoid/bench.py on the cases of 8192 tokens or more (bfloat16)
#   moe-bench-plain, moe-bench-biased, moe-bench-softmax, moe-bench-grouped    bench.py on every bfloat16 case of one
#                     variant (the report merges them)
#   moe-bench-dtypes-plain, ...-biased, ...-softmax, ...-grouped    bench.py of dispatch.py on every float16 and
#                     float32 case of one variant (MOE_DTYPES: these dtypes instead, e.g. float32)
#   pytest-moe        python -m pytest -m gpu examples/moe_topk_sigmoid/tests/test_moe_problem.py (the MoE kernels alone)
#   pytest-moe-routers  the router kernels' GPU tests ($MOE/tests/test_moe_routers.py: every router and shape)
#   moe-routers       $MOE/benchmarks/moe_routers.py --router-only $MOE_ROUTERS_ARGS (every router case checked and
#                     timed against the natural PyTorch and the stream floor; with --kernels NAME=DIR twice or more,
#                     kernel trees against each other in one process)
#   moe-in-graph      $MOE/benchmarks/moe_in_graph.py $MOE_IN_GRAPH_ARGS (dispatch.py and the natural PyTorch per call inside a
#                     CUDA graph of 16 calls, L2 flushed before each replay, and in a graph of one, every case checked)
#   moe-router-profile  kpilot profile --source of the router kernels on $MOE/benchmarks/router_worst.py's cases (each
#                     launched once; $MOE_ROUTER_WORST_ARGS: its options, e.g. --tokens 1), and each report's diagnosis
#   moe-router-stages $MOE/benchmarks/router_stages.py $MOE_ROUTER_STAGES_ARGS (the rounds kernel's stages on few tokens,
#                     by the SM clock read in a build of its own, beside the tree's event time)
#   moe-one-lane-sweep  $MOE/benchmarks/moe_token_sweep.py $MOE_SWEEP_ARGS: the router with one lane a token up to 32
#                     experts from 4,096 tokens against the rounds kernel there, over token counts (where to place
#                     router_launch.h's kOneLaneTokens and kOneLaneWideRowTokens)
#   moe-grouped-lanes the grouped router with router_launch.h's kGroupedMergeLeastLanes at 8 and at 4 (8 groups of 8
#                     experts on 4 lanes of 2 groups), every grouped case timed on both in one process
#                     ($MOE_ROUTERS_ARGS: more options, e.g. --tokens 100000)
#   compile-probe     benchmarks/compile_probe.py on the MoE plain and softmax problems (COMPILE_PROBE_DTYPE, default
#                     bfloat16): torch.compile of each reference over its cases outside the box, each failure's cause
#   compile-box       kpilot bench --baseline compile --graphs of the MoE plain problem's first 14 bfloat16 cases (its
#                     reference as the candidate) in the box, across the change from 64 to 128 experts: how many cases
#                     the baseline timed, and the notes on any it could not (why)
#   moe-merge-shifts  the biased and grouped routers with topk_router.cu's kMergeShiftLanes at 0 (the merge kernel's
#                     shift table by expert) and at 1 (each lane's chunks side by side), timed in one process
#                     on 8,192 to 100,000 tokens ($MOE_ROUTERS_ARGS: other options instead)
#   moe-row-prefetch  the biased and grouped routers with topk_router.cu's kRowPrefetch at 0 and at 1 (each thread
#                     fetching its first token's row before the block makes the bias's shift table), timed in one
#                     process on 1 to 3,000 tokens ($MOE_ROUTERS_ARGS: other options instead)
#   moe-rounds-redux  the biased, grouped and softmax routers with topk_router.cu's kRoundsRedux at 0 (a round's largest
#                     key over 16 lanes by xor shuffles) and at 1 (two warp REDUX.MAX), timed in one process on 1 to
#                     3,000 tokens ($MOE_ROUTERS_ARGS: other options instead)
#   moe-lanes-redux   the biased, grouped and softmax routers with topk_router.cu's kLanesRedux at 0 (a whole warp's or 16
#                     lanes' max and min by xor shuffles) and at 1 (one warp REDUX, or two), timed in one process on 1
#                     to 100,000 tokens ($MOE_ROUTERS_ARGS: other options instead)
#   moe-groups-at-once  the grouped router with topk_router.cu's kGroupsAtOnce at 1 (keep_groups gathers the group keys
#                     by shuffles each behind a branch of its own) and at 4 (four at once), timed in one process on 1
#                     to 100,000 tokens ($MOE_ROUTERS_ARGS: other options instead)
#   moe-piece-groups  the grouped router with router_launch.h's kGroupedPieceGroupsALane at 1 (a group of 4n experts a
#                     lane) and at 2 (8 such groups two a lane on 4 lanes: 160 experts in groups of 20), timed in one
#                     process on 8,192 and 100,000 tokens ($MOE_ROUTERS_ARGS: other options instead)
#   moe-key-logits    the plain and softmax routers on 16-bit logits with topk_router.cu's kKeyLogits at 0 (the chosen
#                     experts' logits and the softmax's row maximum read again from the row) and at 1 (from their exact
#                     keys), timed in one process on 1 to 100,000 tokens ($MOE_ROUTERS_ARGS: other options instead)
#   moe-half-chunks   the grouped router with topk_router.cu's kHalfChunks at 0 (a group's last chunk of 4 experts made
#                     and sorted as 8 whose last 4 are 0) and at 1 (its 4 keys alone, a network of 4), timed in one
#                     process on 8,192 and 100,000 tokens ($MOE_ROUTERS_ARGS: other options instead)
#   moe-lists-terms   the softmax router on three trees in one process: topk_router.cu's kFourLists and kTermFma both
#                     at 0 (base), kFourLists at 1 (four: the merge kernel's lists of best keys of 4 where k is 4 or
#                     less, of 8 at 0), kTermFma at 1 (fma: a softmax term's exponent by one FFMA, by an FADD and an
#                     FMUL at 0); 3,000, 8,192 and 100,000 tokens ($MOE_ROUTERS_ARGS: other options instead)
#   moe-four-lists    the plain, biased and softmax routers (the shapes the dispatcher sends to routing_cuda) with
#                     topk_router.cu's kFourLists at 0 (the merge kernel's lists of best keys of 8 whatever k) and at 1
#                     (of 4 where k is 4 or less), timed in one process on 100, 3,000 and 100,000 tokens
#                     ($MOE_ROUTERS_ARGS: other options instead)
#   moe-merge-blocks  every router with topk_router.cu's kMergeMoreBlocks at 0 (the merge kernel's blocks per SM by
#                     logit size and chunks) and at 1 (the grouped and fp32 selection on exact keys reading its chunks
#                     again, and a tier more for the grouped builds that then fit it without spilling), timed in one
#                     process on 8,192 and 100,000 tokens ($MOE_ROUTERS_ARGS: other options instead)
#   moe-merge-wide    every router with router_launch.h's kMergeWideTokens at 0 (the merge kernel's shapes whatever the
#                     tokens) and at 1,000,000 (twice the lanes a token, half the chunks a lane, at every token count
#                     where wide_merge_shape gives a shape), timed in one process on 8,192 and 65,536 tokens
#                     ($MOE_ROUTERS_ARGS: other options instead)
#   moe-large         $MOE/benchmarks/moe_large.py $MOE_LARGE_ARGS (the CUDA algorithms on the large cases, checked, and
#                     their stream floors; quick, between full bench.py runs)
#   moe-sort          $MOE/benchmarks/moe_sort.py (the sorting-network kernel at each experts per thread against the packed-key
#                     and first kernels, plain fp16/bf16, edge inputs checked first; $MOE_SORT_ARGS: more options,
#                     e.g. --tokens 8192 --sorts sort32 prune32)
#   moe-variants      $MOE/benchmarks/moe_variants.py: the tree and each folder of $MOE_VARIANTS (files replacing MoE kernel
#                     files) built at once, GPU tests of edge cases on each, then moe_large.py timing every case on
#                     each in turn in one process, times against the tree's
#                     ($MOE_VARIANTS_ARGS: more options, e.g. --dtype float32 --set sort:1,16 --problem-variant biased)
#   moe-optimize      kpilot optimize (search) of the MoE Triton kernel on three bf16 plain cases, report exported
#   moe-optimize-cuda kpilot optimize (search) of the persistent CUDA kernel's blocks per SM, report exported
set -uo pipefail
out=${1:?usage: gpu_session.sh OUTDIR TARBALL DEADLINE_S LANE [LANE...]}
tarball=${2:?usage: gpu_session.sh OUTDIR TARBALL DEADLINE_S LANE [LANE...]}
deadline=$(( $(date +%s) + ${3:?usage: gpu_session.sh OUTDIR TARBALL DEADLINE_S LANE [LANE...]} ))
shift 3
mkdir -p "$out"
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
MOE=examples/moe_topk_sigmoid

constant_trees() {  # DIR NAMES NAME:VALUES...: copies DIR/NAME of the MoE kernels, in each the constants NAMES (names
  # separated by |; router_launch.h's and topk_router.cu's `constexpr int`s) set to VALUES: one value for all, or
  # one a name, separated by commas, in NAMES' order (e.g. "kA|kB" reads:1,0)
  local dir=$1 names=$2 v d n i ns vs; shift 2
  IFS='|' read -ra ns <<< "$names"
  for v in "$@"; do
    d="$dir/${v%%:*}"
    IFS=',' read -ra vs <<< "${v#*:}"
    [ ${#vs[@]} = 1 ] || [ ${#vs[@]} = ${#ns[@]} ] || { echo "$v: one value, or one for each of $names"; return 1; }
    cp -r "$MOE/kernels" "$d" && rm -rf "$d/__pycache__"
    local files=("$d/router_launch.h" "$d/topk_router.cu")
    for i in "${!ns[@]}"; do
      n=${ns[$i]}
      local value=${vs[$i]:-${vs[0]}}
      [ "$(cat "${files[@]}" | grep -cE "\b$n = [0-9]+;")" = 1 ] \
          || { echo "router_launch.h, topk_router.cu: not one constant $n"; return 1; }
      sed -i -E "s/\b($n) = [0-9]+;/\1 = $value;/" "${files[@]}"
    done
  done
}

extension_builds() {  # MODULE...: the extension of each binding module of the MoE kernels (a folder's
  # routing_cuda.py or topk_sigmoid_cuda.py) built, or found built, all at once: one extension's build has a translation
  # unit per dtype (and router), fewer than the machine's cores, and its slowest unit sets its time, so builds made in
  # turn leave most cores idle
  local m pids=() rc=0
  for m in "$@"; do
    python3 -c "import sys; from pathlib import Path
sys.path[:0] = ['$MOE/benchmarks', '$MOE', '$MOE/kernels']
from moe_large import load_kernels
m = Path(sys.argv[1])
load_kernels('build', m.parent, m.name)._EXTENSION.module()" "$m" &
    pids+=($!)
  done
  for m in "${pids[@]}"; do wait "$m" || rc=1; done
  [ $rc = 0 ] || echo "an extension did not build"
  return $rc
}

routers_ab() {  # DIR NAMES ROUNDS "OPTIONS" A:VALUE B:VALUE [C:VALUE...]: constant_trees' trees (A, B, ...), every
  # router case of moe_routers.py's OPTIONS timed on each in one process over ROUNDS rounds, into DIR/moe_routers.json
  local dir=$1 names=$2 rounds=$3 options=$4 v kernels=(); shift 4
  constant_trees "$dir" "$names" "$@" || return 1
  local t0=$SECONDS trees=()
  for v in "$@"; do trees+=("$dir/${v%%:*}/routing_cuda.py"); done
  extension_builds "${trees[@]}" || return 1
  echo "trees built in $(( SECONDS - t0 )) s"
  for v in "$@"; do kernels+=(--kernels "${v%%:*}=$dir/${v%%:*}"); done
  python3 "$MOE/benchmarks/moe_routers.py" --router-only "${kernels[@]}" --rounds "$rounds" $options \
      --out "$dir/moe_routers.json"
}

report() {  # directory: the optimize run stored there, shown and exported
  python3 -m kernelpilot runs show 1 --store "$1/runs.db"
  python3 -m kernelpilot runs export 1 --store "$1/runs.db" --out "$1/report"
}

step() {  # name, directory: the step's commands; stdout and stderr go to log.txt
  local name=$1 dir=$2
  case $name in
    pytest-gpu) python3 -m pytest -q -m gpu -p no:cacheprovider tests ;;
    pytest-harness) python3 -m pytest -q -m gpu -p no:cacheprovider -rs tests/test_cheats.py tests/test_evaluate_core.py \
        tests/test_worker_pool.py tests/test_problem_formats.py ;;
    pytest-moe) python3 -m pytest -q -m gpu -p no:cacheprovider "$MOE/tests/test_moe_problem.py" ;;
    moe-in-graph) python3 "$MOE/benchmarks/moe_in_graph.py" ${MOE_IN_GRAPH_ARGS:-} --out "$dir/moe_in_graph.json" ;;
    pytest-moe-routers) python3 -m pytest -q -m "gpu and example" -p no:cacheprovider "$MOE/tests/test_moe_routers.py" ;;
    timing) python3 benchmarks/eval_timing.py && cp benchmarks/results/eval_timing.json "$dir/" ;;
    l2-persisting) python3 benchmarks/l2_persisting.py && cp benchmarks/results/l2_persisting.json "$dir/" ;;
    speed)   # SPEED_RUNS times (default 1); every run is appended to eval_timing.jsonl
      for _ in $(seq "${SPEED_RUNS:-1}"); do python3 benchmarks/eval_timing.py --only speed || return 1; done
      cp benchmarks/results/eval_timing.json benchmarks/results/eval_timing.jsonl "$dir/" ;;
    startup) python3 benchmarks/eval_startup.py && cp benchmarks/results/eval_startup.json "$dir/" ;;
    profile-capture) bash tests/fixtures/ncu_profile/capture.sh "$dir" ;;
    profile-source)   # per-line hotspots on code with line info: a Triton kernel (Triton keeps it) and nvcc -lineinfo
      local rc=0
      nvcc -arch=sm_90 -O3 -lineinfo -o "$dir/cuda_registers" examples/profile/cuda_registers.cu || rc=1
      nvcc -arch=sm_90 -O3 -lineinfo -o "$dir/cuda_access" examples/profile/cuda_access.cu || rc=1
      for run in "triton_underfill underfill_sum python3 examples/profile/triton_underfill.py" \
                 "cuda_registers hold_many $dir/cuda_registers" "cuda_access access_problems $dir/cuda_access"; do
        set -- $run
        local name=$1 kernel=$2; shift 2
        python3 -m kernelpilot profile --source --kernel "$kernel" --launch-count 1 --out "$dir" --name "$name" \
            --json -- "$@" > "$dir/$name.json" || rc=1
        python3 -m kernelpilot profile --import "$dir/$name.ncu-rep" --source || rc=1
      done
      return $rc ;;
    profile-noperm)   # kpilot profile as an unprivileged user: ERR_NVGPUCTRPERM where the driver keeps counters to admins
      grep -i profiling /proc/driver/nvidia/params
      local home; home=$(mktemp -d); chmod 777 "$home"
      setpriv --reuid=65534 --regid=65534 --clear-groups env HOME="$home" PYTHONPATH="$PWD/src" \
          python3 -m kernelpilot profile --kernel underfill_sum --out "$home" --json -- \
          python3 examples/profile/triton_underfill.py > "$dir/noperm.json" 2> "$dir/noperm.stderr"
      echo "kpilot exit $?"; head -5 "$dir/noperm.stderr"; head -c 800 "$dir/noperm.json"; echo ;;
    optimize-search) bash benchmarks/optimize_search.sh "$dir" ;;
    e2e-kernelbench|e2e-gpumode|e2e-native) bash benchmarks/gpu_eval_validation.sh "$dir" "${name#e2e-}" ;;
    moe-check)
      local rc=0
      for kernel in ${MOE_CHECK_KERNELS:-topk_sigmoid_cuda.py dispatch.py}; do
        for variant in plain biased; do
          python3 -m kernelpilot check "$MOE/$variant" -c "$MOE/kernels/$kernel" --json \
              > "$dir/check_${variant}_${kernel%.py}.json" || rc=1
          python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); bad=[c["case"]+": "+c["message"][:120] for c in r.get("cases",[]) if not c.get("ok")]; print(sys.argv[1].rsplit("/",1)[-1], "correct", r.get("correct"), "passed", r.get("passed"), "cases", len(r.get("cases",[])), "failed", len(bad), bad[:3], r.get("error"))' \
              "$dir/check_${variant}_${kernel%.py}.json"
        done
      done
      return $rc ;;
    moe-profile)
      local rc=0
      for variant in plain biased; do
        for kernel in ${MOE_PROFILE_KERNELS:-topk_sigmoid_cuda_warp topk_sigmoid_cuda topk_sigmoid_cuda_persistent}; do
          python3 -m kernelpilot profile --problem "$MOE/$variant" --candidate "$MOE/kernels/$kernel.py" \
              --case "${MOE_PROFILE_CASE:-experts=256,tokens=65536,k=8,dtype=bfloat16}" --kernel topk_sigmoid --launch-count 1 \
              --source --out "$dir" --name "${variant}_$kernel" --json > "$dir/${variant}_$kernel.json" || rc=1
          python3 -m kernelpilot profile --import "$dir/${variant}_$kernel.ncu-rep" || rc=1
        done
        if [ -e "$dir/${variant}_topk_sigmoid_cuda_warp.json" ] && [ -e "$dir/${variant}_topk_sigmoid_cuda.json" ]; then
          python3 -m kernelpilot profile diff "$dir/${variant}_topk_sigmoid_cuda_warp.json" \
              "$dir/${variant}_topk_sigmoid_cuda.json" || rc=1
        fi
      done
      return $rc ;;
    moe-optimize)
      python3 -m kernelpilot optimize "$MOE/plain" -c "$MOE/kernels/topk_sigmoid_triton.py" --arch sm_90 --budget 20 \
          --case experts=256,tokens=65536,k=8,dtype=bfloat16 --case experts=128,tokens=8192,k=8,dtype=bfloat16 \
          --case experts=64,tokens=1024,k=4,dtype=bfloat16 --store "$dir/runs.db" --json > "$dir/events.jsonl"
      report "$dir" ;;
    moe-optimize-cuda)   # the persistent grid's blocks per SM (a launch setting: one build serves every variant)
      python3 -m kernelpilot optimize "$MOE/plain" -c "$MOE/kernels/topk_sigmoid_cuda_persistent.py" --budget 10 \
          --case experts=256,tokens=65536,k=8,dtype=bfloat16 --case experts=128,tokens=65536,k=8,dtype=bfloat16 \
          --case experts=256,tokens=8192,k=8,dtype=bfloat16 --store "$dir/runs.db" --json > "$dir/events.jsonl"
      report "$dir" ;;
    moe-routers) python3 "$MOE/benchmarks/moe_routers.py" --router-only ${MOE_ROUTERS_ARGS:-} --out "$dir/moe_routers.json" ;;
    moe-router-profile)
      python3 -m kernelpilot profile --source --kernel topk_router --out "$dir" --name router_worst --json \
          -- python3 "$MOE/benchmarks/router_worst.py" --once ${MOE_ROUTER_WORST_ARGS:-} > "$dir/router_worst.json" || return 1
      python3 -m kernelpilot profile --import "$dir/router_worst.ncu-rep" --source ;;
    moe-router-stages)   # the clock build's copy made, both extensions built at once, then the run
      python3 "$MOE/benchmarks/router_stages.py" --make-tree "$dir/stage_clocks" || return 1
      extension_builds "$dir/stage_clocks/routing_cuda.py" "$MOE/kernels/routing_cuda.py" || return 1
      python3 "$MOE/benchmarks/router_stages.py" --tree "$dir/stage_clocks" ${MOE_ROUTER_STAGES_ARGS:-} \
          --out "$dir/router_stages.json" ;;
    moe-one-lane-sweep)   # the tree's kernels with router_launch.h's one-lane thresholds never reached, and at 4,096
      constant_trees "$dir" "kOneLaneTokens|kOneLaneWideRowTokens" rounds:2000000000 one_lane:4096 || return 1
      python3 "$MOE/benchmarks/moe_token_sweep.py" --kernels rounds="$dir/rounds" --kernels one_lane="$dir/one_lane" \
          ${MOE_SWEEP_ARGS:-} --out "$dir/moe_token_sweep.json" ;;
    moe-grouped-lanes)   # the grouped router with kGroupedMergeLeastLanes at 8 (a group a lane or more) and at 4
      routers_ab "$dir" kGroupedMergeLeastLanes 3 "--variant grouped ${MOE_ROUTERS_ARGS:-}" \
          group_lanes:8 two_groups:4 ;;
    compile-probe)   # torch.compile of two MoE references over their cases, outside the box (compile_probe.py)
      local rc=0 p
      for p in plain softmax; do
        python3 benchmarks/compile_probe.py "$MOE/$p" --dtype "${COMPILE_PROBE_DTYPE:-bfloat16}" || rc=1
        cp benchmarks/results/compile_probe.json "$dir/compile_probe_$p.json" || rc=1
      done
      return $rc ;;
    compile-box)   # torch.compile as a baseline in the box, over shape changes: each case timed, or the note says why
      local cases
      cases=$(python3 -c "from kernelpilot.evaluate.problem import load_problem as l
print(' '.join(['--case=' + c.name for c in l('$MOE/plain').cases if c.params.get('dtype') == 'bfloat16'][:14]))")
      python3 -m kernelpilot bench "$MOE/plain" -c "$MOE/reference.py" --baseline compile --graphs --budget 0.3 \
          $cases --json > "$dir/bench.json" || return 1
      python3 -c "import json, sys; d = json.load(open(sys.argv[1])); print('\n'.join(d['notes']))
print(sum(1 for b in d['bench'] if b.get('baselines', {}).get('compile')), 'of', len(d['bench']), 'cases timed')" \
          "$dir/bench.json" ;;
    moe-merge-shifts)   # the merge kernel's shift table by expert (kMergeShiftLanes 0) and side by side (1)
      routers_ab "$dir" kMergeShiftLanes 3 \
          "--variant biased --variant grouped ${MOE_ROUTERS_ARGS:---tokens 8192 --tokens 65536 --tokens 100000}" \
          by_expert:0 side_by_side:1 ;;
    moe-row-prefetch)   # the rounds kernel with a bias fetching its first row before the shift table (1) or not
      routers_ab "$dir" kRowPrefetch 5 "--variant biased --variant grouped \
          ${MOE_ROUTERS_ARGS:---tokens 1 --tokens 16 --tokens 100 --tokens 128 --tokens 3000}" \
          no_prefetch:0 prefetch:1 ;;
    moe-rounds-redux)   # the rounds kernel's largest key over 16 lanes by shuffles (0) or two REDUX (1)
      routers_ab "$dir" kRoundsRedux 3 "--variant biased --variant grouped --variant softmax \
          ${MOE_ROUTERS_ARGS:---tokens 1 --tokens 100 --tokens 3000}" shuffles:0 redux:1 ;;
    moe-lanes-redux)   # make_shifts' range and 16 lanes' reductions by shuffles (0) or REDUX (1)
      routers_ab "$dir" kLanesRedux 3 "--variant biased --variant grouped --variant softmax \
          ${MOE_ROUTERS_ARGS:---tokens 1 --tokens 100 --tokens 3000 --tokens 100000}" shuffles:0 redux:1 ;;
    moe-groups-at-once)   # keep_groups' group keys gathered by shuffles one at a time (1) or four at once (4)
      routers_ab "$dir" kGroupsAtOnce 3 "--variant grouped \
          ${MOE_ROUTERS_ARGS:---tokens 1 --tokens 100 --tokens 3000 --tokens 100000}" one:1 four:4 ;;
    moe-piece-groups)   # groups of 4n experts one a lane (1) or two a lane on 4 lanes (2)
      routers_ab "$dir" kGroupedPieceGroupsALane 3 \
          "--variant grouped ${MOE_ROUTERS_ARGS:---tokens 8192 --tokens 100000}" one:1 two:2 ;;
    moe-key-logits)   # the chosen logits read again from the row (kKeyLogits 0) or from their keys (1)
      routers_ab "$dir" kKeyLogits 3 "--variant plain --variant softmax ${MOE_ROUTERS_ARGS:---dtype bfloat16 \
          --dtype float16 --tokens 1 --tokens 100 --tokens 3000 --tokens 8192 --tokens 100000}" row:0 keys:1 ;;
    moe-half-chunks)   # a group's last chunk of 4 experts as a chunk of 8 (kHalfChunks 0) or as 4 (1)
      routers_ab "$dir" kHalfChunks 3 "--variant grouped ${MOE_ROUTERS_ARGS:---tokens 8192 --tokens 100000}" \
          eight:0 four:1 ;;
    moe-lists-terms)   # kFourLists and kTermFma each at 1 against both at 0, sharing the base tree's build
      routers_ab "$dir" "kFourLists|kTermFma" 3 "${MOE_ROUTERS_ARGS:---variant softmax --tokens 3000 --tokens 8192 \
          --tokens 100000}" base:0,0 four:1,0 fma:0,1 ;;
    moe-four-lists)   # lists of best keys of 8 whatever k (kFourLists 0) or of 4 where k is 4 or less (1)
      routers_ab "$dir" kFourLists 3 "--router-only --variant plain --variant biased --variant softmax \
          ${MOE_ROUTERS_ARGS:---tokens 100 --tokens 3000 --tokens 100000}" eight:0 four:1 ;;
    moe-merge-blocks)   # the merge kernel's blocks per SM by logit size and chunks (0) or a tier more where it fits (1)
      routers_ab "$dir" kMergeMoreBlocks 3 "--router-only ${MOE_ROUTERS_ARGS:---tokens 8192 --tokens 100000}" \
          tiers:0 more:1 ;;
    moe-merge-wide)   # the merge kernel's shapes (0), or twice the lanes a token where there is such a shape (1,000,000)
      routers_ab "$dir" kMergeWideTokens 3 "--router-only ${MOE_ROUTERS_ARGS:---tokens 8192 --tokens 65536}" \
          shapes:0 wide:1000000 ;;
    moe-large) python3 "$MOE/benchmarks/moe_large.py" ${MOE_LARGE_ARGS:-} && cp "$MOE/results/moe_large.json" "$dir/" ;;
    moe-sort) python3 "$MOE/benchmarks/moe_sort.py" "$dir" ${MOE_SORT_ARGS:-} ;;
    moe-variants) python3 "$MOE/benchmarks/moe_variants.py" "$dir" ${MOE_VARIANTS:?moe-variants needs MOE_VARIANTS} ${MOE_VARIANTS_ARGS:-} ;;
    moe-bench-large) python3 "$MOE/bench.py" --dtype bfloat16 --tokens 8192 --tokens 65536 && cp -r "$MOE"/results/* "$dir/" ;;
    moe-bench-plain|moe-bench-biased|moe-bench-softmax|moe-bench-grouped)
      python3 "$MOE/bench.py" --dtype bfloat16 --variant "${name#moe-bench-}" ${MOE_BUDGET:+--budget $MOE_BUDGET} \
          && cp -r "$MOE"/results/* "$dir/" ;;
    moe-bench-dtypes-plain|moe-bench-dtypes-biased|moe-bench-dtypes-softmax|moe-bench-dtypes-grouped)
      extension_builds "$MOE/kernels/routing_cuda.py" "$MOE/kernels/topk_sigmoid_cuda.py" || return 1
      for dtype in ${MOE_DTYPES:-float16 float32}; do   # each dtype's rows copied as it ends: a cut-off run keeps them
        python3 "$MOE/bench.py" --dtype $dtype --variant "${name#moe-bench-dtypes-}" --kernel dispatch.py \
            ${MOE_BUDGET:+--budget $MOE_BUDGET} || return 1
        cp -r "$MOE"/results/* "$dir/"
      done ;;
    *) echo "unknown step $name"; return 2 ;;
  esac
}

pack() {  # [tag]: a temporary name of its own for each lane
  local tmp="$tarball.${1:-all}.tmp"
  tar -czf "$tmp" -C "$(dirname "$out")" "$(basename "$out")" 2>/dev/null && mv -f "$tmp" "$tarball"
}

lane() {  # gpu index, steps
  local gpu=$1 steps=$2
  for name in ${steps//,/ }; do
    local left=$(( deadline - $(date +%s) ))
    local dir="$out/$name"
    mkdir -p "$dir"
    if [ "$left" -lt 20 ]; then echo "not started: deadline" > "$dir/exit.txt"; continue; fi
    local t0=$(date +%s)
    CUDA_VISIBLE_DEVICES=$gpu timeout -k 10 "$left" bash -c "$(declare -f step report constant_trees extension_builds routers_ab); MOE=$MOE; step $name $dir" \
        > "$dir/log.txt" 2>&1
    local rc=$?
    echo "exit $rc after $(( $(date +%s) - t0 )) s on GPU $gpu$([ $rc = 124 ] && echo ' (cut off at the deadline)')" > "$dir/exit.txt"
    echo "[lane $gpu] $name: $(cat "$dir/exit.txt")"
    pack "$gpu"
  done
}

{ date -u +%Y-%m-%dT%H:%MZ; nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader
  python3 -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__)'; } > "$out/environment.txt"
i=0
for steps in "$@"; do lane "$i" "$steps" & i=$((i + 1)); done
wait
pack
echo "packed into $tarball"
