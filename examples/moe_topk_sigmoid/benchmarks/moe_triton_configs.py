"""The MoE Triton kernel (topk_sigmoid_triton.py) at each of several launch settings (ROWS tokens per program,
NUM_WARPS; the kernel's TILE set to ROWS times the experts) on the bf16 cases of both variants from 1,024 tokens
up: each case's settings timed in turn (L2 flushed, events, median of 200, as `kpilot bench` times), over two
rounds with the order reversed in the second, every output checked. Writes OUT/moe_triton_configs.json; prints
each case's fastest setting and the kernel's own setting's time against it (where it is among those timed).

    python examples/moe_topk_sigmoid/benchmarks/moe_triton_configs.py OUT [--tokens 8192 ...] [--config 16x4 ...]
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

CONFIGS = ("16x4", "16x8", "8x4", "4x4", "4x2", "2x2", "2x1", "1x1")   # ROWSxNUM_WARPS
TOKENS = (1024, 8192, 65536)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--tokens", type=int, action="append", help=f"these token counts (default: {TOKENS})")
    ap.add_argument("--config", action="append", help=f"ROWSxNUM_WARPS settings (default: {' '.join(CONFIGS)})")
    args = ap.parse_args()

    import torch

    if not torch.cuda.is_available():
        sys.exit("moe_triton_configs.py needs a GPU")
    import reference as ref
    import topk_sigmoid_triton as tt
    from _common import environment
    from moe_large import checked_times_in_turn

    configs = args.config or list(CONFIGS)
    try:
        settings = {c: tuple(int(n) for n in c.split("x")) for c in configs}
    except ValueError:
        sys.exit(f"a setting is ROWSxNUM_WARPS, e.g. 16x4: got {configs}")
    tile, warps = tt.TILE, tt.NUM_WARPS

    def run(setting, x, bias, k):
        per_program, tt.NUM_WARPS = settings[setting]
        tt.TILE = per_program * x.shape[1]
        return tt.topk_sigmoid(x, bias, k)

    rows, bad = [], []
    for biased in (False, True):
        for tokens in args.tokens or TOKENS:
            for experts in (64, 128, 256):
                for k in (4, 8):
                    case = {"experts": experts, "tokens": tokens, "k": k, "dtype": "bfloat16", "biased": biased}
                    x, bias, _ = (ref.make_inputs_biased if biased else ref.make_inputs)(case, 1, "cuda")
                    want = ref.topk_sigmoid(x, bias, k)
                    times, failures = checked_times_in_turn(configs, lambda c: run(c, x, bias, k),
                                                            lambda got: ref.check((x, bias, k), got, want))
                    bad += [f"{case} {c}: {msg[:150]}" for c, msgs in failures.items() for msg in msgs]
                    default = f"{max(1, tile // experts)}x{warps}"
                    row = dict(case, **{c: round(t, 3) for c, t in times.items()}, default=default)
                    best = min(configs, key=lambda c: row[c])
                    print(f"{'biased' if biased else 'plain ':6} E{experts:3} T{tokens:5} k{k}  "
                          + "  ".join(f"{c} {row[c]:7.2f}" for c in configs)
                          + f"  best {best}" + (f"  default {row[default] / row[best]:.3f}x of it" if default in row else ""),
                          flush=True)
                    rows.append(row)
    tt.TILE, tt.NUM_WARPS = tile, warps
    fastest = [min(r[c] for c in configs) for r in rows]
    geo = {c: statistics.geometric_mean([r[c] / f for r, f in zip(rows, fastest)]) for c in configs}
    own = [r[r["default"]] / f for r, f in zip(rows, fastest) if r["default"] in r]
    if own:
        geo["default"] = statistics.geometric_mean(own)
    print("geometric mean of each setting's time over the case's fastest:",
          "  ".join(f"{c} {g:.3f}" for c, g in sorted(geo.items(), key=lambda kv: kv[1])), flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "moe_triton_configs.json").write_text(json.dumps(
        {"environment": environment(), "tile": tile, "num_warps": warps, "of_fastest_geomean": geo, "failed": bad,
         "rows": rows},
        indent=1))
    if bad:
        sys.exit("failed checks:\n" + "\n".join(bad[:20]))


if __name__ == "__main__":
    main()
