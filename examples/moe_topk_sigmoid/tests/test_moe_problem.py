"""The MoE top-k sigmoid routing problem (examples/moe_topk_sigmoid): its case grid, its own check (ties by the
lower index, near ties accepted, exact dtypes), and the Triton kernel correct on the CPU through Triton's
interpreter, plain and biased."""

from __future__ import annotations

import json
import os
import sys

import pytest
from kpilot_testing import MOE, require_module, require_tool

from kernelpilot.evaluate.problem import load_problem
from kernelpilot.evaluate.runner import EvalOptions, check

pytestmark = pytest.mark.example
torch = require_module("torch")
sys.path.insert(0, str(MOE))
import reference as ref  # noqa: E402

CASES = ["experts=64,tokens=16,k=4,dtype=float32", "experts=256,tokens=128,k=8,dtype=bfloat16",
         "experts=128,tokens=1,k=8,dtype=float16"]


def test_case_grid():
    p = load_problem(MOE / "plain")
    public = [c for c in p.cases if not c.hidden]
    grid = [c for c in public if "model" not in c.params]                # the tuned grid
    assert len(grid) == 3 * 6 * 2 * 3 and len({c.name for c in grid}) == 108
    assert {c.params["tokens"] for c in grid} == {1, 16, 128, 1024, 8192, 65536}
    shipped = {(c.params["model"], c.params["experts"], c.params["k"]) for c in public if "model" in c.params}
    assert shipped == {("llama4-scout", 16, 1), ("llama4-maverick", 128, 1)} and len(public) == 108 + 30
    biased = {(c.params["model"], c.params["experts"], c.params["k"])
              for c in load_problem(MOE / "biased").cases if "model" in c.params}
    assert biased == {("kimi-k2", 384, 8), ("glm-4.5", 160, 8)}
    assert [c.params["tokens"] for c in p.cases if c.hidden] == [2, 3]


def test_reference_breaks_ties_by_the_lower_index_and_renormalises():
    logits = torch.tensor([[1.0, 3.0, 3.0, 2.0, 3.0]])
    w, ids = ref.topk_sigmoid(logits, None, 3)
    assert ids.tolist() == [[1, 2, 4]] and ids.dtype == torch.int32 and w.dtype == torch.float32
    bias = torch.tensor([0.0, 0.0, 0.0, 5.0, 0.0])
    w, ids = ref.topk_sigmoid(logits, bias, 2)
    assert ids.tolist() == [[3, 1]] and float(w.sum()) == pytest.approx(1.0)


def test_check_is_exact_on_logits_and_accepts_near_ties_of_biased_scores():
    two = torch.tensor(2.0)
    logits = torch.tensor([[1.0, 2.0, float(torch.nextafter(two, torch.tensor(3.0))), 0.5]])
    # without a bias: exact, one ulp decides
    expected = ref.topk_sigmoid(logits, None, 1)
    assert expected[1].tolist() == [[2]]
    swapped = (torch.sigmoid(logits[:, 1:2]), torch.tensor([[1]], dtype=torch.int32))
    ok, msg = ref.check((logits, None, 1), swapped, expected)
    assert not ok and "ids wrong" in msg
    # with a bias: the sigmoid's rounding may order the two either way
    bias = torch.zeros(4)
    expected = ref.topk_sigmoid(logits, bias, 1)
    other = 1 if expected[1].item() == 2 else 2
    ok, msg = ref.check((logits, bias, 1), (torch.ones(1, 1), torch.tensor([[other]], dtype=torch.int32)), expected)
    assert ok and "near-tie" in msg
    wrong = (torch.ones(1, 1), torch.tensor([[0]], dtype=torch.int32))
    ok, msg = ref.check((logits, bias, 1), wrong, expected)
    assert not ok and "ids wrong" in msg
    ok, msg = ref.check((logits, None, 1), (expected[0], expected[1].long()), expected)
    assert not ok and "torch.int64, expected (1, 1) torch.int32" in msg


@pytest.mark.parametrize("variant", ["plain", "biased"])
def test_triton_kernel_is_correct_on_cpu(variant):
    require_module("triton")
    res = check(MOE / variant, MOE / "kernels" / "topk_sigmoid_triton.py",
                EvalOptions(device="cpu", seeds=1, cases=CASES + ["experts=64,tokens=2,k=4,dtype=float32"]))
    assert res.correct and res.passed, [(c.case, c.message) for c in res.cases if not c.ok]


