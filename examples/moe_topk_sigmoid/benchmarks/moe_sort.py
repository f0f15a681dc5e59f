"""The MoE sorting-network kernel (topk_sigmoid_sort.cu) at each of its experts per thread (sort16, sort32,
sort64) against the packed-key kernel (keys above 8,192 tokens, keys_persistent up to it) and the first kernel
(warp, up to 1,024 tokens); first its outputs on edge inputs (normal, all equal, all negative, +0 and -0, small
integers; 1 to 20,001 tokens; with a bias, a narrow one and one spanning more than 1.5) through the problem's
check. Each case's algorithms are timed in turn (L2 flushed, events, median of 200, as `kpilot bench` times),
over two rounds with the order reversed in the second; a time is the median of its rounds. Writes
OUT/moe_sort.json (OUT/moe_sort_biased.json with --biased; either with _<dtype> for each --dtype).

    python examples/moe_topk_sigmoid/benchmarks/moe_sort.py OUT [--biased] [--no-time | --no-check]
        [--dtype float32 ...] [--tokens 16 ...] [--sorts sort32 prune32 ...]

bf16, fp16 and fp32 (--dtype: some of them). Timed without a bias: bf16 at 1 to 65,536 tokens, fp16 and fp32 at
8,192 and 65,536; with --biased: bf16 at 16 to 65,536 tokens, fp16 at 65,536, fp32 at 8,192 and 65,536. --tokens
times these token counts instead, for every dtype (the file's name then ends in _t<tokens>...). --sorts checks
and times these sorting-network kernels (any sort or prune one of topk_sigmoid_cuda.ALGOS: sort8 too) in place of
sort16, sort32 and sort64 (the file's name then ends in _<sort>...).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
MOE = ROOT / "examples" / "moe_topk_sigmoid"
sys.path[:0] = [str(ROOT / "src"), str(MOE), str(MOE / "kernels"), str(ROOT / "benchmarks")]

SORTS = ["sort16", "sort32", "sort64"]
EDGE_TOKENS = (1, 3, 17, 1000, 20001)
TIMED_TOKENS = {"bfloat16": (65536, 8192, 1024, 128, 16, 1), "float16": (65536, 8192), "float32": (65536, 8192)}
TIMED_TOKENS_BIASED = {"bfloat16": (65536, 8192, 1024, 16), "float16": (65536,), "float32": (65536, 8192)}


def edge_inputs(torch, tokens: int, experts: int, g) -> dict:
    rand = lambda: torch.rand(tokens, experts, device="cuda", generator=g)  # noqa: E731
    return {"randn": torch.randn(tokens, experts, device="cuda", generator=g),
            "equal": torch.full((tokens, experts), 0.5, device="cuda"),
            "negative": -rand() - 0.1,
            "zeros": torch.where(rand() < 0.5, 0.0, -0.0),
            "integers": torch.randint(-3, 3, (tokens, experts), device="cuda", generator=g).float()}


def main() -> None:
    import torch

    import reference as ref
    import topk_sigmoid_cuda as tc
    from _common import environment
    from moe_large import checked_times_in_turn

    import argparse

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--biased", action="store_true", help="the biased variant (DeepSeek-V3 routing)")
    ap.add_argument("--no-time", action="store_true", help="the edge checks alone")
    ap.add_argument("--no-check", action="store_true", help="the timings alone (outputs still checked)")
    ap.add_argument("--tokens", type=int, action="append", help="time these token counts (default: by dtype)")
    ap.add_argument("--sorts", nargs="+", choices=[a for a in tc.ALGOS if a.startswith(("sort", "prune"))],
                    help="these sorting-network kernels (default: sort16 sort32 sort64)")
    ap.add_argument("--dtype", action="append", choices=["bfloat16", "float16", "float32"],
                    help="these dtypes alone (default: all three)")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        sys.exit("moe_sort.py needs a GPU")
    out = args.out
    sorts = args.sorts or SORTS
    out.mkdir(parents=True, exist_ok=True)
    names = args.dtype or ["bfloat16", "float16", "float32"]
    dtypes = [getattr(torch, d) for d in names]
    t0 = time.time()
    tc._extension()
    print(f"build {time.time() - t0:.0f} s", flush=True)
    failed, checks = [], 0
    for dtype in [] if args.no_check else dtypes:
        for experts in (64, 128, 256):
            for k in (4, 8):
                for tokens in EDGE_TOKENS:
                    g = torch.Generator(device="cuda").manual_seed(tokens * 7 + experts + k)
                    biases = {"no bias": None}
                    if args.biased:
                        narrow = torch.randn(experts, device="cuda", generator=g) * 0.1
                        biases = {"narrow bias": narrow, "wide bias": narrow * 30}
                    for name, x in edge_inputs(torch, tokens, experts, g).items():
                        x = x.to(dtype)
                        for bname, bias in biases.items():
                            want = ref.topk_sigmoid(x, bias, k)
                            for algo in sorts:
                                checks += 1
                                ok, msg = ref.check((x, bias, k), tc.run(x, bias, k, algo), want)
                                if not ok:
                                    failed.append(f"{dtype} {experts} {k} {tokens} {name} {bname} {algo}: {msg[:150]}")
    print(f"checks {checks}, failed {len(failed)}", *failed[:20], sep="\n", flush=True)
    rows = []
    timed = {} if args.no_time else TIMED_TOKENS_BIASED if args.biased else TIMED_TOKENS
    timed = {d: args.tokens or t for d, t in timed.items() if d in names}
    for dtype, sizes in timed.items():
        for tokens in sizes:
            for experts in (64, 128, 256):
                for k in (4, 8):
                    case = {"experts": experts, "tokens": tokens, "k": k, "dtype": dtype}
                    x, bias, _ = (ref.make_inputs_biased if args.biased else ref.make_inputs)(case, 1, "cuda")
                    want = ref.topk_sigmoid(x, bias, k)
                    algos = ["keys" if tokens > 8192 else "keys_persistent", *(["warp"] if tokens <= 1024 else []),
                             *sorts]
                    times, failures = checked_times_in_turn(algos, lambda a: tc.run(x, bias, k, a),
                                                            lambda got: ref.check((x, bias, k), got, want))
                    oks = {a: not failures[a] for a in algos}
                    row = dict(case, **{a: round(t, 3) for a, t in times.items()}, ok=oks)
                    base = row[algos[0]]
                    best = min(sorts, key=lambda a: row[a])
                    print(f"{dtype:8} E{experts:3} T{tokens:5} k{k}  {algos[0]} {base:7.2f}  "
                          + "  ".join(f"{a} {row[a]:6.2f}" for a in sorts)
                          + (f"  warp {row['warp']:6.2f}" if "warp" in row else "")
                          + f"  best {best} {row[best] / base:.3f}x  ok {all(oks.values())}", flush=True)
                    rows.append(row)
    stem = "moe_sort_biased" if args.biased else "moe_sort"
    stem += "".join(f"_{d}" for d in args.dtype or []) + "".join(f"_t{t}" for t in args.tokens or [])
    stem += "".join(f"_{a}" for a in args.sorts or [])
    (out / (stem + ".json")).write_text(
        json.dumps({"environment": environment(), "checks": checks, "failed": failed, "rows": rows}, indent=1))
    if failed or not all(all(r["ok"].values()) for r in rows):
        sys.exit("failed checks")


if __name__ == "__main__":
    main()
