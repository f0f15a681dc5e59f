"""Top-k sigmoid routing in Triton (portable: NVIDIA and AMD). Each program takes ROWS tokens as a
[ROWS, experts] tile, selects the k largest scores one after another (the maximum, its lowest index among
equals, then masked out), and writes weights and ids; with a bias, the weights are renormalised.

ROWS is TILE // experts (rounded up to a power of two): a tile of TILE logits per program, so that a program's
work and registers stay alike at 64, 128 and 256 experts, where a fixed number of rows would make the 256-expert
programs four times the 64-expert ones. Of eight settings of rows and warps timed on the H200 (the bf16 cases of
both variants from 1,024 tokens: results/moe_triton_configs.json), TILE 1024 with 4 warps (16, 8 and 4 rows) was
close to each case's fastest, where 16 rows at every shape fell well behind at 256 experts.

On 64-lane waves (AMD GFX9: gfx90a, gfx942, gfx950) the rows are chosen so that no reduction crosses between
the two 32-lane halves of a wave, which gfx942 can only do through ds_bpermute (the LDS crossbar): a token held
by 16 lanes or fewer reduces by DPP within rows of 16 lanes (quad_perm, row_half_mirror, row_ror), one held by
all 64 by DPP row_shr and row_bcast and one readlane per reduction (rows_per_program, tile_shape). Compiled for
gfx942 in the tests (and at every router shape by ../amd_isa.py --every-shape); not run on AMD hardware.
"""

import functools

import torch
import triton
import triton.language as tl

