"""A quick look at the MoE CUDA kernel on the large cases (65,536 tokens by default): each algorithm's time (timed
as `kpilot bench` times a candidate: L2 flushed, events, median of 200), whether its outputs pass the problem's
check, and the stream floor of the case (examples/moe_topk_sigmoid/stream_floor.py). For iterating on the
kernel between full runs of bench.py; writes examples/moe_topk_sigmoid/results/moe_large.json.

    python examples/moe_topk_sigmoid/benchmarks/moe_large.py [--dtype bfloat16 ...] [--tokens 65536 ...] [--algo keys ...]

With --kernels NAME=FOLDER (twice or more: folders holding a topk_sigmoid_cuda.py and its kernel files, already
built or built here), every case is timed on each folder's kernels in turn, in one process on the same inputs,
over --rounds rounds (the order reversed every other round), so that a drift of the GPU's clocks over the run
falls on all of them alike; each one's time is the median of its rounds' medians.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
MOE = ROOT / "examples" / "moe_topk_sigmoid"
sys.path[:0] = [str(ROOT / "src"), str(MOE), str(MOE / "kernels"), str(ROOT / "benchmarks")]

from _common import environment  # noqa: E402

RESULTS = MOE / "results"   # moe_variants.py reads the file back from here


def kernels_arg(text: str, binding: str = "topk_sigmoid_cuda.py") -> tuple[str, Path]:
    """'base=path/to/kernels' -> ('base', Path('path/to/kernels')), the folder holding the binding module."""
    name, _, folder = text.partition("=")
    if not name or not folder:
        raise argparse.ArgumentTypeError(f"--kernels takes NAME=FOLDER, not {text!r}")
    if not (Path(folder) / binding).is_file():
        raise argparse.ArgumentTypeError(f"{folder}: no {binding} there")
    return name, Path(folder)


def load_kernels(name: str, folder: Path, file: str = "topk_sigmoid_cuda.py"):
    """One folder's topk_sigmoid_cuda module (or another of its binding modules), under a name of its own (its
    extension is named by a hash of its sources, so folders with different kernels load side by side)."""
    spec = importlib.util.spec_from_file_location(f"{Path(file).stem}_{name}", folder / file)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def round_orders(names: list[str], rounds: int) -> list[list[str]]:
    """The order of the kernels in each round: as given, then reversed, and so on."""
    return [list(names) if r % 2 == 0 else list(reversed(names)) for r in range(rounds)]


def checked_times_in_turn(names: list[str], call, check, rounds: int = 2) -> tuple[dict, dict]:
    """Each name's output checked (check(call(name)) -> (ok, message)) and its call timed as `kpilot bench` times
    (stream_floor.flushed_median_us), the names in turn in round_orders(names, rounds): the median of each name's
    rounds in us, and each name's failed checks' messages."""
    from stream_floor import flushed_median_us

    times, failures = {n: [] for n in names}, {n: [] for n in names}
    for order in round_orders(names, rounds):
        for n in order:
            ok, msg = check(call(n))
            if not ok:
                failures[n].append(msg)
            times[n].append(flushed_median_us(lambda: call(n)))
    return {n: statistics.median(t) for n, t in times.items()}, failures


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    import topk_sigmoid_cuda

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dtype", action="append")
    ap.add_argument("--tokens", type=int, action="append")
    ap.add_argument("--algo", action="append", choices=[*sorted(topk_sigmoid_cuda.ALGOS), "sort"],
                    help="\"sort\": the sorting-network kernel picked for the case (topk_sigmoid_cuda.sort_algo)")
    ap.add_argument("--variant", action="append", choices=["plain", "biased"], help="default both")
    ap.add_argument("--no-stream", action="store_true", help="skip the stream floor")
    ap.add_argument("--kernels", action="append", type=kernels_arg, help="NAME=FOLDER, twice or more: interleaved")
    ap.add_argument("--rounds", type=int, default=2, help="with --kernels: rounds per case (default 2)")
    args = ap.parse_args(argv)
    if args.kernels is not None and len(args.kernels) < 2:
        ap.error("--kernels is for two folders or more (without it, the tree's own kernels are timed)")
    if args.kernels and len({n for n, _ in args.kernels}) != len(args.kernels):
        ap.error("--kernels names must differ")
    if args.rounds < 1:
        ap.error("--rounds must be 1 or more")
    return args


def main() -> None:
    import torch

    import reference as ref
    import topk_sigmoid_cuda
    from stream_floor import flushed_median_us, stream_floor_us

    args = parse_args()
    if not torch.cuda.is_available():
        sys.exit("moe_large.py needs a GPU")
    modules = {name: load_kernels(name, folder) for name, folder in args.kernels} if args.kernels else None
    algos = args.algo or ["keys", "keys_persistent"]
    rows = []
    for dtype in args.dtype or ["bfloat16"]:
        for variant in args.variant or ["plain", "biased"]:
            for experts in (64, 128, 256):
                for tokens in args.tokens or [65536]:
                    for k in (4, 8):
                        case = {"experts": experts, "tokens": tokens, "k": k, "dtype": dtype}
                        make = ref.make_inputs_biased if variant == "biased" else ref.make_inputs
                        x, bias, _ = make(case, 1, "cuda")
                        want = ref.topk_sigmoid(x, bias, k)
                        row = {"variant": variant} | case

                        def timed(mod, algo):
                            ok, msg = ref.check((x, bias, k), mod.run(x, bias, k, algo), want)
                            return flushed_median_us(lambda: mod.run(x, bias, k, algo)), ok, msg

                        for algo in algos:
                            if modules is None:
                                us, ok, msg = timed(topk_sigmoid_cuda, algo)
                                row[algo] = {"us": round(us, 3), "ok": ok, "message": msg}
                                continue
                            got = {name: {"rounds": [], "ok": True, "message": "ok"} for name in modules}
                            for order in round_orders(list(modules), args.rounds):
                                for name in order:
                                    us, ok, msg = timed(modules[name], algo)
                                    got[name]["rounds"].append(round(us, 3))
                                    if not ok:
                                        got[name].update(ok=False, message=msg)
                            for g in got.values():
                                g["us"] = round(statistics.median(g["rounds"]), 3)
                            row[algo] = got
                        if not args.no_stream:
                            row["stream"] = stream_floor_us(tokens, experts, k, dtype, bias is not None)
                        rows.append(row)
                        print(json.dumps(row), flush=True)
    out = RESULTS / "moe_large.json"
    out.parent.mkdir(exist_ok=True)
    meta = {"kernels": {n: str(f) for n, f in args.kernels}, "rounds": args.rounds} if args.kernels else {}
    out.write_text(json.dumps({"environment": environment(), **meta, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
