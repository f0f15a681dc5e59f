"""Softmax gating and DeepSeek-V3's grouped selection in Triton (portable: NVIDIA and AMD), laid out as
topk_sigmoid_triton's kernel: a program takes a tile of about TILE logits (ROWS tokens of BLOCK_E experts, BLOCK_E
the experts rounded up to a power of two, the rest masked), selects the k largest one after another (the maximum,
its lowest index among equals, then masked out) and writes weights and ids. Any expert count and any k.

- topk_softmax: selection on the logits themselves (the softmax is monotonic, so no exponential decides an order);
  each weight is exp(logit - row max) over the row's sum of exponentials, renormalised over the k when asked.
- grouped_topk: the biased scores (sigmoid + bias); each group's score is the sum of its two largest (a group is
  the columns whose index // (experts // n_group) is its number), the topk_group best groups kept (lowest group
  among equals), the others' scores masked, then the k rounds; weights are the chosen sigmoids, renormalised.

On 64-lane waves (AMD GFX9) the tile follows topk_sigmoid_triton.tile_shape, so that no reduction crosses the wave's
two halves (a ds_bpermute on gfx942).
"""

import torch
import triton
import triton.language as tl
from topk_sigmoid_triton import NUM_WARPS, load_tile, select_top, store_top, tile_shape, warp_size

KPILOT_SPECS = {
    "topk_softmax_kernel": {
        "signature": "logits_ptr:*fp32, w_ptr:*fp32, ids_ptr:*i32, tokens:i32, experts:i32:16",
        "constexprs": {"BLOCK_E": 128, "K": 8, "KP": 8, "ROWS": 8, "RENORMALIZE": True},
        "num_warps": NUM_WARPS,
    },
    "grouped_topk_kernel": {
        "signature": "logits_ptr:*fp32, bias_ptr:*fp32, w_ptr:*fp32, ids_ptr:*i32, tokens:i32, experts:i32:16, "
                     "per_group:i32",
        "constexprs": {"BLOCK_E": 256, "K": 8, "KP": 8, "ROWS": 4, "N_GROUP": 8, "NGP": 8, "TOPK_GROUP": 4},
        "num_warps": NUM_WARPS,
    },
}


@triton.jit
def topk_softmax_kernel(logits_ptr, w_ptr, ids_ptr, tokens, experts, BLOCK_E: tl.constexpr, K: tl.constexpr,
                        KP: tl.constexpr, ROWS: tl.constexpr, RENORMALIZE: tl.constexpr):
    rows, cols, row_ok, _, x = load_tile(logits_ptr, tokens, experts, -float("inf"), ROWS, BLOCK_E)
    m = tl.max(x, axis=1)
    e = tl.exp(x - tl.where(row_ok, m, 0.0)[:, None])        # rows past the end: all -inf, kept finite
    total = tl.sum(e, axis=1)
    ids, ws = select_top(x, cols, e, K, KP, ROWS, BLOCK_E)
    denominator = tl.sum(ws, axis=1) if RENORMALIZE else total
    ws = ws / tl.where(row_ok, denominator, 1.0)[:, None]     # rows past the end: 0 / 1, not 0 / 0
    store_top(w_ptr, ids_ptr, rows, row_ok, ws, ids, K, KP)


