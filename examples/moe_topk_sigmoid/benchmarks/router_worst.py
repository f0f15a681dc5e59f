"""The router kernel's farthest cases from the stream floor (100,000 bf16 tokens: DeepSeek-V3's grouped selection
and 64 experts in 8 groups, Kimi K2's and GLM-4.5's biased sigmoid, Qwen3-MoE's, DeepSeek-V2's and Qwen1.5-MoE's
softmax, a plain 256-expert router), run
through routing_cuda: timed (L2 flushed, events, median), or with --once each launched once, for a profiler:

    python examples/moe_topk_sigmoid/benchmarks/router_worst.py
    kpilot profile --kernel topk_router --json -- python examples/moe_topk_sigmoid/benchmarks/router_worst.py --once

--tokens N routes N tokens a case instead (e.g. 1: a launch's latency rather than its streaming).

Prints one JSON line per case; writes nothing.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
MOE = ROOT / "examples" / "moe_topk_sigmoid"
sys.path[:0] = [str(ROOT / "src"), str(MOE), str(MOE / "kernels")]

TOKENS = 100_000
# (router, experts, k, groups): the shipped models' shapes farthest from the floor
CASES = [("grouped", 256, 8, (8, 4)), ("grouped", 64, 6, (8, 4)), ("biased", 384, 8, None), ("biased", 160, 8, None),
         ("softmax", 128, 8, None), ("softmax", 160, 6, None), ("softmax", 60, 4, None), ("plain", 256, 8, None)]


def router_inputs(router: str, experts: int, tokens: int, dtype: str = "bfloat16"):
    """A case's logits (seeded normal, spread 2) on the GPU, and with a bias (biased, grouped) its bias (spread 0.1,
    narrow enough for the packed keys); None for the other routers."""
    import torch

    g = torch.Generator(device="cuda").manual_seed(1)
    logits = (torch.randn(tokens, experts, device="cuda", generator=g) * 2.0).to(getattr(torch, dtype))
    bias = torch.randn(experts, device="cuda", generator=g) * 0.1 if router in ("biased", "grouped") else None
    return logits, bias


def main() -> None:
    import torch

    import routing_cuda
    from stream_floor import flushed_median_us

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--once", action="store_true", help="launch each case once, untimed (for a profiler)")
    parser.add_argument("--tokens", type=int, default=TOKENS, help=f"tokens a case (default {TOKENS:,})")
    args = parser.parse_args()
    if args.tokens < 1:
        parser.error(f"--tokens must be at least 1, not {args.tokens}")
    once, tokens = args.once, args.tokens
    if not torch.cuda.is_available():
        sys.exit("router_worst.py needs a GPU")
    for router, experts, k, groups in CASES:
        logits, bias = router_inputs(router, experts, tokens)
        n_group, topk_group = groups or (1, 1)

        def call():
            return routing_cuda.route(router, logits, bias, k, False, n_group, topk_group)

        call()
        torch.cuda.synchronize()
        row = {"router": router, "experts": experts, "k": k, "tokens": tokens, "groups": groups}
        if not once:
            row["us"] = round(flushed_median_us(call), 2)
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
