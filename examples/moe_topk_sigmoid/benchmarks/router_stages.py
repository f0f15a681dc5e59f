"""Where a launch of the rounds kernel (topk_router.cu) spends its time on few tokens, by stage: a copy of kernels/
built with MOE_STAGE_CLOCKS, whose first thread reads the SM clock as each stage of its first token ends (the shift
table made, the row loaded, the keys made, each lane's best keys kept and, grouped, the groups chosen, the rounds
done, the selection done, the weights stored) and prints the clocks. Each case is launched as `kpilot bench` times
a call (L2 flushed first, CUDA events), the stages' cycles taken as the median over the launches, beside the event
time of the clock build and of the tree itself (the clocks' own cost):

    python examples/moe_topk_sigmoid/benchmarks/router_stages.py [--tokens 1 --tokens 100] [--dtype bfloat16 ...]
                                                                 [--launches 50] [--warm] [--tree DIR]
                                                                 [--out FILE]

--make-tree DIR writes the clock build's copy of kernels/ to DIR and stops (to build its extension beside the
tree's at once, as gpu_session.sh's step moe-router-stages does); --tree DIR uses it (else a temporary copy).
Writes examples/moe_topk_sigmoid/results/router_stages.json (or FILE). The stages run in one thread of one warp:
what the slowest warp of a larger grid waits on is not in them, and the time between the launch and the kernel's
first instruction, and after its last store, is the event time less the stages' sum. With --warm no launch is
preceded by an L2 flush: a stage that reads no memory yet takes longer flushed than warm waits on fetching the
kernel's instructions.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
MOE = ROOT / "examples" / "moe_topk_sigmoid"
sys.path[:0] = [str(ROOT / "src"), str(MOE), str(MOE / "kernels"), str(ROOT / "benchmarks")]

# (router, model, experts, k, extra): the shipped models' shapes the rounds kernel routes on few tokens
CASES = [("biased", "kimi-k2", 384, 8, {}), ("biased", "glm-4.5", 160, 8, {}),
         ("grouped", "deepseek-v3", 256, 8, {"n_group": 8, "topk_group": 4}),
         ("grouped", "grouped-64", 64, 6, {"n_group": 8, "topk_group": 4}),
         ("softmax", "qwen3-moe", 128, 8, {"renormalize": True}),
         ("softmax", "deepseek-v2", 160, 6, {"renormalize": False}),
         ("softmax", "mixtral", 8, 2, {"renormalize": True}),
         ("plain", "llama4-maverick", 128, 1, {})]
STAGES = ("shift_table", "row", "keys", "heads", "rounds", "selection", "weights")
LINE = re.compile(r"moe-stages router=(\d+) experts=(\d+) k=(\d+) bytes=(\d+) tokens=(\d+) W=(\d+) P=(\d+) "
                  r"sink=\d+ clocks=([-\d,]+)")
BYTES = {"bfloat16": 2, "float16": 2, "float32": 4}   # the logit dtypes, and the size the clock lines name
CLOCKS = "#define MOE_STAGE_CLOCKS 1\n"


def clock_tree(tree: Path) -> Path:
    """`tree`: a copy of kernels/ whose topk_router.cu is built with MOE_STAGE_CLOCKS (its extension, named by a
    hash of its sources, loads beside the tree's)."""
    shutil.copytree(MOE / "kernels", tree, ignore=shutil.ignore_patterns("__pycache__"))
    router = tree / "topk_router.cu"
    router.write_text(CLOCKS + router.read_text())
    return tree


def parse_stages(text: str) -> dict[tuple[int, int, int, int, int], dict]:
    """The clock lines of a run's output: {(router, experts, k, bytes, tokens): {"w": .., "p": .., "launches": [each
    launch's cycles from one stage's end to the next's, len(STAGES) of them]}}."""
    out: dict[tuple[int, int, int, int, int], dict] = {}
    for m in LINE.finditer(text):
        clocks = [int(c) for c in m.group(8).split(",")]
        if len(clocks) != len(STAGES) + 1:
            raise ValueError(f"a stage line with {len(clocks)} clocks, not {len(STAGES) + 1}: {m.group(0)!r}")
        key = tuple(int(m.group(i)) for i in range(1, 6))
        case = out.setdefault(key, {"w": int(m.group(6)), "p": int(m.group(7)), "launches": []})
        case["launches"].append([b - a for a, b in zip(clocks, clocks[1:])])
    return out


def median_stages(launches: list[list[int]]) -> dict[str, float]:
    """Each stage's median cycles over the launches, and their sum's."""
    row = {name: statistics.median(launch[i] for launch in launches) for i, name in enumerate(STAGES)}
    row["total"] = statistics.median(sum(launch) for launch in launches)
    return row


def sm_clocks_mhz() -> dict | None:
    """The SM clock now and its most (nvidia-smi), to read the cycles as time: None where nvidia-smi cannot say."""
    from _common import gpu_query

    try:
        now, most = (int(v) for v in gpu_query("clocks.sm,clocks.max.sm")[0].split(","))
    except (IndexError, ValueError):
        return None
    return {"now": now, "max": most}


def child(tree: Path, tokens: list[int], dtypes: list[str], launches: int, warm: bool) -> None:
    """In a process of its own (its stdout holds the kernel's clock lines): every case launched `launches` times
    on the clock build (after flushed_median_us's uncounted calls), each an event-timed call after an L2 flush (with
    `warm`, none: the launch before left the row, the bias and the kernel's code in L2), then timed on the tree's
    build alike; prints one JSON line per case with both event times."""
    import moe_large
    import routing_cuda
    import torch
    from router_worst import router_inputs
    from stream_floor import flushed_median_us

    clocked = moe_large.load_kernels("stage_clocks", tree, "routing_cuda.py")
    libc = ctypes.CDLL(None)
    for router, model, experts, k, extra in CASES:
        args = (extra.get("renormalize", False), extra.get("n_group", 1), extra.get("topk_group", 1))
        for dtype in dtypes:
            for n in tokens:
                logits, bias = router_inputs(router, experts, n, dtype)
                clocks_us = flushed_median_us(lambda: clocked.route(router, logits, bias, k, *args), launches,
                                              flush_l2=not warm)
                torch.cuda.synchronize()
                libc.fflush(None)   # the kernel's lines, held in C's stdout buffer, out before this case's record
                tree_us = flushed_median_us(lambda: routing_cuda.route(router, logits, bias, k, *args),
                                            flush_l2=not warm)
                print(json.dumps({"router": router, "model": model, "experts": experts, "k": k, "tokens": n,
                                  "dtype": dtype, "l2": "warm" if warm else "flushed", "event_us": round(tree_us, 3),
                                  "event_us_clocks": round(clocks_us, 3)}), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", type=int, action="append", help="tokens a case (default 1 and 100)")
    parser.add_argument("--dtype", action="append", choices=tuple(BYTES), help="logit dtypes (default bfloat16)")
    parser.add_argument("--launches", type=int, default=50, help="launches a case (default 50)")
    parser.add_argument("--warm", action="store_true",
                        help="no L2 flush before a launch (the row, the bias and the code left in L2 by the one "
                             "before)")
    parser.add_argument("--out", type=Path, default=MOE / "results" / "router_stages.json")
    parser.add_argument("--make-tree", type=Path, metavar="DIR", help="write the clock build's kernels to DIR, stop")
    parser.add_argument("--tree", type=Path, metavar="DIR", help="the clock build's kernels (from --make-tree)")
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    tokens, dtypes = args.tokens or [1, 100], args.dtype or ["bfloat16"]
    if any(t < 1 or t > 4095 for t in tokens):
        parser.error("--tokens must be 1 to 4,095 (from 4,096 tokens the merge kernel routes k 4 to 8)")
    if args.launches < 1:
        parser.error(f"--launches must be at least 1, not {args.launches}")
    if args.make_tree:
        if args.make_tree.exists():
            parser.error(f"--make-tree: {args.make_tree} exists")
        clock_tree(args.make_tree)
        return
    if args.tree and not (args.tree / "topk_router.cu").is_file():
        parser.error(f"--tree: {args.tree} holds no topk_router.cu")
    if args.tree and not (args.tree / "topk_router.cu").read_text().startswith(CLOCKS):
        parser.error(f"--tree: {args.tree}'s topk_router.cu is not the clock build (router_stages.py --make-tree)")
    import torch

    if not torch.cuda.is_available():
        sys.exit("router_stages.py needs a GPU")
    if args.child:
        child(args.child, tokens, dtypes, args.launches, args.warm)
        return

    import routing_cuda
    from _common import environment

    with tempfile.TemporaryDirectory() as tmp:
        tree = args.tree or clock_tree(Path(tmp) / "stage_clocks")
        cmd = [sys.executable, __file__, "--child", str(tree), "--launches", str(args.launches)]
        cmd += [f"--tokens={t}" for t in tokens] + [f"--dtype={d}" for d in dtypes] + ["--warm"] * args.warm
        run = subprocess.run(cmd, capture_output=True, text=True)
        if run.returncode != 0:
            sys.exit(f"the clock build's run failed ({run.returncode}):\n{run.stderr[-4000:]}")
    stages = parse_stages(run.stdout)
    rows = []
    for line in run.stdout.splitlines():
        if line.startswith("{"):
            rec = json.loads(line)
            case = stages.get((routing_cuda.ROUTERS[rec["router"]], rec["experts"], rec["k"], BYTES[rec["dtype"]],
                               rec["tokens"]))
            rec["lanes"], rec["experts_a_lane"] = (case["w"], case["p"]) if case else (None, None)
            # a case's last `launches` lines: the lines before are of flushed_median_us's uncounted calls
            rec["cycles"] = median_stages(case["launches"][-args.launches:]) if case else None
            rows.append(rec)
            print(json.dumps(rec), flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"environment": environment(), "sm_clocks_mhz": sm_clocks_mhz(),
                                    "launches": args.launches, "l2": "warm" if args.warm else "flushed",
                                    "stages": STAGES, "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