TILE = 1024   # logits per program
NUM_WARPS = 4
KPILOT_TUNE = {"TILE": [256, 512, 1024, 2048, 4096], "NUM_WARPS": [1, 2, 4, 8]}
# The kernel's argument types for `kpilot isa analyze` (--signature), for a logit type ("fp32", "bf16", "fp16").
SIGNATURE = "logits_ptr:*{}, bias_ptr:*fp32, w_ptr:*fp32, ids_ptr:*i32, tokens:i32, experts:i32:16"
KPILOT_SPECS = {
    "topk_sigmoid_kernel": {
        "signature": SIGNATURE.format("fp32"),
        "constexprs": {"BLOCK_E": 128, "K": 8, "KP": 8, "ROWS": max(1, TILE // 128), "HAS_BIAS": False},
        "num_warps": NUM_WARPS,
    },
}


@triton.jit
def topk_sigmoid_kernel(logits_ptr, bias_ptr, w_ptr, ids_ptr, tokens, experts, BLOCK_E: tl.constexpr,
                        K: tl.constexpr, KP: tl.constexpr, ROWS: tl.constexpr, HAS_BIAS: tl.constexpr):
    rows, cols, row_ok, col_ok, x = load_tile(logits_ptr, tokens, experts, 0.0, ROWS, BLOCK_E)
    ok = row_ok[:, None] & col_ok[None, :]
    sig = 1.0 / (1.0 + tl.exp(-x))
    if HAS_BIAS:
        b = tl.load(bias_ptr + cols, mask=col_ok, other=0.0)
        score = sig + b[None, :]
    else:
        score = x
    score = tl.where(ok, score, -float("inf"))
    ids, ws = select_top(score, cols, sig, K, KP, ROWS, BLOCK_E)
    if HAS_BIAS:
        ws = ws / tl.sum(ws, axis=1)[:, None]
    store_top(w_ptr, ids_ptr, rows, row_ok, ws, ids, K, KP)


@triton.jit
def load_tile(logits_ptr, tokens, experts, other, ROWS: tl.constexpr, BLOCK_E: tl.constexpr):
    """This program's ROWS tokens of BLOCK_E logits as fp32 (`other` where past the tokens or the experts), with
    their row and column numbers and which of them are in range."""
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    cols = tl.arange(0, BLOCK_E)
    row_ok = rows < tokens
    col_ok = cols < experts
    x = tl.load(logits_ptr + rows[:, None] * experts + cols[None, :], mask=row_ok[:, None] & col_ok[None, :],
                other=other).to(tl.float32)
    return rows, cols, row_ok, col_ok, x


@triton.jit
def select_top(score, cols, value, K: tl.constexpr, KP: tl.constexpr, ROWS: tl.constexpr, BLOCK_E: tl.constexpr):
    """The K largest scores of each row, largest first, lowest index among equals: their ids and the `value` at
    them, as [ROWS, KP] (columns K and beyond unused)."""
    ks = tl.arange(0, KP)
    ids = tl.zeros([ROWS, KP], dtype=tl.int32)
    ws = tl.zeros([ROWS, KP], dtype=tl.float32)
    for j in tl.static_range(K):
        best = tl.max(score, axis=1)
        idx = tl.min(tl.where(score == best[:, None], cols[None, :], BLOCK_E), axis=1)
        hit = cols[None, :] == idx[:, None]
        w = tl.sum(tl.where(hit, value, 0.0), axis=1)
        ids = tl.where(ks[None, :] == j, idx[:, None], ids)
        ws = tl.where(ks[None, :] == j, w[:, None], ws)
        score = tl.where(hit, -float("inf"), score)
    return ids, ws


@triton.jit
def store_top(w_ptr, ids_ptr, rows, row_ok, ws, ids, K: tl.constexpr, KP: tl.constexpr):
    """Each row's K weights and ids (of [ROWS, KP]), rows past the end left out."""
    ks = tl.arange(0, KP)
    out = rows[:, None] * K + ks[None, :]
    ok = row_ok[:, None] & (ks[None, :] < K)
    tl.store(w_ptr + out, ws, mask=ok)
    tl.store(ids_ptr + out, ids, mask=ok)


def rows_per_program(block_e: int, itemsize: int, warp_size: int = 32, num_warps: int | None = None) -> int:
    """Tokens per program: a tile of TILE logits; on 64-lane waves, a token on 16 lanes or fewer (its row in
    16-byte vectors, one per lane; 4 or more tokens per wave) or on a whole wave (one token per wave), never on
    32 lanes (a reduction over a wave's two halves is a ds_bpermute on gfx942)."""
    rows = max(1, TILE // block_e)
    if warp_size == 64:
        lanes = block_e * itemsize // 16
        num_warps = num_warps or NUM_WARPS
        rows = max(rows, 4 * num_warps) if lanes <= 16 else num_warps
    return rows


def tile_shape(experts: int, itemsize: int, warp_size: int = 32, num_warps: int | None = None) -> tuple[int, int]:
    """(BLOCK_E, ROWS) of a program: the experts rounded up to a power of two, and rows_per_program's rows. On
    64-lane waves a row of 17 to 31 experts is the exception: Triton knows a row's alignment only from the expert
    count's divisibility by 16, so it loads such a row one logit a lane, on 32 lanes, and each reduction would cross
    the wave's halves (ds_bpermute on gfx942); the row is padded to 64 instead, a token to a wave."""
    block_e = triton.next_power_of_2(experts)
    if warp_size == 64 and block_e == 32 and experts != 32:
        return 64, num_warps or NUM_WARPS
    return block_e, rows_per_program(block_e, itemsize, warp_size, num_warps)


def warp_size(t: torch.Tensor) -> int:
    """The device's warp (wave) size: 64 on AMD GFX9, 32 on NVIDIA and for the CPU interpreter."""
    return _device_warp_size(t.device.index if t.device.index is not None else torch.cuda.current_device()) \
        if t.is_cuda else 32


@functools.lru_cache(maxsize=None)
def _device_warp_size(index: int) -> int:
    return int(getattr(torch.cuda.get_device_properties(index), "warp_size", 32) or 32)


def topk_sigmoid(logits: torch.Tensor, bias, k: int, wave: int | None = None):
    """``wave``: the warp size to lay the tile out for (default: the device's)."""
    logits = logits.contiguous()
    tokens, experts = logits.shape
    w = torch.empty(tokens, k, device=logits.device, dtype=torch.float32)
    ids = torch.empty(tokens, k, device=logits.device, dtype=torch.int32)
    block_e, rows = tile_shape(experts, logits.element_size(), wave or warp_size(logits))
    grid = (triton.cdiv(tokens, rows),)
    topk_sigmoid_kernel[grid](logits, bias if bias is not None else logits, w, ids, tokens, experts,
                              BLOCK_E=block_e, K=k, KP=triton.next_power_of_2(k), ROWS=rows,
                              HAS_BIAS=bias is not None, num_warps=NUM_WARPS)
    return w, ids
