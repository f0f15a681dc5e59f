"""How many warps of the MoE sorting-network kernel select a second time on fp32 logits without a bias: a warp does
where one of its tokens has two of its best k + 1 logits alike in their top 24 bits (or a best k that is not
positive), the test the kernel makes on its 24-bit keys. On the problem's logits (reference.make_inputs), for each
shape at the kernel's experts per thread (16, and 32 for 256 experts, k 8: a warp holds 32 / (experts / pt)
tokens): the share of tokens and of warps, and the warps of the first 8,192 tokens. Also how many tokens exact
32-bit keys (the bits above the token's largest logit's less 2^S - 1, S = 32 - log2(experts), then the expert;
results/moe_variants_exact1.json) could not order, which send their warp to 64-bit keys. No GPU needed: the
inputs are made on the CPU, so the counts are of the problem's distribution, not of the very logits a GPU run gets.
Writes examples/moe_topk_sigmoid/results/fp32_tie_warps.json (and a line of its .jsonl history).

    python examples/moe_topk_sigmoid/benchmarks/fp32_tie_warps.py [--tokens 65536] [--seed 0]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
MOE = ROOT / "examples" / "moe_topk_sigmoid"
sys.path[:0] = [str(ROOT / "benchmarks"), str(MOE)]

from _common import write_results  # noqa: E402

SHAPES = ((64, 4, 16), (64, 8, 16), (128, 4, 16), (128, 8, 16), (256, 4, 16), (256, 8, 16), (256, 8, 32))


def selects_again(logits, k: int):
    """Per token: whether the kernel's 24-bit keys (the logit's top 24 bits, then 255 - expert) leave its best k in
    doubt: two of the best k + 1 alike in those bits, or the k-th not positive."""
    import torch

    experts = logits.shape[1]
    bits = logits.view(torch.int32).to(torch.int64)
    keys = (bits & ~0xFF) | (255 - torch.arange(experts, dtype=torch.int64))
    best = keys.topk(k + 1, dim=1).values
    top24 = best >> 8
    return (top24[:, :-1] == top24[:, 1:]).any(dim=1) | (best[:, k - 1] < 0x100)


def exact_keys_fall_back(logits, k: int):
    """Per token: whether exact 32-bit keys cannot order its best k: its largest logit's bits are below 2^S - 1
    (S = 32 - log2(experts): a negative or tiny largest logit), or fewer than k of its logits lie above B, the
    largest's bits less 2^S - 1."""
    import torch

    experts = logits.shape[1]
    span = (1 << (32 - (experts.bit_length() - 1))) - 1
    bits = logits.view(torch.int32).to(torch.int64)
    bound = bits.max(dim=1).values - span
    return (bound < 0) | ((bits > bound[:, None]).sum(dim=1) < k)


def main() -> None:
    import reference as ref

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tokens", type=int, default=65536)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    rows = []
    for experts, k, pt in SHAPES:
        case = {"experts": experts, "tokens": args.tokens, "k": k, "dtype": "float32"}
        logits, _, _ = ref.make_inputs(case, args.seed, "cpu")
        again = selects_again(logits, k)
        fall_back = int(exact_keys_fall_back(logits, k).sum())
        per_warp = 32 // (experts // pt)
        warps = again[: args.tokens // per_warp * per_warp].view(-1, per_warp).any(dim=1)
        first = warps[: 8192 // per_warp]
        rows.append({"experts": experts, "k": k, "experts_per_thread": pt, "tokens_per_warp": per_warp,
                     "token_share": round(again.float().mean().item(), 5),
                     "warp_share": round(warps.float().mean().item(), 5),
                     "warps_of_8192_tokens": int(first.sum()), "of": len(first),
                     "exact_keys_fall_back_tokens": fall_back})
        r = rows[-1]
        print(f"{experts:3d} experts k {k} pt {pt:2d}: tokens {100 * r['token_share']:.3f}%, warps "
              f"{100 * r['warp_share']:.3f}%, {r['warps_of_8192_tokens']} of the {r['of']} warps of 8,192 tokens; "
              f"exact keys fall back on {fall_back} of {args.tokens} tokens")
    write_results("fp32_tie_warps", {"tokens": args.tokens, "seed": args.seed, "rows": rows}, folder=MOE / "results")


if __name__ == "__main__":
    main()