@triton.jit
def grouped_topk_kernel(logits_ptr, bias_ptr, w_ptr, ids_ptr, tokens, experts, per_group, BLOCK_E: tl.constexpr,
                        K: tl.constexpr, KP: tl.constexpr, ROWS: tl.constexpr, N_GROUP: tl.constexpr,
                        NGP: tl.constexpr, TOPK_GROUP: tl.constexpr):
    rows, cols, row_ok, col_ok, x = load_tile(logits_ptr, tokens, experts, 0.0, ROWS, BLOCK_E)
    ok = row_ok[:, None] & col_ok[None, :]
    sig = 1.0 / (1.0 + tl.exp(-x))
    b = tl.load(bias_ptr + cols, mask=col_ok, other=0.0)
    score = tl.where(ok, sig + b[None, :], -float("inf"))
    group = cols // per_group                                 # columns past the experts: group N_GROUP or more
    # each group's score: its largest score plus its second largest (the largest again where it is there twice)
    gs = tl.arange(0, NGP)
    gscore = tl.full([ROWS, NGP], -float("inf"), dtype=tl.float32)
    for g in tl.static_range(N_GROUP):
        mine = (group == g)[None, :]
        first = tl.max(tl.where(mine, score, -float("inf")), axis=1)
        at = tl.min(tl.where(mine & (score == first[:, None]), cols[None, :], BLOCK_E), axis=1)
        second = tl.max(tl.where(mine & (cols[None, :] != at[:, None]), score, -float("inf")), axis=1)
        gscore = tl.where(gs[None, :] == g, (first + second)[:, None], gscore)
    # the TOPK_GROUP best groups, the lowest group among equals
    kept = tl.zeros([ROWS, NGP], dtype=tl.int1)
    for j in tl.static_range(TOPK_GROUP):
        best = tl.max(gscore, axis=1)
        gi = tl.min(tl.where(gscore == best[:, None], gs[None, :], NGP), axis=1)
        hit = gs[None, :] == gi[:, None]
        kept = kept | hit
        gscore = tl.where(hit, -float("inf"), gscore)
    keep = tl.zeros([ROWS, BLOCK_E], dtype=tl.int1)
    for g in tl.static_range(N_GROUP):
        g_kept = tl.max(tl.where(gs[None, :] == g, kept.to(tl.int32), 0), axis=1) > 0
        keep = keep | (g_kept[:, None] & (group == g)[None, :])
    score = tl.where(keep, score, -float("inf"))
    ids, ws = select_top(score, cols, sig, K, KP, ROWS, BLOCK_E)
    ws = ws / tl.where(row_ok, tl.sum(ws, axis=1), 1.0)[:, None]
    store_top(w_ptr, ids_ptr, rows, row_ok, ws, ids, K, KP)


def _launch_shape(logits: torch.Tensor, wave: int | None) -> tuple[int, int]:
    return tile_shape(logits.shape[1], logits.element_size(), wave or warp_size(logits))


def _outputs(logits: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    return (torch.empty(logits.shape[0], k, device=logits.device, dtype=torch.float32),
            torch.empty(logits.shape[0], k, device=logits.device, dtype=torch.int32))


def topk_softmax(logits: torch.Tensor, k: int, renormalize: bool, wave: int | None = None):
    logits = logits.contiguous()
    tokens, experts = logits.shape
    w, ids = _outputs(logits, k)
    block_e, rows = _launch_shape(logits, wave)
    topk_softmax_kernel[(triton.cdiv(tokens, rows),)](logits, w, ids, tokens, experts, BLOCK_E=block_e, K=k,
                                                      KP=triton.next_power_of_2(k), ROWS=rows,
                                                      RENORMALIZE=bool(renormalize), num_warps=NUM_WARPS)
    return w, ids


def grouped_topk(logits: torch.Tensor, bias: torch.Tensor, k: int, n_group: int, topk_group: int,
                 wave: int | None = None):
    logits = logits.contiguous()
    tokens, experts = logits.shape
    if experts % n_group or not 1 <= topk_group <= n_group or k > topk_group * (experts // n_group):
        raise ValueError(f"grouped_topk: {experts} experts in {n_group} groups, best {topk_group}, top {k}: the "
                         "groups must divide the experts and hold at least k experts")
    w, ids = _outputs(logits, k)
    block_e, rows = _launch_shape(logits, wave)
    grouped_topk_kernel[(triton.cdiv(tokens, rows),)](logits, bias.float().contiguous(), w, ids, tokens, experts,
                                                      experts // n_group, BLOCK_E=block_e, K=k,
                                                      KP=triton.next_power_of_2(k), ROWS=rows, N_GROUP=n_group,
                                                      NGP=triton.next_power_of_2(n_group), TOPK_GROUP=topk_group,
                                                      num_warps=NUM_WARPS)
    return w, ids
