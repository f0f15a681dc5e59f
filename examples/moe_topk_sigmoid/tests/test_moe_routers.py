"""The case study's other routers: softmax gating (Mixtral, Qwen-MoE, DeepSeek-V2) and DeepSeek-V3's grouped biased
selection. Their case grids hold the shipped models' shapes; their references break ties by the lower index; their
checks accept near ties either way and reject the wrong routings a kernel could make; the Triton kernels are right
on the CPU through Triton's interpreter and compile for gfx942 without ds_bpermute."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from kpilot_testing import MOE, require_module, require_tool

from kernelpilot.evaluate.problem import load_problem
from kernelpilot.evaluate.runner import EvalOptions, check

pytestmark = pytest.mark.example
torch = require_module("torch")
sys.path.insert(0, str(MOE))
sys.path.insert(0, str(MOE / "kernels"))
import natural_pytorch as natural  # noqa: E402
import reference as ref  # noqa: E402


def test_case_grids_hold_the_shipped_routers():
    soft = load_problem(MOE / "softmax")
    shapes = {(c.params["model"], c.params["experts"], c.params["k"], c.params["renormalize"]) for c in soft.cases}
    assert shapes == {("mixtral", 8, 2, True), ("qwen1.5-moe", 60, 4, False), ("qwen3-moe", 128, 8, True),
                      ("deepseek-v2", 160, 6, False)}
    grouped = load_problem(MOE / "grouped")
    v3 = [c for c in grouped.cases if c.params["model"] == "deepseek-v3" and not c.hidden]
    assert {(c.params["experts"], c.params["n_group"], c.params["topk_group"], c.params["k"]) for c in v3} == {(256, 8, 4, 8)}
    for p in (soft, grouped):
        tokens = {c.params["tokens"] for c in p.cases if not c.hidden}
        assert {100, 3000, 100000} <= tokens                      # not powers of two
        assert any(c.hidden for c in p.cases)


def test_softmax_reference_selects_on_the_logits_and_renormalises_where_asked():
    logits = torch.tensor([[1.0, 3.0, 3.0, 2.0, 3.0]])
    w, ids = ref.topk_softmax(logits, 3, False)
    assert ids.tolist() == [[1, 2, 4]] and ids.dtype == torch.int32
    assert torch.allclose(w, torch.softmax(logits, -1)[:, [1, 2, 4]])
    w, _ = ref.topk_softmax(logits, 2, True)
    assert torch.allclose(w, torch.tensor([[0.5, 0.5]]))


def test_grouped_reference_keeps_the_groups_of_best_two_and_then_the_top_k():
    # 4 groups of 2; the best single expert (5: 0.95) is in group 2, whose second is poor; groups 0 and 1 win
    scores = torch.tensor([[0.8, 0.8, 0.7, 0.75, 0.1, 0.95, 0.2, 0.2]])
    logits = torch.logit(scores)
    w, ids = ref.grouped_topk(logits, torch.zeros(8), 3, 4, 2)
    assert ids.tolist() == [[0, 1, 3]] and float(w.sum()) == pytest.approx(1.0)
    w, ids = ref.grouped_topk(logits, torch.zeros(8), 3, 4, 3)       # three groups: group 2 is in
    assert ids.tolist() == [[5, 0, 1]]


def _inputs(tokens=64, experts=256, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(tokens, experts, generator=g) * 2, torch.randn(experts, generator=g) * 0.1


def test_grouped_check_rejects_the_wrong_routings():
    logits, bias = _inputs()
    inputs = (logits, bias, 8, 8, 4)
    want = ref.grouped_topk(*inputs)
    assert ref.check_grouped(inputs, want, want) == (True, "ok")
    assert ref.check_grouped(inputs, natural.grouped_topk(*inputs), want)[0]
    wrong = {
        "no groups": ref.topk_sigmoid(logits, bias, 8),
        "no bias": ref.grouped_topk(logits, torch.zeros_like(bias), 8, 8, 4),
        "one group too many": ref.grouped_topk(logits, bias, 8, 8, 5),
        "groups by their best alone": _groups_by_max(logits, bias),
        "not renormalised": (torch.sigmoid(logits).gather(-1, want[1].long()), want[1]),
        "ascending": (want[0].flip(-1), want[1].flip(-1)),
        "int64 ids": (want[0], want[1].long()),
    }
    for name, out in wrong.items():
        ok, msg = ref.check_grouped(inputs, out, want)
        assert not ok, name


def _groups_by_max(logits, bias):
    sel = torch.sigmoid(logits) + bias
    best = sel.view(sel.shape[0], 8, -1).max(-1).values.topk(4, -1).indices
    keep = torch.zeros(sel.shape[0], 8, dtype=torch.bool).scatter(1, best, True).repeat_interleave(32, 1)
    ids = sel.masked_fill(~keep, -float("inf")).topk(8, -1).indices
    w = torch.sigmoid(logits).gather(-1, ids)
    return w / w.sum(-1, keepdim=True), ids.to(torch.int32)


def test_grouped_check_accepts_a_near_tie_of_groups_either_way():
    """Two groups whose scores differ by one rounding: a kernel may keep either, and then its top k differ."""
    scores = torch.tensor([[0.9, 0.5, 0.7, 0.7, 0.1, 0.1, 0.3, 0.2]])
    bias = torch.zeros(8)
    # groups 0 (0.9 + 0.5) and 1 (0.7 + 0.7) tie in exact arithmetic; make group 1 win by a rounding's width
    logits = torch.logit(scores)
    sel = ref.selection_scores(logits, bias)
    gs = ref.group_scores(sel, 4)
    assert abs(float(gs[0, 0] - gs[0, 1])) < 1e-6
    inputs = (logits, bias, 2, 4, 1)
    want = ref.grouped_topk(*inputs)
    other_group = 1 if int(want[1][0, 0]) < 2 else 0
    ids = torch.tensor([[2 * other_group, 2 * other_group + 1]], dtype=torch.int32)
    ids = ids if float(sel[0, ids[0, 0]]) >= float(sel[0, ids[0, 1]]) else ids.flip(-1)
    w = torch.sigmoid(logits).gather(-1, ids.long())
    ok, msg = ref.check_grouped(inputs, (w / w.sum(-1, keepdim=True), ids), want)
    assert ok and "near-tie" in msg
    far = torch.tensor([[6, 7]], dtype=torch.int32)                  # group 3 is not near the best
    w = torch.sigmoid(logits).gather(-1, far.long())
    assert not ref.check_grouped(inputs, (w / w.sum(-1, keepdim=True), far), want)[0]


def test_softmax_check_rejects_the_wrong_routings_and_accepts_equal_probabilities_either_way():
    logits, _ = _inputs(experts=128)
    inputs = (logits, 8, True)
    want = ref.topk_softmax(*inputs)
    assert ref.check_softmax(inputs, want, want) == (True, "ok")
    assert ref.check_softmax(inputs, natural.topk_softmax(*inputs), want)[0]
    for name, out in {"not renormalised": ref.topk_softmax(logits, 8, False),
                      "the smallest": ref.topk_softmax(-logits, 8, True),
                      "sigmoid weights": (torch.sigmoid(logits).gather(-1, want[1].long()), want[1])}.items():
        assert not ref.check_softmax(inputs, out, want)[0], name
    tied = torch.tensor([[1.0, 3.0, 3.0, 2.0]])
    inputs = (tied, 1, False)
    want = ref.topk_softmax(*inputs)
    ok, msg = ref.check_softmax(inputs, (want[0], torch.tensor([[2]], dtype=torch.int32)), want)
    assert ok and "near-tie" in msg


@pytest.mark.parametrize("problem, cases", [
    ("softmax", ["model=mixtral,experts=8,k=2,renormalize=True,tokens=100,dtype=float32",
                 "model=qwen1.5-moe,experts=60,k=4,renormalize=False,tokens=100,dtype=bfloat16",
                 "model=deepseek-v2,experts=160,k=6,renormalize=False,tokens=1,dtype=float16"]),
    ("grouped", ["model=deepseek-v3,experts=256,n_group=8,topk_group=4,k=8,tokens=100,dtype=bfloat16",
                 "model=grouped-160,experts=160,n_group=8,topk_group=3,k=6,tokens=1,dtype=float32"]),
])
def test_triton_kernels_are_correct_on_cpu(problem, cases):
    require_module("triton")
    res = check(MOE / problem, MOE / "kernels" / "dispatch.py", EvalOptions(device="cpu", seeds=1, cases=cases))
    assert res.correct and res.passed, [(c.case, c.message) for c in res.cases if not c.ok]


def test_triton_kernels_with_the_64_lane_tiles_on_every_router_shape():
    """The tiles laid out for 64-lane waves, on the CPU through Triton's interpreter: any expert count from 8 to
    512, k from 1 to 16, every logit type, a partial last tile."""
    require_module("triton")
    code = ("import torch, reference as ref, routing_triton as rt\n"
            "g = torch.Generator().manual_seed(1)\n"
            "for experts, k in ((8, 1), (8, 2), (60, 4), (128, 8), (160, 6), (512, 16)):\n"
            "    for dtype in (torch.float32, torch.bfloat16, torch.float16):\n"
            "        x = (torch.randn(37, experts, generator=g) * 2).to(dtype)\n"
            "        for renorm in (True, False):\n"
            "            inputs = (x, k, renorm)\n"
            "            ok, msg = ref.check_softmax(inputs, rt.topk_softmax(*inputs, wave=64), ref.topk_softmax(*inputs))\n"
            "            assert ok, (experts, k, dtype, renorm, msg)\n"
            "for experts, n_group, topk_group, k in ((256, 8, 4, 8), (160, 8, 3, 6), (384, 8, 4, 8), (16, 4, 2, 1),\n"
            "                                        (512, 16, 8, 16)):\n"
            "    for dtype in (torch.float32, torch.bfloat16):\n"
            "        x = (torch.randn(37, experts, generator=g) * 2).to(dtype)\n"
            "        inputs = (x, torch.randn(experts, generator=g) * 0.1, k, n_group, topk_group)\n"
            "        ok, msg = ref.check_grouped(inputs, rt.grouped_topk(*inputs, wave=64), ref.grouped_topk(*inputs))\n"
            "        assert ok, (experts, n_group, topk_group, k, dtype, msg)\n"
            "print('ok')\n")
    res = subprocess.run([sys.executable, "-c", code], cwd=MOE, capture_output=True, text=True, timeout=900,
                         env={**os.environ, "TRITON_INTERPRET": "1",
                              "PYTHONPATH": f"{MOE / 'kernels'}{os.pathsep}{MOE}"})
    assert res.returncode == 0 and res.stdout.strip() == "ok", res.stderr[-2000:]


@pytest.mark.parametrize("kernel, experts, k, dtype, extra", [
    ("topk_softmax_kernel", 8, 2, "bf16", {"RENORMALIZE": 1}),
    ("topk_softmax_kernel", 60, 4, "fp32", {"RENORMALIZE": 0}),
    ("topk_softmax_kernel", 160, 6, "bf16", {"RENORMALIZE": 0}),
    ("topk_softmax_kernel", 512, 16, "fp32", {"RENORMALIZE": 1}),
    ("grouped_topk_kernel", 256, 8, "bf16", {"N_GROUP": 8, "NGP": 8, "TOPK_GROUP": 4}),
    ("grouped_topk_kernel", 384, 8, "fp32", {"N_GROUP": 8, "NGP": 8, "TOPK_GROUP": 4}),
    ("topk_sigmoid_kernel", 8, 2, "fp32", {"HAS_BIAS": 1}),
    ("topk_sigmoid_kernel", 160, 8, "bf16", {"HAS_BIAS": 1}),
    ("topk_sigmoid_kernel", 384, 8, "fp32", {"HAS_BIAS": 0}),
    ("topk_sigmoid_kernel", 512, 16, "bf16", {"HAS_BIAS": 1}),
    ("topk_sigmoid_kernel", 16, 1, "bf16", {"HAS_BIAS": 0}),
    ("topk_sigmoid_kernel", 24, 5, "bf16", {"HAS_BIAS": 1}),
    ("topk_softmax_kernel", 24, 5, "fp32", {"RENORMALIZE": 0}),
])
def test_triton_routers_for_gfx942_need_no_ds_bpermute(kernel, experts, k, dtype, extra):
    """Compiled for gfx942 (not run: there is no AMD GPU here) at the tiles they take on 64-lane waves: no
    reduction crosses a wave's halves through ds_bpermute, and no VGPR spills or scratch (the grouped kernel
    spills a few SGPRs into VGPR lanes). 24 experts: a row Triton loads a logit a lane, padded to a whole wave
    (amd_isa.py --every-shape covers every shape)."""
    require_module("triton")
    import amd_isa

    from kernelpilot.isa import analyze

    file = "topk_sigmoid_triton.py" if kernel == "topk_sigmoid_kernel" else "routing_triton.py"
    source, signature, defines = amd_isa.triton_spec(MOE / "kernels", file, kernel, dtype, experts, k, extra,
                                                     bias=kernel != "topk_softmax_kernel",
                                                     per_group=kernel.startswith("grouped"))
    (rep,) = analyze(source, arch="gfx942", signature=signature, defines={name: str(v) for name, v in defines.items()})
    assert not any(op.startswith(("ds_bpermute", "ds_permute")) for op in rep.opcodes)
    assert sum(n for op, n in rep.opcodes.items() if op.endswith("_dpp")) >= k
    assert not rep.resources.vgpr_spill and not rep.resources.scratch_bytes
    assert "amd.lds-crosslane" not in {f.id for f in rep.findings}


def test_triton_routers_for_gfx942_at_every_shape_need_no_cross_lane_lds():
    """amd_isa.py --every-shape: the Triton kernel serving each router off NVIDIA, compiled for gfx942 at every shape
    the router tests reach and every case-grid shape, bf16 and fp32, and the HIP kernel at its shapes (not run: no
    AMD GPU here): every build compiles, with no ds_bpermute, ds_permute or ds_swizzle, no VGPR spill and no
    scratch."""
    require_module("triton")
    require_tool("clang++")
    import amd_isa
    import routing_cuda

    summary = amd_isa.check_every_shape(out=None)
    assert summary["builds"] >= 2 * len(routing_cuda.path_shapes()) and summary["failed"] == 0, summary


def test_router_extension_builds_one_unit_per_dtype_and_router(tmp_path, monkeypatch):
    """The router extension's sources: a translation unit per dtype and router (nvcc builds them in parallel), each
    defining route_<dtype>_<router> for its router's number alone, and the binding module calling each of them from
    its [dtype][router] table."""
    import re

    import routing_cuda as rc

    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path))
    _, files = rc._sources()
    module, units = files[0].read_text(), {f.stem: f.read_text() for f in files[1:]}
    assert set(units) == {f"{d}_{r}" for d in ("f32", "f16", "bf16") for r in rc.ROUTERS}
    for name, text in units.items():
        router = name.split("_", 1)[1]
        assert re.search(rf"^void route_{name}\(const torch::Tensor& x", text, re.M)
        assert f"constexpr int ROUTER = {rc.ROUTERS[router]};" in text and "UNIT_PART" not in text
    assert "DECLARE_ROUTERS(f32)" in module and "ROUTES(bf16)" in module
    order = re.search(r"#define ROUTES\(D\) \{(.*)\}", module).group(1)
    assert [m.split("##_")[-1] for m in re.findall(r"route_##D##_\w+", order)] == list(rc.ROUTERS)


@pytest.mark.parametrize("router, w, p, dtype", [(0, 8, 16, "__nv_bfloat16"), (1, 16, 24, "float"),
                                                 (2, 4, 2, "__half"), (3, 16, 32, "__nv_bfloat16"),
                                                 (3, 16, 8, "float"), (3, 16, 16, "__nv_bfloat16"),
                                                 (1, 16, 20, "__half"), (2, 16, 16, "__nv_bfloat16"),
                                                 (1, 8, 8, "float"), (3, 8, 16, "__half")])
def test_cuda_router_compiles_for_sm_90_with_shuffles_and_no_spills(router, w, p, dtype):
    """Every router of topk_router.cu compiled for sm_90 (no GPU needed): a token's lanes reduce by shuffles
    within their segment, but for 16 lanes, which take warp REDUX (the round maxima, kRoundsRedux, and the other
    reductions, kLanesRedux), and the bias's range over a whole warp (kLanesRedux: biased and grouped at any W);
    rows whose lane share fills 16-byte vectors load them whole; nothing spills or goes to local memory (the slots
    are never indexed by a value the compiler cannot see)."""
    require_tool("nvcc")
    from kernelpilot.isa import analyze

    (rep,) = analyze(str(MOE / "kernels" / "topk_router.cu"), arch="sm_90",
                     defines={"MOE_ROUTER": str(router), "MOE_W": str(w), "MOE_P": str(p), "MOE_DTYPE": dtype})
    ops = rep.opcodes
    assert any(op.startswith("REDUX") for op in ops) == (w == 16 or router in (1, 3))
    assert sum(n for op, n in ops.items() if op.startswith("SHFL")) > 0
    size = {"float": 4, "__half": 2, "__nv_bfloat16": 2}[dtype]
    assert any(op.startswith("LDG") and ".128" in op for op in ops) == (p * size % 16 == 0)
    assert rep.resources.spill_store_bytes == 0 and not rep.resources.local_bytes
    assert not any(op.startswith(("LDL", "STL")) for op in ops)


@pytest.mark.parametrize("router, w, c, dtype, g", [
    (0, 4, 8, "__nv_bfloat16", 1), (1, 8, 6, "__half", 1), (2, 4, 4, "float", 1), (1, 4, 3, "float", 1),
    (2, 8, 6, "__half", 1), (1, 16, 4, "__nv_bfloat16", 1), (3, 8, 4, "__nv_bfloat16", 1), (3, 8, 6, "float", 1),
    (2, 1, 1, "__nv_bfloat16", 1), (0, 1, 2, "float", 1), (0, 1, 4, "__half", 1), (3, 4, 2, "__nv_bfloat16", 2),
    (3, 4, 2, "float", 2), (3, 4, 4, "__half", 1), (3, 8, 6, "__nv_bfloat16", 1)])
def test_cuda_merge_router_compiles_for_sm_90_with_networks_and_no_spills(router, w, c, dtype, g):
    """The merge kernel of topk_router.cu (sorting networks, k up to 8) compiled for sm_90 at shapes routing_cuda
    launches (and the grouped one of 2 groups a lane that kGroupedMergeLeastLanes 4 gives): its chunks load as 16-byte
    vectors, its lanes merge by shuffles (one lane a token, up to 32 experts: none at all), the selection is integer
    min/max, and nothing spills or goes to local memory (the best 8 are picked by a lane's place through selects,
    not an index)."""
    require_tool("nvcc")
    from kernelpilot.isa import analyze

    (rep,) = analyze(str(MOE / "kernels" / "topk_router.cu"), arch="sm_90",
                     defines={"MOE_MERGE": str(router), "MOE_W": str(w), "MOE_C": str(c), "MOE_DTYPE": dtype,
                              "MOE_G": str(g)})
    ops = rep.opcodes
    assert any(op.startswith("LDG") and ".128" in op for op in ops)
    assert (sum(n for op, n in ops.items() if op.startswith("SHFL")) > 0) == (w > 1)
    assert sum(n for op, n in ops.items() if op.startswith(("VIMNMX", "IMNMX"))) >= 19 * c
    assert rep.resources.spill_store_bytes == 0 and not rep.resources.local_bytes
    assert not any(op.startswith(("LDL", "STL")) for op in ops)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_cuda_router_matches_the_references_on_every_shape(dtype):
    """The CUDA router on 1 to 37 tokens (partial warps and blocks) and at merge_token_counts' (the merge kernel's)
    of every router and shape, with logits rounded to quarters so that ties are common: each output passes its
    problem's check, the plain router's ids exactly (ties by the lower index)."""
    import routing_cuda as rc

    g = torch.Generator(device="cuda").manual_seed(0)
    for router, experts, k, extra in rc.path_shapes():
        for tokens in dict.fromkeys((1, 3, 37, 4099, *rc.merge_token_counts(router, experts, k))):
            x = ((torch.randn(tokens, experts, device="cuda", generator=g) * 8).round() / 4).to(getattr(torch, dtype))
            bias = torch.randn(experts, device="cuda", generator=g) * 0.1
            ok, msg = ref.check_router(rc.route, router, x, bias, k, extra)
            assert ok, (router, experts, k, extra, tokens, dtype, msg)


@pytest.mark.gpu
def test_cuda_router_refuses_what_it_cannot_route():
    """Bad arguments are one Python error each, raised before the extension is called."""
    import routing_cuda as rc

    x = torch.randn(4, 96, device="cuda")
    for call, needle in ((lambda: rc.route("plain", torch.randn(4, 600, device="cuda"), None, 4), "experts must be"),
                         (lambda: rc.route("plain", x, None, 17), "k must be"),
                         (lambda: rc.grouped_topk(x, torch.zeros(96, device="cuda"), 4, 5, 2), "n_group"),
                         (lambda: rc.grouped_topk(x, torch.zeros(96, device="cuda"), 16, 8, 1), "topk_group"),
                         (lambda: rc.route("biased", x, None, 4), "bias"),
                         (lambda: rc.route("plain", x.double(), None, 4), "float32, float16 or bfloat16"),
                         (lambda: rc.route("sparse", x, None, 4), "router must be")):
        with pytest.raises(ValueError, match=needle):
            call()
    w, ids = rc.topk_softmax(torch.empty(0, 96, device="cuda"), 4, True)
    assert w.shape == (0, 4) and ids.shape == (0, 4)


@pytest.mark.gpu
@pytest.mark.parametrize("problem", ["softmax", "grouped", "plain", "biased"])
def test_dispatch_routes_the_other_routers_on_the_cuda_kernel(problem):
    """Every case of the two new routers, and the shipped sigmoid routers beyond the tuned grid, through
    dispatch.py on the GPU (the CUDA router), with two secret seeds each."""
    import dispatch

    cases = [c.name for c in load_problem(MOE / problem).cases if "model" in c.params and not c.hidden]
    res = check(MOE / problem, MOE / "kernels" / "dispatch.py", EvalOptions(device="cuda", seeds=2, cases=cases))
    assert res.correct and res.passed, [(c.case, c.message) for c in res.cases if not c.ok][:5]
    x = torch.randn(8, 160, device="cuda")
    assert dispatch.pick(x, 6) == "router"


@pytest.mark.parametrize("problem, case", [
    ("plain", "model=llama4-scout,experts=16,k=1,tokens=100,dtype=float32"),
    ("plain", "model=llama4-maverick,experts=128,k=1,tokens=1,dtype=bfloat16"),
    ("biased", "model=kimi-k2,experts=384,k=8,tokens=100,dtype=bfloat16"),
    ("biased", "model=glm-4.5,experts=160,k=8,tokens=100,dtype=float16"),
])
def test_the_shipped_sigmoid_routers_run_on_the_triton_kernel_on_cpu(problem, case):
    """The shipped routers beyond the tuned grid (k 1; 160 and 384 experts) through dispatch.py on the CPU (the
    Triton kernel, through Triton's interpreter), checked by the problem's own check."""
    require_module("triton")
    res = check(MOE / problem, MOE / "kernels" / "dispatch.py", EvalOptions(device="cpu", seeds=1, cases=[case]))
    assert res.correct and res.passed, [(c.case, c.message) for c in res.cases if not c.ok]