def test_a_build_killed_half_way_leaves_nothing_that_holds_up_the_next(tmp_path):
    """cuda_build.build_lock: while another process builds (it holds the lock, PyTorch's lock file is there) a
    build waits and leaves that file be; once the builder is killed half way (SIGKILL, as a benchmark cut off at
    its deadline is), the file it left is removed and the build goes on at once, where PyTorch alone would wait on
    it forever."""
    import subprocess
    import threading
    import time

    sys.path.insert(0, str(MOE / "kernels"))
    import cuda_build

    folder = tmp_path / "kpilot_moe_router_0123456789ab"
    builder = subprocess.Popen(
        [sys.executable, "-c", "import sys; from pathlib import Path; sys.path.insert(0, sys.argv[1])\n"
         "import cuda_build\n"
         "with cuda_build.build_lock(Path(sys.argv[2])):\n"
         "    (Path(sys.argv[2]) / 'lock').touch(); print('building', flush=True); sys.stdin.readline()",
         str(MOE / "kernels"), str(folder)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert builder.stdout.readline() == "building\n"
        found = []

        def build() -> None:
            with cuda_build.build_lock(folder):
                found.append((folder / "lock").exists())

        waiting = threading.Thread(target=build, daemon=True)
        waiting.start()
        waiting.join(1.0)
        assert waiting.is_alive() and (folder / "lock").exists()   # a live build is waited for, its file kept
        builder.kill()
        builder.wait(10)
        waiting.join(10.0)
        assert not waiting.is_alive() and found == [False] and not (folder / "lock").exists()
    finally:
        builder.kill()
        builder.wait(10)
    started = time.monotonic()
    (folder / "lock").touch()   # left by a build no one holds any longer: removed at once
    with cuda_build.build_lock(folder):
        assert not (folder / "lock").exists() and time.monotonic() - started < 5


def test_triton_tile_on_64_lane_waves_keeps_a_token_off_half_a_wave():
    """On 32-lane warps a tile of TILE logits; on 64-lane waves a token's 16-byte vectors on 16 lanes or fewer
    (16 rows: 4 per wave) or on all 64 lanes (one row per wave), never on 32; a row of 17 to 31 experts (loaded a
    logit a lane) padded to a whole wave."""
    sys.path.insert(0, str(MOE / "kernels"))
    import topk_sigmoid_triton as tt

    assert [tt.rows_per_program(e, 2) for e in (64, 128, 256)] == [16, 8, 4]
    assert [tt.rows_per_program(e, 2, 64) for e in (64, 128, 256)] == [16, 16, 4]
    assert [tt.rows_per_program(e, 4, 64) for e in (64, 128, 256)] == [16, 4, 4]
    assert tt.rows_per_program(128, 2, 64, num_warps=2) == 8 and tt.rows_per_program(128, 4, 64, num_warps=2) == 2
    assert [tt.tile_shape(e, 2, 64) for e in (12, 17, 24, 31, 32, 60)] == [(16, 64), (64, 4), (64, 4), (64, 4),
                                                                          (32, 32), (64, 16)]
    assert tt.tile_shape(24, 2) == (32, 32) and tt.tile_shape(24, 4, 64, num_warps=2) == (64, 2)


def test_triton_kernel_is_correct_on_cpu_with_the_64_lane_tiles():
    """The tiles laid out for 64-lane waves, run on the CPU through Triton's interpreter against the reference:
    every shape, logit type and bias, with a partial last tile."""
    import subprocess

    require_module("triton")
    code = ("import torch, reference as ref, topk_sigmoid_triton as tt\n"
            "g = torch.Generator().manual_seed(0)\n"
            "for experts in (64, 128, 256):\n"
            "    for dtype in (torch.float32, torch.bfloat16, torch.float16):\n"
            "        for bias in (None, torch.randn(experts, generator=g) * 0.1):\n"
            "            x = torch.randn(37, experts, generator=g).to(dtype)\n"
            "            for k in (4, 8):\n"
            "                inputs = (x, bias, k)\n"
            "                ok, msg = ref.check(inputs, tt.topk_sigmoid(x, bias, k, wave=64), ref.topk_sigmoid(*inputs))\n"
            "                assert ok, (experts, dtype, bias is None, k, msg)\n"
            "print('ok')\n")
    res = subprocess.run([sys.executable, "-c", code], cwd=MOE, capture_output=True, text=True,
                         env={**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": f"{MOE / 'kernels'}{os.pathsep}{MOE}"},
                         timeout=600)
    assert res.returncode == 0 and res.stdout.strip() == "ok", res.stderr[-2000:]


def test_stream_floor_kernel_reads_every_logit():
    """The stream floor's kernel (stream_floor.py), on the CPU through Triton's interpreter: its weights are each
    row's maximum (with the bias added), so it read every logit; a partial last tile is masked."""
    import subprocess

    require_module("triton")
    code = ("import torch, stream_floor as s\n"
            "for experts, k in ((64, 8), (160, 6), (384, 1)):\n"
            "    x = torch.randn(37, experts); b = torch.randn(experts)\n"
            "    for bias in (None, b):\n"
            "        w, ids = s.stream(x, bias, k, rows=16)\n"
            "        want = (x if bias is None else x + b).max(dim=1).values\n"
            "        assert w.shape == (37, k) and ids.dtype == torch.int32 and int(ids.abs().sum()) == 0\n"
            "        assert torch.equal(w, want[:, None].expand(37, k)), (w, want)\n"
            "print('ok')\n")
    res = subprocess.run([sys.executable, "-c", code], cwd=MOE, capture_output=True, text=True,
                         env={**os.environ, "TRITON_INTERPRET": "1"}, timeout=300)
    assert res.returncode == 0 and res.stdout.strip() == "ok", res.stderr[-2000:]


def test_a_kernel_that_breaks_ties_the_other_way_fails(tmp_path):
    bad = tmp_path / "higher_index.py"
    bad.write_text("import torch\n\ndef topk_sigmoid(logits, bias, k):\n"
                   "    x = logits.float().flip(-1)\n"
                   "    ids = logits.shape[-1] - 1 - torch.sort(x, dim=-1, descending=True, stable=True).indices[:, :k]\n"
                   "    return torch.sigmoid(logits.float()).gather(-1, ids), ids.to(torch.int32)\n")
    res = check(MOE / "plain", bad, EvalOptions(device="cpu", seeds=2, cases=["experts=256,tokens=1024,k=8,dtype=bfloat16"]))
    assert not res.correct and any("ids wrong" in c.message for c in res.cases)


@pytest.mark.parametrize("arch", ["gfx942", "gfx90a"])
@pytest.mark.parametrize("has_bias", [0, 1])
def test_hip_kernel_selects_with_dpp_not_lds(arch, has_bias):
    """The HIP kernel for AMD, compiled (not run: there is no AMD GPU here): the cross-lane selection is DPP,
    with no LDS traffic and one readlane per round (plus one for the bias's renormalising sum)."""
    require_tool("clang++")
    from kernelpilot.isa import analyze

    (k,) = analyze(MOE / "kernels" / "topk_sigmoid_dpp.hip", arch=arch,
                   defines={"EXPERTS": "256", "K": "8", "HAS_BIAS": str(has_bias)})
    ops = k.opcodes
    count = lambda pred: sum(n for op, n in ops.items() if pred(op))  # noqa: E731
    assert count(lambda op: op.startswith("ds_")) == 0
    assert count(lambda op: "readlane" in op) == 8 + has_bias
    assert count(lambda op: op.endswith("_dpp")) == 6 * (8 + has_bias)
    assert not {f.id for f in k.findings} & {"amd.lds-crosslane", "amd.readlane-chain"}


def triton_gfx942(experts: int, dtype: str, has_bias: bool, k: int, rows: int):
    """The Triton kernel compiled for gfx942 with this many rows per program, analyzed: (opcode counts, report)."""
    from kernelpilot.isa import analyze

    sys.path.insert(0, str(MOE / "kernels"))
    import topk_sigmoid_triton as tt

    (rep,) = analyze(f"{MOE / 'kernels' / 'topk_sigmoid_triton.py'}:topk_sigmoid_kernel", arch="gfx942",
                     signature=tt.SIGNATURE.format(dtype),
                     defines={"BLOCK_E": str(experts), "K": str(k), "KP": str(k), "ROWS": str(rows),
                              "HAS_BIAS": str(has_bias)})
    return (lambda pred: sum(n for op, n in rep.opcodes.items() if pred(op))), rep


@pytest.mark.parametrize("experts", [64, 128, 256])
@pytest.mark.parametrize("dtype", ["bf16", "fp32"])
@pytest.mark.parametrize("has_bias", [False, True])
def test_triton_kernel_for_gfx942_reduces_by_dpp_without_lds(experts, dtype, has_bias):
    """The Triton kernel compiled for gfx942 (not run: there is no AMD GPU here) with the rows it takes on 64-lane
    waves: its reductions (three per round: the maximum, its lowest index, the weight) are DPP alone, no
    ds_bpermute; the LDS only holds the outputs once on their way to the stores (a few ds_ instructions, none in
    the rounds). A token on 16 lanes or fewer needs no readlane, one on a whole wave one per reduction. No
    spills."""
    require_module("triton")
    sys.path.insert(0, str(MOE / "kernels"))
    import topk_sigmoid_triton as tt

    size = 2 if dtype == "bf16" else 4
    rows, k = tt.rows_per_program(experts, size, 64), 8
    count, rep = triton_gfx942(experts, dtype, has_bias, k, rows)
    assert count(lambda op: op.startswith(("ds_bpermute", "ds_permute", "ds_swizzle"))) == 0
    assert count(lambda op: op.startswith("ds_")) < 10
    assert count(lambda op: op.endswith("_dpp")) >= 3 * k * 4
    assert count(lambda op: "readlane" in op and "readfirstlane" not in op) == (0 if experts * size <= 256 else 3 * k)
    assert not rep.resources.vgpr_spill and not rep.resources.sgpr_spill and not rep.resources.scratch_bytes
    assert not {f.id for f in rep.findings} & {"amd.lds-crosslane", "amd.readlane-chain"}


def test_triton_kernel_for_gfx942_on_half_waves_goes_through_lds():
    """What the 64-lane tiles avoid: with the 32-lane warps' tile (8 rows of 128 fp32 experts, a token on 32 lanes)
    gfx942 reduces over a wave's halves by ds_bpermute, three per round, and kpilot flags it."""
    require_module("triton")
    count, rep = triton_gfx942(128, "fp32", False, 8, 8)
    assert count(lambda op: op.startswith("ds_bpermute")) == 3 * 8
    assert "amd.lds-crosslane" in {f.id for f in rep.findings}


@pytest.mark.parametrize("has_bias", [0, 1])
def test_cuda_kernel_uses_redux_and_vector_loads(has_bias):
    """The CUDA warp kernel for sm_90, compiled: one REDUX (warp max) per round, 16-byte loads, no spills."""
    require_tool("nvcc")
    from kernelpilot.isa import analyze

    (k,) = analyze(MOE / "kernels" / "topk_sigmoid_warp.cu", arch="sm_90", block_size=256,
                   defines={"MOE_EXPERTS": "256", "MOE_K": "8", "MOE_BIAS": str(has_bias)})
    ops = k.opcodes
    assert sum(n for op, n in ops.items() if op.startswith("REDUX")) == 8
    assert sum(n for op, n in ops.items() if op.startswith("LDG") and ".128" not in op) == 0
    assert k.resources.spill_store_bytes == 0 and k.occupancy.percent >= 75
    assert "mem.narrow-global-loads" not in {f.id for f in k.findings}


@pytest.mark.parametrize("experts,k,redux,shuffles,occupancy", [(256, 8, 32, 0, 75), (128, 8, 64, 0, 75), (64, 8, 0, 96, 75),
                                                                (128, 4, 0, 48, 50), (64, 4, 0, 32, 50)])
def test_keys_kernel_takes_one_group_max_per_round(experts, k, redux, shuffles, occupancy):
    """The packed-key kernel for sm_90, bf16 logits: per round one REDUX (a whole warp per token), two (one per
    half-warp: 16 lanes per token) or xor shuffles (three for 8 lanes per token, two for 4); once more in the rare
    selection with refills; all of that twice, on the signed keys of positive logits and on the exact keys where a
    token's k-th logit is not positive. At k 4 for 64 and 128 experts a lane takes 16 experts (two 128-bit loads
    per row, 8 blocks per SM: 50%), otherwise 8 (one, 12 blocks: 75%). The row is loaded a pass ahead; round keys
    kept in shared memory and written by one tail (two global stores); no spills. With two REDUX per round the
    halves' masks and the pick are IMAD, not selects."""
    require_tool("nvcc")
    from kernelpilot.isa import analyze

    (kern,) = analyze(MOE / "kernels" / "topk_sigmoid_keys.cu", arch="sm_90", block_size=128,
                      defines={"MOE_EXPERTS": str(experts), "MOE_K": str(k), "MOE_BIAS": "0",
                               "MOE_DTYPE": "__nv_bfloat16"})
    ops = kern.opcodes
    assert sum(n for op, n in ops.items() if op.startswith("REDUX")) == redux
    assert sum(n for op, n in ops.items() if op.startswith("SHFL")) == shuffles
    vectors = 2 if occupancy == 50 else 1
    assert sum(n for op, n in ops.items() if op.startswith("LDG") and ".128" in op) == 2 * vectors
    assert sum(n for op, n in ops.items() if op.startswith("STG")) == 2
    assert sum(n for op, n in ops.items() if op.startswith("STS")) >= 1
    assert kern.resources.spill_store_bytes == 0 and kern.occupancy.percent == occupancy
    if experts == 128 and k == 8:
        assert ops.get("SEL", 0) < 4 * redux


def sort_kernel_sass(experts: int, k: int, pt: int, dtype: str, bias: int = 0, prune: int = 0):
    """The sorting-network kernel (pruned with `prune`) compiled for sm_90 and analyzed: (the kernel,
    count(opcode prefix))."""
    require_tool("nvcc")
    from kernelpilot.isa import analyze

    (kern,) = analyze(MOE / "kernels" / "topk_sigmoid_sort.cu", arch="sm_90", block_size=128,
                      defines={"MOE_SORT": "1", "MOE_EXPERTS": str(experts), "MOE_K": str(k), "MOE_PT": str(pt),
                               "MOE_BIAS": str(bias), "MOE_DTYPE": dtype, "MOE_PRUNE": str(prune)})
    return kern, lambda prefix: sum(n for op, n in kern.opcodes.items() if op.startswith(prefix))


@pytest.mark.parametrize("experts,k,pt", [(128, 8, 32), (64, 4, 16), (256, 8, 64), (64, 4, 8), (256, 8, 8)])
def test_sort_kernel_selects_by_min_and_max_alone(experts, k, pt):
    """The sorting-network kernel for sm_90, bf16 logits: the selection is integer min and max (compare-exchanges),
    no REDUX, no shared memory; shuffles only where a token's lanes merge their lists (k per level, log2 of
    experts / pt levels), on the fast keys and again on exact ones. The row in 16-byte loads, pt / 8 of them, and
    again in the warps that select on exact keys; no spills, 8 blocks per SM or more."""
    kern, count = sort_kernel_sass(experts, k, pt, "__nv_bfloat16")
    levels = (experts // pt).bit_length() - 1
    assert count("REDUX") == count("STS") == count("LDS") == 0
    assert count("SHFL") == 2 * k * levels
    assert sum(n for op, n in kern.opcodes.items() if op.startswith("LDG") and ".128" in op) == 2 * (pt // 8)
    vectors, per_vector = pt // 8, (38 + 32 if k == 8 else 2 * (10 + 12))   # sort and merge of 8 keys (k 4: 2 x 4)
    assert count("VIMNMX") >= 2 * (vectors * per_vector - 32) * 0.9
    assert count("SEL") + count("ISETP") < count("VIMNMX") / 10
    assert kern.resources.spill_store_bytes == 0 and kern.occupancy.percent >= 50


@pytest.mark.parametrize("experts,k,pt,bias,lanes", [(128, 8, 32, 0, 4), (256, 8, 32, 0, 8), (64, 4, 64, 0, 1),
                                                    (64, 8, 16, 1, 4), (128, 4, 16, 1, 1)])
def test_sort_kernel_shares_a_tokens_weights_among_its_lanes(experts, k, pt, bias, lanes):
    """A token's K weights and ids are written by its first min(experts / pt, K) lanes, each its share of the K
    sigmoids (two MUFU each) as one store of weights and one of ids (16, 8 or 4 bytes); one lane where a bias
    meets more lanes per token than K. bf16 logits, sm_90."""
    kern, count = sort_kernel_sass(experts, k, pt, "__nv_bfloat16", bias=bias)
    share = k // lanes
    width = {1: "STG.E", 2: "STG.E.64", 4: "STG.E.128", 8: "STG.E.128"}[share]
    stores = sum(n for op, n in kern.opcodes.items() if op.startswith("STG"))
    assert stores == kern.opcodes.get(width, 0) == (4 if share == 8 else 2)
    if not bias:   # the sigmoids of the chosen logits are the kernel's only MUFU
        assert count("MUFU") == 2 * share
    else:          # the lanes' merges on 32-bit keys and on 64-bit ones (two shuffles a key), then the sum over
        levels = (experts // pt).bit_length() - 1   # the sharing lanes: one xor shuffle per halving
        assert count("SHFL") == 3 * k * levels + (lanes.bit_length() - 1)


def test_sort_kernel_selects_fp32_logits_on_exact_32_bit_keys():
    """fp32 logits without a bias (128 experts, k 8, 16 experts per thread, sm_90): one selection in unsigned min and
    max on exact 32-bit keys (the bits above the token's largest logit's less 2^25 - 1, then the expert), after a
    signed max over the thread's logits and the token's lanes (one shuffle a level); no best key left out tracked,
    no second selection for ties; 64-bit exact keys (compares and selects) only where those keys cannot order the
    best k; the row loaded once (four 16-byte loads), no REDUX, no shared memory, no spills."""
    kern, count = sort_kernel_sass(128, 8, 16, "float")
    assert count("REDUX") == count("STS") == count("LDS") == 0
    assert sum(n for op, n in kern.opcodes.items() if op.startswith("LDG") and ".128" in op) == 4
    one_selection = (2 * (38 + 32) - 32 + 3 * 32) * 0.9   # two chunks, three lane merges
    unsigned = count("VIMNMX.U32") + count("VIMNMX3.U32")
    assert one_selection <= unsigned < 2 * one_selection
    assert count("VIMNMX") - unsigned <= 16 + 3   # the signed max: the thread's 16 logits, three lane levels
    assert count("ISETP.LT.U32.AND.EX") >= 38 + 32   # the 64-bit keys' compare-exchanges
    assert kern.resources.spill_store_bytes == 0


@pytest.mark.parametrize("dtype", ["__nv_bfloat16", "float"])
def test_sort_kernel_takes_a_bias(dtype):
    """The sorting-network kernel with a bias (128 experts, k 8, 32 experts per thread, sm_90): the bias's least
    value and span once per warp (two REDUX), and its shifts made once per warp into the warp's table in shared
    memory (two 16-byte stores a lane; the bias read from global memory once, two 16-byte loads, beside the row's
    pt / 8 or pt / 4); each chunk's eight shifts read back as two 16-byte loads from shared memory; a sigmoid per
    expert (two MUFU each), the selection on 32-bit keys in min and max (64-bit keys, exact, only for a bias
    spanning 1.5 or more); no spills."""
    kern, count = sort_kernel_sass(128, 8, 32, dtype, bias=1)
    row = 32 // 8 * (2 if dtype == "float" else 1)
    assert count("REDUX") == 2
    assert count("STS") == kern.opcodes.get("STS.128", 0) == 2
    assert count("LDS") == kern.opcodes.get("LDS.128", 0) >= 2 * (32 // 8)
    assert sum(n for op, n in kern.opcodes.items() if op.startswith("LDG") and ".128" in op) == row + 2
    assert kern.resources.shared_bytes == 4 * 128 * 4   # four warps' shifts of 128 experts
    assert count("MUFU") >= 2 * 32
    assert count("VIMNMX") >= (4 * (38 + 32) - 32) * 0.9   # the 32-bit keys (64-bit: compares and selects)
    assert kern.resources.spill_store_bytes == 0


@pytest.mark.parametrize("prune", [0, 1])
@pytest.mark.parametrize("dtype", ["__nv_bfloat16", "__half"])
def test_sort_kernel_with_a_bias_at_64_experts_a_thread_spills_one_register_at_most(dtype, prune):
    """With a bias and 16-bit logits at 256 experts, k 8, 64 experts per thread (what dispatch.py runs there:
    sort64 at 8,192 tokens, prune64 at 65,536), the kernel holds 64 registers (its launch bounds' cap) and spills
    4 bytes, one register. (Compiled for sm_90 by nvcc 13, none of the other sorting-network kernels that
    dispatch.py runs spills.)"""
    kern, _ = sort_kernel_sass(256, 8, 64, dtype, bias=1, prune=prune)
    assert kern.resources.registers == 64
    assert kern.resources.spill_store_bytes <= 4


def test_pruned_sort_kernel_selects_within_the_chunks_of_largest_maxima():
    """The pruned sorting-network kernel (256 experts, k 8, 64 experts per thread, bf16 logits, sm_90): each chunk
    of 8 experts' maximum in packed 16-bit max (VIMNMX.S16x2, three per chunk), the k chunks of largest maxima
    chosen and read again from L1 (two more 16-byte loads per lane: k chunks over four lanes), then selected
    within; fewer than 55% of the unpruned kernel's min and max on the fast keys (VIMNMX; the .U32 ones select on
    exact keys, alike in both), one more lane merge (of the maxima), no shared memory, no spills."""
    kern, count = sort_kernel_sass(256, 8, 64, "__nv_bfloat16", prune=1)
    base, base_count = sort_kernel_sass(256, 8, 64, "__nv_bfloat16")
    fast = lambda kernel: sum(n for op, n in kernel.opcodes.items() if op in ("VIMNMX", "VIMNMX3"))  # noqa: E731
    assert kern.opcodes.get("VIMNMX.S16x2", 0) + kern.opcodes.get("VIMNMX3.S16x2", 0) >= 3 * 8
    assert fast(kern) < 0.55 * fast(base)
    assert count("VIMNMX.U32") == base_count("VIMNMX.U32")
    ldg = lambda kernel: sum(n for op, n in kernel.opcodes.items() if op.startswith("LDG") and ".128" in op)  # noqa
    assert ldg(kern) == ldg(base) + 2 == 18
    assert count("SHFL") == base_count("SHFL") + 8 * 2
    assert count("REDUX") == count("STS") == count("LDS") == 0
    assert kern.resources.spill_store_bytes == 0


@pytest.mark.parametrize("dtype,bias,pt", [("float", 0, 32), ("__nv_bfloat16", 1, 64)])
def test_pruned_sort_kernel_for_fp32_logits_and_a_bias(dtype, bias, pt):
    """The pruned kernel, 256 experts, k 8 (sm_90): fp32 logits on 24-bit maxima, read again from L1 (two more
    16-byte loads); with a bias the 32-bit score keys kept in shared memory in the first stage and the chosen
    chunks read back from there (no more global loads). With a bias, fewer min and max on the fast (unsigned) keys
    than unpruned, by a fifth or more. Without one, the pruned kernel's first selection (signed 24-bit keys, the
    maxima's and the chosen chunks') takes no more min and max than the unpruned kernel's one selection on exact
    keys, which tracks no best key left out: about as many (the GPU decides between them by time)."""
    kern, count = sort_kernel_sass(256, 8, pt, dtype, bias=bias, prune=1)
    base, base_count = sort_kernel_sass(256, 8, pt, dtype, bias=bias)
    signed = (lambda k: sum(n for op, n in k.opcodes.items() if op.startswith("VIMNMX") and ".U32" not in op))
    unsigned = (lambda k: sum(n for op, n in k.opcodes.items() if op.startswith("VIMNMX") and ".U32" in op))
    if bias:
        assert unsigned(kern) < 0.8 * unsigned(base)
    else:
        assert signed(kern) <= unsigned(base)
    ldg = lambda kernel: sum(n for op, n in kernel.opcodes.items() if op.startswith("LDG") and ".128" in op)  # noqa
    if bias:
        assert count("STS") >= 1 and count("LDS") >= 1 and ldg(kern) == ldg(base)
    else:
        assert count("STS") == count("LDS") == 0 and ldg(kern) == ldg(base) + 2
        assert kern.resources.spill_store_bytes == 0


def test_keys_kernel_selects_fp32_logits_on_32_bit_keys():
    """fp32 logits, 256 experts, k 8, compiled for sm_90: k + 1 rounds of one REDUX each on 32-bit keys (and
    again in the rare selection with refills), on signed keys of positive logits and again on order keys where
    the (k + 1)-th logit is not positive; 64-bit keys, two REDUX per round, only in the selection again on
    exact keys where two of the k + 1 are alike in their top 24 bits (fast and with refills): 2 * (9 + 9) + 16
    + 16 REDUX. Two 128-bit loads per row, the row loaded a pass ahead; no spills."""
    require_tool("nvcc")
    from kernelpilot.isa import analyze

    (k,) = analyze(MOE / "kernels" / "topk_sigmoid_keys.cu", arch="sm_90", block_size=128,
                   defines={"MOE_EXPERTS": "256", "MOE_K": "8", "MOE_BIAS": "0", "MOE_DTYPE": "float"})
    ops = k.opcodes
    assert sum(n for op, n in ops.items() if op.startswith("REDUX")) == 2 * (9 + 9) + 16 + 16
    assert sum(n for op, n in ops.items() if op.startswith("LDG") and ".128" in op) == 2 * 2
    assert k.resources.spill_store_bytes == 0


GPU_CASES = [f"experts={e},tokens={t},k={k},dtype={d}" for e, t, k, d in
             [(64, 1, 4, "float32"), (64, 16, 8, "float16"), (128, 1024, 8, "float16"), (256, 8192, 8, "bfloat16"), (256, 65536, 4, "float32"),
              (64, 65536, 4, "bfloat16"), (128, 65536, 8, "float16")]]


@pytest.mark.gpu
@pytest.mark.parametrize("variant", ["plain", "biased"])
@pytest.mark.parametrize("kernel", ["topk_sigmoid_cuda.py", "topk_sigmoid_cuda_persistent.py",
                                    "topk_sigmoid_cuda_warp.py", "dispatch.py", "topk_sigmoid_triton.py"])
def test_kernels_are_correct_on_the_gpu(variant, kernel):
    res = check(MOE / variant, MOE / "kernels" / kernel, EvalOptions(device="cuda", seeds=2, cases=GPU_CASES))
    assert res.correct and res.passed, ([(c.case, c.message) for c in res.cases if not c.ok], res.error,
                                        [(f.id, f.message) for f in res.flags])


def cuda_algo_failures(x, bias, k, *where):
    """Every CUDA algorithm on (x, bias, k) against the reference, by the problem's check: (where..., algo, blocks
    per SM, message) of each that fails."""
    sys.path.insert(0, str(MOE / "kernels"))
    import topk_sigmoid_cuda

    want = ref.topk_sigmoid(x, bias, k)
    failures = []
    for algo, bps in topk_sigmoid_cuda.PATH_RUNS:
        ok, msg = ref.check((x, bias, k), topk_sigmoid_cuda.run(x, bias, k, algo, bps), want)
        if not ok:
            failures.append((*where, algo, bps, msg))
    return failures


def cuda_failures_on_every_shape(tokens, seed, make):
    """cuda_algo_failures on tokens x experts logits for every experts and k: each shape's generator seeded with
    seed(experts, k), its logits drawn as randn * 2, then make(x, g, experts, k) -> (logits, bias) plants the
    test's rows."""
    failures = []
    for experts in (64, 128, 256):
        for k in (4, 8):
            g = torch.Generator(device="cuda").manual_seed(seed(experts, k))
            x = torch.randn(tokens, experts, generator=g, device="cuda") * 2.0
            x, bias = make(x, g, experts, k)
            failures += cuda_algo_failures(x, bias, k, experts, k)
    return failures


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float32"])
def test_cuda_kernels_where_the_top_k_is_not_positive(dtype):
    """Tokens whose k-th (or (k + 1)-th) logit is zero or negative, beside ordinary ones in the same warp: all
    negative, shifted down, and rows of +0 and -0 (equal: the lower expert first) with fewer than k positive
    logits (and fp32 logits alike in their top 24 bits). Without a bias the packed-key and sorting-network kernels
    select such a warp again on exact keys; every CUDA algorithm must give the reference's ids."""
    def make(x, g, experts, k):
        tokens = x.shape[0]
        mode = torch.arange(tokens, device="cuda") % 5
        x = torch.where((mode == 1)[:, None], -x.abs(), x)
        x = torch.where((mode == 2)[:, None], x - 4.0, x)
        zeros = torch.where(torch.rand(tokens, experts, generator=g, device="cuda") < 0.5, -0.0, 0.0)
        few = torch.rand(tokens, experts, generator=g, device="cuda") < 1.5 / experts
        x = torch.where((mode == 3)[:, None], torch.where(few, x.abs() + 0.5, zeros), x)
        x = torch.where((mode == 4)[:, None], torch.where(few, x.abs() + 0.5, -x.abs()), x)
        return x.to(getattr(torch, dtype)), None

    failures = cuda_failures_on_every_shape(1001, lambda experts, k: experts * k, make)
    assert not failures, failures[:5]


@pytest.mark.gpu
def test_cuda_kernels_order_fp32_logits_alike_in_their_top_24_bits():
    """fp32 logits that share their top 24 bits with another of the token's best k + 1 and differ below them:
    the k-th and the (k + 1)-th alike (either one larger), the best two alike, a whole top alike, each beside
    ordinary tokens in its warp; some tokens with one logit so large that their best k span more than 2^24 steps
    of the bits. Every CUDA algorithm must give the reference's ids."""
    def make(x, g, experts, k):
        tokens = x.shape[0]
        order = x.argsort(dim=-1, descending=True)
        bits = x.view(torch.int32)
        low = torch.randint(0, 256, (tokens, experts), generator=g, device="cuda", dtype=torch.int32)
        rows = torch.arange(tokens, device="cuda")
        mode = rows % 7

        def alike(rank_from, rank_to, where):   # rank_to's logit takes rank_from's top 24 bits, a new low byte
            src = bits[rows, order[:, rank_from]]
            dst = order[:, rank_to]
            new = (src & ~0xFF) | low[rows, dst]
            bits[rows[where], dst[where]] = new[where]

        alike(k - 1, k, mode == 1)
        alike(0, 1, mode == 2)
        for r in range(1, k + 1):
            alike(0, r, mode == 3)
        alike(k - 1, k, mode == 4)
        x[rows[mode == 4], order[mode == 4, 0]] = 3.0e4    # best k over 2^24 steps apart
        return x, None

    failures = cuda_failures_on_every_shape(4099, lambda experts, k: 7 * experts + k, make)
    assert not failures, failures[:5]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float32"])
def test_cuda_kernels_with_a_bias_on_logits_far_from_zero(dtype):
    """With a bias, logits whose sigmoid is 0 or 1 to the float's precision, or tiny: a whole row far below zero (its
    best k then go by the bias alone), logits scaled up to +-300, half a row at -100 or -inf, beside ordinary
    tokens in the same warp. No sigmoid may overflow into a NaN or an infinity; every CUDA algorithm must give the
    reference's ids."""
    def make(x, g, experts, k):
        mode = (torch.arange(x.shape[0], device="cuda") % 5)[:, None]
        half = torch.rand(x.shape, generator=g, device="cuda") < 0.5
        x = torch.where(mode == 1, x - 60.0, x)
        x = torch.where(mode == 2, x * 50.0, x)
        x = torch.where((mode == 3) & half, torch.full_like(x, -100.0), x)
        x = torch.where((mode == 4) & half, torch.full_like(x, -float("inf")), x)
        return x.to(getattr(torch, dtype)), torch.randn(experts, generator=g, device="cuda") * 0.1

    failures = cuda_failures_on_every_shape(1001, lambda experts, k: 3 * experts + k, make)
    assert not failures, failures[:5]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float32"])
@pytest.mark.parametrize("with_bias", [False, True])
def test_cuda_kernels_on_token_counts_outside_the_grid(dtype, with_bias):
    """Token counts that leave a pass, a tail or a persistent block partly empty (1 to 20001 tokens), with
    ties planted (logits rounded to quarters), through every CUDA algorithm and a small and a full
    persistent grid: the problem's own check against the reference."""
    failures = []
    for experts in (64, 128, 256):
        for k in (4, 8):
            for tokens in (1, 3, 37, 1000, 4099, 20001):
                g = torch.Generator(device="cuda").manual_seed(tokens + experts + k)
                x = torch.randn(tokens, experts, generator=g, device="cuda") * 2.0
                x = (torch.round(x * 4) / 4 if tokens % 2 else x).to(getattr(torch, dtype))
                bias = torch.randn(experts, generator=g, device="cuda") * 0.1 if with_bias else None
                failures += cuda_algo_failures(x, bias, k, experts, k, tokens)
    assert not failures, failures[:5]


def test_dispatch_picks_the_cuda_algorithm_by_shape_dtype_and_bias():
    """The sorting-network kernel (experts per thread, pruned or not) measured fastest for the case's tokens,
    shape, logit size and bias; the first kernel or the packed-key kernel where those were faster (dispatch.OTHER)."""
    sys.path.insert(0, str(MOE / "kernels"))
    import dispatch
    import topk_sigmoid_cuda

    def algo(tokens, experts, k=8, dtype=torch.bfloat16, biased=False):
        logits = torch.empty(tokens, experts, dtype=dtype)
        return dispatch.cuda_algo(logits, torch.zeros(experts) if biased else None, k)

    assert algo(1, 64) == algo(1024, 128, 4, torch.float16) == algo(1024, 256, 4, torch.float32, True) == "sort16"
    assert algo(1025, 256) == algo(8192, 256, 4) == algo(65536, 256) == algo(65536, 256, 8, biased=True) == "prune64"
    assert algo(65536, 256, 4, biased=True) == algo(8192, 256, biased=True) == algo(8192, 256, 8, torch.float16, True) \
        == "sort64"
    assert algo(8192, 256, 4, biased=True) == algo(65535, 128) == algo(65536, 64) == "sort32"
    assert algo(8192, 128, 4) == algo(65536, 128, 4, torch.float32) == algo(65536, 256, 8, torch.float32) == "prune32"
    assert algo(65535, 64) == algo(65536, 64, 8, torch.float32, True) == algo(8192, 256, 4, torch.float32, True) \
        == "sort16"
    assert algo(1, 64, 4, biased=True) == algo(1024, 64, 4, torch.float32, True) == "warp"
    assert algo(1025, 64, 4, biased=True) == "sort16" and algo(1024, 64, 8, biased=True) == "sort16"
    assert algo(1, 64, 4, torch.float32) == algo(1024, 64, 8, torch.float32) == algo(16, 128, 8, torch.float32) \
        == "sort8"
    assert algo(1024, 128, 4, torch.float32) == algo(1025, 64, 4, torch.float32) == algo(65536, 64, 8, torch.float32) \
        == "sort16"
    assert algo(8192, 128, 4, torch.float32) == algo(1025, 256, 8, torch.float32) == "prune32"
    assert algo(8192, 256, 4, torch.float32) == algo(65535, 256, 4, torch.float32) == "prune32"
    assert algo(8192, 128, 8, torch.float32) == algo(65535, 128, 8, torch.float32) == "sort32"
    assert algo(65536, 256, 8, torch.float32, True) == algo(10**6, 256, 8, torch.float32, True) \
        == algo(8192, 256, 8, torch.float32, True) == "sort32"
    assert algo(65536, 256, 4, torch.float32, True) == algo(65536, 128, 8, torch.float32, True) == "sort32"
    # every case of every logit size and bias has a sorting-network kernel for run(..., "sort")
    for size in (2, 4):
        for biased in (False, True):
            for tokens in (1, 1024, 1025, 65535, 65536):
                for experts, k in topk_sigmoid_cuda.SHAPES:
                    assert topk_sigmoid_cuda.sort_algo(tokens, experts, k, size, biased) in topk_sigmoid_cuda.ALGOS


def test_bench_summary_counts_the_floor_and_the_cases_out_of_its_reach():
    """bench.py's summary: cases of 8192 tokens or more within 1.5x of the floor, those whose stream floor
    is itself above 1.5x of it (named in the report), and the others the kernel misses, closest first; a wrong
    output's time counts for nothing."""
    import bench

    def row(case, tokens, floor, stream, t, ok=True):
        return {"variant": "plain", "case": case, "params": {"tokens": tokens}, "floor_us": floor,
                "stream_us": stream, "k.py": {"check_ok": ok, "vs_eager": 10.0, "vs_compile": 2.0,
                                               "of_floor": t / floor, "of_stream": t / stream if stream else None}}

    rows = [row("small", 1024, 5.0, None, 6.0), row("met", 8192, 5.0, 6.0, 7.0),
            row("missed", 8192, 5.0, 7.0, 8.0), row("unreachable", 65536, 5.0, 8.0, 12.0),
            row("wrong", 65536, 5.0, 6.0, 5.5, ok=False)]
    s = bench.summarize(rows, ["k.py"])["k.py"]
    assert s["cases_at_8192_tokens_or_more"] == 4 and s["cases_within_1_5x_floor"] == 1
    assert s["cases_stream_floor_above_1_5x_floor"] == 1 and s["within_1_5x_floor_at_8192_tokens_or_more"] is False
    assert s["worst_of_stream_at_8192_tokens_or_more"] == 1.5 and s["cases_with_outputs_ok"] == 4
    assert bench.out_of_reach(rows) == ["plain unreachable"]
    assert s["reachable_not_within_1_5x_floor"] == {"plain missed": 1.6, "plain wrong": None}
    assert list(s["reachable_not_within_1_5x_floor"]) == ["plain missed", "plain wrong"]


def test_bench_rows_file_keeps_what_a_partial_run_did_not_time(tmp_path):
    """A run of some cases or kernels updates the rows file: untouched cases stay, a kernel not timed again
    keeps its time with ratios to the new baselines, and the file lists both runs; a run covering all that was
    there replaces it."""
    import bench

    def row(case, eager, floor, **kernels):
        r = {"variant": "plain", "case": case, "params": {"tokens": 1}, "eager_us": eager, "compile_us": eager / 2,
             "floor_us": floor, "stream_us": None}
        return r | {k: bench.ratios(r, {"median_us": t, "graph_us": t, "check_ok": True}) for k, t in kernels.items()}

    def part(git, rows):
        return {"variant": "plain", "date": "d" + git, "git": git, "launch_floor_us": 4.0, "rows": rows}

    path = tmp_path / "h200.plain.float16.rows.json"
    cuda, disp = "topk_sigmoid_cuda.py", "dispatch.py"
    bench.write_rows(path, part("a", [row("c1", 40.0, 4.0, **{cuda: 8.0, disp: 5.0}),
                                      row("c2", 60.0, 4.0, **{cuda: 9.0, disp: 6.0})]))
    assert len(json.loads(path.read_text())["runs"]) == 1
    bench.write_rows(path, part("b", [row("c2", 30.0, 5.0, **{disp: 3.0}), row("c3", 10.0, 4.0, **{disp: 4.0})]))
    got = json.loads(path.read_text())
    assert [r["case"] for r in got["rows"]] == ["c1", "c2", "c3"]
    c1, c2 = got["rows"][0], got["rows"][1]
    assert c1[cuda]["median_us"] == 8.0 and c1[disp]["vs_eager"] == 8.0
    assert c2[disp]["median_us"] == 3.0 and c2[disp]["vs_eager"] == 10.0
    assert c2[cuda]["median_us"] == 9.0 and c2[cuda]["vs_eager"] == round(30.0 / 9.0, 3) and c2[cuda]["of_floor"] == 1.8
    assert cuda not in got["rows"][2]
    assert [(r["git"], r["cases"], r["kernels"]) for r in got["runs"]] == [("a", 2, [cuda, disp]), ("b", 2, [disp])]
    assert got["git"] == "b" and bench.present(got["rows"]) == [cuda, disp]     # the kernels timed on any row
    bench.write_rows(path, part("c", [row(c, 10.0, 4.0, **{cuda: 5.0, disp: 4.0}) for c in ("c1", "c2", "c3")]))
    got = json.loads(path.read_text())
    assert [r["git"] for r in got["runs"]] == ["c"] and got["rows"][1][disp]["median_us"] == 4.0


def test_bench_reports_take_the_least_launch_floor_of_the_runs(tmp_path, monkeypatch):
    """The reports' floor of a case is the larger of its bytes over the H200's peak bandwidth (the problem's cost)
    and the least launch floor of the runs behind the GPU's rows files (every dtype's), every kernel's ratio taken
    again; the rows files keep their own run's floor. The bound is the sum of the two: where it is above 1.5x the
    floor (bytes at peak between half the launch floor and twice it) the case is out of any kernel's reach."""
    import bench

    def part(variant, launch, runs, **cases):
        rows = []
        for case, (params, t) in cases.items():
            r = {"variant": variant, "case": case, "params": params, "eager_us": 40.0, "compile_us": 20.0,
                 "floor_us": launch, "stream_us": 6.0}
            rows.append(r | {"dispatch.py": bench.ratios(r, {"median_us": t, "graph_us": t, "check_ok": True})})
        return {"variant": variant, "launch_floor_us": launch, "rows": rows,
                "runs": [{"launch_floor_us": f} for f in runs]}

    small = {"experts": 64, "tokens": 8192, "k": 8, "dtype": "bfloat16"}        # 1.06 MB: under the launch floor
    large = {"experts": 256, "tokens": 65536, "k": 8, "dtype": "float32"}       # 71.3 MB: 14.86 us at 4.8 TB/s
    middle = {"experts": 64, "tokens": 65536, "k": 8, "dtype": "bfloat16"}      # 12.6 MB: 2.62 us
    results = tmp_path / "results"
    results.mkdir()
    (results / "h200.plain.bfloat16.rows.json").write_text(json.dumps(
        part("plain", 3.6, [3.6], a=(small, 5.2), b=(large, 20.0), m=(middle, 9.0))))
    (results / "h200.biased.bfloat16.rows.json").write_text(json.dumps(
        part("biased", 3.3, [3.5, 3.3], c=(small, 5.2))))
    (results / "h200.plain.float16.rows.json").write_text(json.dumps(part("plain", 3.2, [3.2], d=(small, 5.2))))
    monkeypatch.setattr(bench, "HERE", tmp_path)
    monkeypatch.setattr(bench, "load_problem", lambda path: load_problem(MOE / path.name))   # the real problems
    parts, rows, launch = bench.load_rows("h200", "NVIDIA H200", "bfloat16")
    assert launch == 3.2 and len(parts) == 2 and len(rows) == 4   # the float16 file's floor counts too
    by = {r["case"]: r for r in rows}
    assert by["a"]["floor_us"] == by["c"]["floor_us"] == 3.2 and by["a"]["run_floor_us"] == 3.6
    assert by["a"]["dispatch.py"]["of_floor"] == round(5.2 / 3.2, 3)   # 1.444 for the run's own 3.6
    assert by["b"]["floor_us"] == round((65536 * 256 * 4 + 65536 * 8 * 8) / 4.8e6, 3)
    assert by["m"]["floor_us"] == 3.2
    assert by["m"]["bound_us"] == round(3.2 + (65536 * 64 * 2 + 65536 * 8 * 8) / 4.8e6, 3)
    assert by["b"]["bound_us"] == round(3.2 + by["b"]["floor_us"], 3)
    assert bench.beyond_bound(rows) == ["plain m"]   # 5.82 us > 4.8; b's 18.06 < 22.28, a's 3.42 < 4.8
    s = bench.summarize(rows, ["dispatch.py"])["dispatch.py"]
    assert s["cases_within_1_5x_floor"] == 1 and s["cases_bound_above_1_5x_floor"] == 1   # b alone within
    assert json.loads((results / "h200.plain.bfloat16.rows.json").read_text())["rows"][0]["floor_us"] == 3.6


def test_bench_times_again_a_case_whose_event_median_is_far_above_graph_replay():
    import types

    import bench

    def b(t, g):
        return types.SimpleNamespace(timing=types.SimpleNamespace(median_us=t),
                                     graph_timing=types.SimpleNamespace(median_us=g) if g else None)

    by_case = {"spike": b(17.2, 4.4), "close": b(8.0, 4.5), "small": b(4.0, 1.9), "slow graph": b(4.2, 26.4),
               "no graph": b(30.0, None)}
    assert bench.disturbed(by_case) == ["spike"]


def test_bench_summary_takes_each_kernel_over_its_own_rows_and_the_natural_pytorch_as_headline():
    """The sigmoid kernels time plain and biased alone, dispatch.py all four problems: each kernel is summed up
    over the rows that time it, with its speedup over the natural PyTorch by events and by graph replays."""
    import bench

    def row(variant, natural, natural_graph, **kernels):
        r = {"variant": variant, "case": f"{variant}-{natural}", "params": {"tokens": 1024}, "eager_us": 2 * natural,
             "compile_us": natural, "natural_us": natural, "natural_graph_us": natural_graph, "floor_us": 4.0,
             "stream_us": None}
        return r | {k: bench.ratios(r, {"median_us": t, "graph_us": t / 2, "check_ok": True}) for k, t in kernels.items()}

    cuda, disp = "topk_sigmoid_cuda.py", "dispatch.py"
    rows = [row("plain", 80.0, 40.0, **{cuda: 10.0, disp: 8.0}), row("softmax", 90.0, 90.0, **{disp: 10.0}),
            row("grouped", 160.0, 160.0, **{disp: 10.0})]
    assert bench.present(rows) == [cuda, disp]
    s = bench.summarize(rows, bench.present(rows))
    assert s[cuda]["cases"] == 1 and s[disp]["cases"] == 3
    assert s[disp]["faster_than_compile"] == 3 and s[disp]["cases_without_compile_time"] == 0
    untimed = [dict(rows[0]), dict(rows[1], natural_us=None), dict(rows[2], compile_us=None)]
    for r in untimed:                             # the ratios taken again, as bench.py takes them from its rows
        r[disp] = bench.ratios(r, bench.measured(r[disp]))
    u = bench.summarize(untimed, [disp])[disp]    # a baseline without a time: counted as such, never as beaten
    assert u["faster_than_compile"] == 2 and u["cases_without_compile_time"] == 1
    assert u["cases_without_natural_time"] == 1
    assert s[cuda]["geomean_vs_natural"] == 8.0 and s[cuda]["geomean_vs_natural_graphs"] == 8.0
    assert s[disp]["geomean_vs_natural"] == round((10.0 * 9.0 * 16.0) ** (1 / 3), 3)
    assert s[disp]["geomean_vs_natural_graphs"] == round((10.0 * 18.0 * 32.0) ** (1 / 3), 3)
    # the most any kernel could reach: the natural PyTorch over each case's bound (here its floor, 4 us)
    assert s[disp]["geomean_vs_natural_at_bound"] == round((20.0 * 22.5 * 40.0) ** (1 / 3), 3)
    assert s[disp]["geomean_vs_natural_graphs_at_bound"] == round((10.0 * 22.5 * 40.0) ** (1 / 3), 3)
    bounded = [dict(r, bound_us=8.0) for r in rows]
    assert bench.summarize(bounded, [cuda])[cuda]["geomean_vs_natural_at_bound"] == 10.0
