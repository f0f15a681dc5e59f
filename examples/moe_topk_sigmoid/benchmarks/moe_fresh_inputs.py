"""Whether fresh inputs change a short kernel's time: the MoE dispatcher and the stream-floor kernel
(examples/moe_topk_sigmoid/stream_floor.py) on a few cases, each timed three ways in one process, the ways
interleaved over --rounds rounds (L2 flushed, the GPU kept busy while the host launches, CUDA events; median
of --calls):

- one: the same inputs every call (as moe_large.py and stream_floor.py time);
- fresh: as `kpilot bench` times a candidate: inputs made a batch of 10 at a time before the batch, every
  call a new one, the previous batch freed first (so the allocator hands its blocks out again);
- rotate: 10 inputs made once, the calls taking them in turn (new addresses, no new data).

The inputs are the problem's own (reference.make_inputs and make_inputs_biased).

Writes examples/moe_topk_sigmoid/results/moe_fresh_inputs.json (and a line of its .jsonl history).

    python examples/moe_topk_sigmoid/benchmarks/moe_fresh_inputs.py [--rounds 3] [--calls 200]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
MOE = ROOT / "examples" / "moe_topk_sigmoid"
sys.path[:0] = [str(ROOT / "src"), str(MOE), str(MOE / "kernels"), str(ROOT / "benchmarks")]

from _common import write_results  # noqa: E402
from kernelpilot.evaluate.timing import TimingOptions  # noqa: E402

WAYS = ("one", "fresh", "rotate")
BATCH = TimingOptions().batch   # kpilot bench's batch of fresh inputs
# (variant, experts, tokens, k, dtype)
CASES = [(v, e, t, 8, "bfloat16") for v in ("plain", "biased") for t in (8192, 65536) for e in (64, 128, 256)] + [
    ("biased", 64, 8192, 8, "float32"), ("plain", 64, 8192, 8, "float32")]


def picker(make, way: str, sync=lambda: None):
    """pick(i): the inputs of call i (i < 0: a warm-up call, always the same inputs), given `way`; make(seed)
    makes one set. sync() after each fresh batch is made."""
    if way not in WAYS:
        raise ValueError(f"way: one of {WAYS}, not {way!r}")
    warm = make(10_000)
    fixed = [make(s) for s in range(BATCH)] if way == "rotate" else None
    pool: dict = {}

    def pick(i: int):
        if i < 0 or way == "one":
            return warm
        if way == "rotate":
            return fixed[i % BATCH]
        if i not in pool:   # a new batch, the previous one freed first
            pool.clear()
            for j in range(i, i + BATCH):
                pool[j] = make(1 + j)
            sync()
        return pool.pop(i)

    return pick


def timed(run, make, way: str, calls: int) -> float:
    """The median of `calls` timed calls of run(*inputs), the inputs given `way`."""
    import torch
    from kernelpilot.evaluate.timing import gpu_sampler

    pick = picker(make, way, torch.cuda.synchronize)
    state: dict = {}

    def prepare(i: int) -> None:
        state.pop("inputs", None)
        state["inputs"] = pick(i)

    sample = gpu_sampler(lambda: run(*state["inputs"]), prepare=prepare)
    for i in range(-20, 0):
        sample(i)
    return statistics.median(sample(i) for i in range(calls))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--calls", type=int, default=200)
    args = ap.parse_args()

    import torch
    import dispatch
    import reference as ref
    from moe_large import round_orders
    from stream_floor import SHAPES, stream

    rows = []
    for variant, experts, tokens, k, dtype in CASES:
        case = {"experts": experts, "tokens": tokens, "k": k, "dtype": dtype}
        maker = ref.make_inputs_biased if variant == "biased" else ref.make_inputs

        def make(seed: int, case=case, maker=maker):
            return maker(case, seed, "cuda")

        # The stream kernel's fastest tile shape for the case, from one quick pass on one input.
        shape = min(SHAPES, key=lambda s: timed(lambda x, b, kk: stream(x, b, kk, *s), make, "one", 50))
        runs = {"dispatch": dispatch.topk_sigmoid, "stream": lambda x, b, kk: stream(x, b, kk, *shape)}
        times = {(name, way): [] for name in runs for way in WAYS}
        for order in round_orders(list(times), args.rounds):
            for name, way in order:
                times[name, way].append(timed(runs[name], make, way, args.calls))
        row = {"variant": variant, "experts": experts, "tokens": tokens, "k": k, "dtype": dtype,
               "stream_shape": list(shape)}
        for (name, way), ts in times.items():
            row[f"{name}_{way}_us"] = round(statistics.median(ts), 3)
            row[f"{name}_{way}_rounds_us"] = [round(t, 3) for t in ts]
        rows.append(row)
        print(json.dumps({key: v for key, v in row.items() if not key.endswith("rounds_us")}), flush=True)

    out = write_results("moe_fresh_inputs", {"gpu": torch.cuda.get_device_name(), "rounds": args.rounds,
                                             "calls": args.calls, "rows": rows}, folder=MOE / "results")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
