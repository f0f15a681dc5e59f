"""Row softmax in Triton with a declared tuning space, for `kpilot optimize --strategy search`.

Each program handles ROWS_PER_PROGRAM rows with NUM_WARPS warps. The defaults (one warp, one row per
program) are the naive start: wide rows leave most of a program's lanes looping. The search tries the
space below, compiled offline first (KPILOT_SPECS) so variants that spill or starve occupancy never run.
The offline build is for the widest rows this candidate serves (SPEC_COLS: benchmarks/problems/softmax_wide's
16,384 columns), so it prunes what spills there; on narrower rows that verdict errs on the safe side.
"""

import torch
import triton
import triton.language as tl

NUM_WARPS = 1
ROWS_PER_PROGRAM = 1
KPILOT_TUNE = {"NUM_WARPS": [1, 2, 4, 8, 16], "ROWS_PER_PROGRAM": [1, 2, 4]}
SPEC_COLS = 16384

KPILOT_SPECS = {
    "softmax_rows": {
        "signature": "x_ptr:*fp32, y_ptr:*fp32, rows:i32, cols:i32, stride:i32",
        "constexprs": {"BLOCK": SPEC_COLS, "ROWS": ROWS_PER_PROGRAM},
        "num_warps": NUM_WARPS,
    },
}


@triton.jit
def softmax_rows(x_ptr, y_ptr, rows, cols, stride, BLOCK: tl.constexpr, ROWS: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    mask = offs < cols
    for r in range(ROWS):
        row = tl.program_id(0) * ROWS + r
        if row < rows:
            x = tl.load(x_ptr + row * stride + offs, mask=mask, other=-float("inf")).to(tl.float32)
            x = x - tl.max(x, axis=0)
            e = tl.exp(x)
            y = e / tl.sum(e, axis=0)
            tl.store(y_ptr + row * stride + offs, y.to(y_ptr.dtype.element_ty), mask=mask)


def softmax(x: torch.Tensor) -> torch.Tensor:
    x = x.contiguous()
    y = torch.empty_like(x)
    rows, cols = x.shape
    grid = (triton.cdiv(rows, ROWS_PER_PROGRAM),)
    softmax_rows[grid](x, y, rows, cols, x.stride(0), BLOCK=triton.next_power_of_2(cols), ROWS=ROWS_PER_PROGRAM,
                       num_warps=NUM_WARPS)
    return y
