"""Top-k sigmoid routing in Triton (portable: NVIDIA and AMD). Each program takes ROWS tokens as a
[ROWS, experts] tile, selects the k largest scores one after another (the maximum, its lowest index among
equals, then masked out), and writes weights and ids; with a bias, the weights are renormalised.

ROWS is TILE // experts (rounded up to a power of two): a tile of TILE logits per program. On the H200, TILE
1024 with 4 warps came to 1.02x of the fastest of eight settings per case by geometric mean (at most 1.11x),
where 16 rows for every shape came to 1.18x (at most 2.00x at 256 experts), on the 36 bf16 cases of both
variants from 1,024 tokens (benchmarks/results/moe_triton_configs.json). Not timed on AMD.
"""

import torch
import triton
import triton.language as tl

TILE = 1024   # logits per program
NUM_WARPS = 4
KPILOT_TUNE = {"TILE": [256, 512, 1024, 2048, 4096], "NUM_WARPS": [1, 2, 4, 8]}
KPILOT_SPECS = {
    "topk_sigmoid_kernel": {
        "signature": "logits_ptr:*fp32, bias_ptr:*fp32, w_ptr:*fp32, ids_ptr:*i32, tokens:i32, experts:i32:16",
        "constexprs": {"BLOCK_E": 128, "K": 8, "KP": 8, "ROWS": max(1, TILE // 128), "HAS_BIAS": False},
        "num_warps": NUM_WARPS,
    },
}


@triton.jit
def topk_sigmoid_kernel(logits_ptr, bias_ptr, w_ptr, ids_ptr, tokens, experts, BLOCK_E: tl.constexpr,
                        K: tl.constexpr, KP: tl.constexpr, ROWS: tl.constexpr, HAS_BIAS: tl.constexpr):
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    cols = tl.arange(0, BLOCK_E)
    row_ok = rows < tokens
    col_ok = cols < experts
    ok = row_ok[:, None] & col_ok[None, :]
    x = tl.load(logits_ptr + rows[:, None] * experts + cols[None, :], mask=ok, other=0.0).to(tl.float32)
    sig = 1.0 / (1.0 + tl.exp(-x))
    if HAS_BIAS:
        b = tl.load(bias_ptr + cols, mask=col_ok, other=0.0)
        score = sig + b[None, :]
    else:
        score = x
    score = tl.where(ok, score, -float("inf"))
    ks = tl.arange(0, KP)
    ids = tl.zeros([ROWS, KP], dtype=tl.int32)
    ws = tl.zeros([ROWS, KP], dtype=tl.float32)
    for j in tl.static_range(K):
        best = tl.max(score, axis=1)
        idx = tl.min(tl.where(score == best[:, None], cols[None, :], BLOCK_E), axis=1)
        hit = cols[None, :] == idx[:, None]
        w = tl.sum(tl.where(hit, sig, 0.0), axis=1)
        ids = tl.where(ks[None, :] == j, idx[:, None], ids)
        ws = tl.where(ks[None, :] == j, w[:, None], ws)
        score = tl.where(hit, -float("inf"), score)
    if HAS_BIAS:
        ws = ws / tl.sum(ws, axis=1)[:, None]
    out = rows[:, None] * K + ks[None, :]
    store_ok = row_ok[:, None] & (ks[None, :] < K)
    tl.store(w_ptr + out, ws, mask=store_ok)
    tl.store(ids_ptr + out, ids, mask=store_ok)


def topk_sigmoid(logits: torch.Tensor, bias, k: int):
    logits = logits.contiguous()
    tokens, experts = logits.shape
    w = torch.empty(tokens, k, device=logits.device, dtype=torch.float32)
    ids = torch.empty(tokens, k, device=logits.device, dtype=torch.int32)
    block_e = triton.next_power_of_2(experts)
    rows = max(1, TILE // block_e)
    grid = (triton.cdiv(tokens, rows),)
    topk_sigmoid_kernel[grid](logits, bias if bias is not None else logits, w, ids, tokens, experts,
                              BLOCK_E=block_e, K=k, KP=triton.next_power_of_2(k), ROWS=rows,
                              HAS_BIAS=bias is not None, num_warps=NUM_WARPS)
    return w, ids
