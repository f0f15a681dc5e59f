"""The case study's benchmarks (moe_variants.py, moe_large.py, moe_routers.py, moe_token_sweep.py,
moe_build_check.py, launch_shared.py, moe_fresh_inputs.py, approx_sigmoid_error.py, fp32_tie_warps.py and
router_stages.py) without a GPU: the timing sets, the trees variants are laid over, the kernels of several trees
loaded side by side in one process and timed in turn, the comparisons; the extension's kernels, the approximate
sigmoid and the router's stage clocks compiled for sm_90; the test on fp32 ties that sends a warp of the
sorting-network kernel to a second selection."""

import argparse
import subprocess
import sys

import pytest
from kpilot_testing import MOE, ROOT, require_tool

pytestmark = pytest.mark.example
BENCHMARKS = MOE / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

import moe_large  # noqa: E402
import moe_routers  # noqa: E402
import moe_variants  # noqa: E402


def test_timing_sets_parse_and_bad_ones_say_why():
    assert moe_variants.parse_set("warp:1,16,1024") == ("warp", [1, 16, 1024])
    for bad in ("keys", ":65536", "keys:many"):
        with pytest.raises(argparse.ArgumentTypeError):
            moe_variants.parse_set(bad)


def test_a_variant_replaces_kernel_files_and_nothing_else(tmp_path):
    overlay = tmp_path / "v"
    overlay.mkdir()
    (overlay / "topk_sigmoid_keys.cu").write_text("// the variant\n")
    tree = moe_variants.make_tree("v", overlay, tmp_path / "trees")
    kernels = tree / moe_variants.KERNELS
    assert (kernels / "topk_sigmoid_keys.cu").read_text() == "// the variant\n"
    assert (kernels / "topk_sigmoid_warp.cu").read_text() == (ROOT / moe_variants.KERNELS / "topk_sigmoid_warp.cu").read_text()
    base = moe_variants.make_tree("base", None, tmp_path / "trees")
    assert (base / moe_variants.KERNELS / "topk_sigmoid_keys.cu").read_bytes() == \
        (ROOT / moe_variants.KERNELS / "topk_sigmoid_keys.cu").read_bytes()

    (overlay / "not_a_kernel.cu").write_text("")
    with pytest.raises(SystemExit, match="replaces no file"):
        moe_variants.make_tree("v2", overlay, tmp_path / "trees")


def test_the_checks_trees_keep_variants_of_one_folder_name_apart_and_say_what_is_wrong(tmp_path):
    """kernel_trees (moe_build_check.py, moe_emulation_check.py): two variant folders of the same name (a/kernels,
    b/kernels) each get a tree of their own; a folder named twice, or one that is not a folder, is one message."""
    folders = [tmp_path / side / "kernels" for side in ("a", "b")]
    for folder in folders:
        folder.mkdir(parents=True)
        (folder / "topk_router.cu").write_text(f"// {folder.parent.name}\n")
    trees = moe_variants.kernel_trees(folders, tmp_path / "trees")
    assert [(t / "topk_router.cu").read_text() for t in trees.values()] == ["// a\n", "// b\n"]
    assert (trees[str(folders[0])] / "router_launch.h").read_bytes() == \
        (ROOT / moe_variants.KERNELS / "router_launch.h").read_bytes()
    with pytest.raises(SystemExit, match="given twice"):
        moe_variants.kernel_trees([folders[0], folders[0]], tmp_path / "again")
    with pytest.raises(SystemExit, match="not a folder"):
        moe_variants.kernel_trees([tmp_path / "none"], tmp_path / "none_trees")


def test_comparison_gives_each_variant_its_ratio_to_the_base_and_marks_failed_checks():
    def row(us, ok=True):
        return {"variant": "plain", "dtype": "bfloat16", "experts": 256, "tokens": 65536, "k": 8, "algo": "keys",
                "keys": {"us": us, "ok": ok, "message": "ok"}}

    (line,) = moe_variants.compare({"base": [row(20.0)], "fast": [row(15.0)], "wrong": [row(10.0, ok=False)]})
    assert "base   20.00" in line and "fast   15.00 (0.750x)" in line and "wrong   10.00! (0.500x)" in line


def test_kernels_of_two_trees_load_side_by_side_each_with_its_own_build(tmp_path):
    overlay = tmp_path / "v"
    overlay.mkdir()
    changed = (ROOT / moe_variants.KERNELS / "topk_sigmoid_keys.cu").read_text() + "// changed\n"
    (overlay / "topk_sigmoid_keys.cu").write_text(changed)
    trees = {n: moe_variants.make_tree(n, o, tmp_path / "trees") for n, o in (("base", None), ("v", overlay))}
    base, variant = (moe_large.load_kernels(n, moe_large.kernels_arg(f"{n}={t / moe_variants.KERNELS}")[1])
                     for n, t in trees.items())
    assert base is not variant and base.__name__ != variant.__name__
    assert base.HERE == trees["base"] / moe_variants.KERNELS and variant.HERE == trees["v"] / moe_variants.KERNELS
    assert base._sources()[0] != variant._sources()[0]   # the extensions' names: a hash of their sources
    with pytest.raises(argparse.ArgumentTypeError, match="NAME=FOLDER"):
        moe_large.kernels_arg(str(tmp_path))
    with pytest.raises(argparse.ArgumentTypeError, match="no topk_sigmoid_cuda.py"):
        moe_large.kernels_arg(f"x={tmp_path}")


def test_rounds_reverse_the_order_every_other_time_and_rows_split_per_variant():
    assert moe_large.round_orders(["base", "a", "b"], 3) == [["base", "a", "b"], ["b", "a", "base"],
                                                              ["base", "a", "b"]]
    case = {"variant": "plain", "dtype": "bfloat16", "experts": 256, "tokens": 65536, "k": 8}
    rows = [case | {"keys": {"base": {"us": 20.0, "ok": True, "rounds": [20.0, 20.2]},
                             "a": {"us": 15.0, "ok": False, "rounds": [15.0, 15.0]}}}]
    (a,) = moe_variants.per_variant(rows, "keys", "a")
    assert a == case | {"algo": "keys", "keys": {"us": 15.0, "ok": False, "rounds": [15.0, 15.0]}}
    lines = moe_variants.compare({n: moe_variants.per_variant(rows, "keys", n) for n in ("base", "a")})
    assert "a   15.00! (0.750x)" in lines[0]


def test_the_timing_command_names_each_tree_and_only_the_variants_asked_for(tmp_path):
    trees = {n: moe_variants.make_tree(n, None, tmp_path / "trees") for n in ("base", "v")}
    cmd = moe_variants.large_command("sort", [8192, 65536], ["bfloat16", "float32"], ["biased"], trees, 3)
    assert cmd[:2] == [sys.executable, "examples/moe_topk_sigmoid/benchmarks/moe_large.py"]
    args = moe_large.parse_args(cmd[2:])   # what moe_large.py makes of it
    assert args.dtype == ["bfloat16", "float32"] and args.variant == ["biased"] and args.algo == ["sort"]
    assert args.tokens == [8192, 65536] and args.rounds == 3 and args.no_stream
    assert args.kernels == [(n, t / moe_variants.KERNELS) for n, t in trees.items()]
    both = moe_large.parse_args(moe_variants.large_command("sort", [8192], ["bfloat16"], [], trees, 2)[2:])
    assert both.variant is None   # moe_large.py's default: plain and biased
    with pytest.raises(SystemExit):
        moe_large.parse_args(["--variant", "skewed"])


def test_build_check_compiles_the_extensions_kernels_for_sm_90(tmp_path):
    """Each extension's bf16 translation units (their launch code and every kernel they bind) compile with nvcc for
    sm_90 and PyTorch's extension flags, without a GPU."""
    require_tool("nvcc")
    import moe_build_check

    got = moe_build_check.check(ROOT / moe_variants.KERNELS, ["bf16"])
    routers = [f"router.bf16_{r}" for r in ("plain", "biased", "softmax", "grouped")]
    assert list(got) == ["bf16", *routers]   # the sigmoid kernels' extension and the router's, a unit per router
    assert all(code == 0 for code, _ in got.values()), got


def test_build_check_names_a_variant_that_does_not_compile(tmp_path):
    require_tool("nvcc")
    overlay = tmp_path / "broken"
    overlay.mkdir()
    source = (ROOT / moe_variants.KERNELS / "topk_sigmoid_sort.cu").read_text()
    assert source.count('static_assert(K == 4 || K == 8, "K must be 4 or 8");') == 1
    (overlay / "topk_sigmoid_sort.cu").write_text(
        source.replace('static_assert(K == 4 || K == 8, "K must be 4 or 8");', "static_assert(K == 4) oops;"))
    proc = subprocess.run([sys.executable, str(BENCHMARKS / "moe_build_check.py"), str(overlay),
                           "--dtype", "f32"], capture_output=True, text=True)
    assert proc.returncode == 1
    assert f"{overlay} f32: FAILED" in proc.stdout and "topk_sigmoid_sort.cu" in proc.stdout
    assert 'expected a ";"' in proc.stdout
    assert f"did not compile: {overlay} f32" in proc.stderr


def test_launch_shared_kernels_compile_for_sm_90_and_every_name_launches_one(tmp_path):
    """launch_shared.py's extension (the kernels holding shared memory and their launcher) compiles
    with nvcc for sm_90 and PyTorch's extension flags, and each kernel name it times has its branch."""
    require_tool("nvcc")
    import launch_shared
    import moe_build_check
    from kernelpilot.toolchain.find import find_tool

    for name in launch_shared.NAMES:
        assert launch_shared.SOURCE.count(f'if (name == "{name}")') == 1, name
    unit = tmp_path / "launch_shared.cu"
    unit.write_text(launch_shared.SOURCE)
    cmd = moe_build_check.nvcc_command(find_tool("nvcc"), unit, tmp_path, moe_build_check.include_dirs(tmp_path),
                                       "sm_90", tmp_path / "launch_shared.o", ("-O3",))
    proc = subprocess.run(cmd, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_fresh_inputs_are_new_each_call_in_batches_rotated_ones_repeat_every_ten():
    import moe_fresh_inputs

    made = []

    def make(seed):
        made.append(seed)
        return (seed,)

    syncs = []
    fresh = moe_fresh_inputs.picker(make, "fresh", lambda: syncs.append(len(made)))
    assert fresh(-3) == fresh(-1) == (10_000,)
    got = [fresh(i)[0] for i in range(25)]
    assert got == [1 + i for i in range(25)] and len(set(got)) == 25
    assert syncs == [11, 21, 31]   # one batch of 10 made at a time, before its first call
    rotate = moe_fresh_inputs.picker(make, "rotate")
    assert [rotate(i)[0] for i in range(12)] == list(range(10)) + [0, 1]
    one = moe_fresh_inputs.picker(make, "one")
    assert {one(i) for i in range(5)} == {(10_000,)}
    with pytest.raises(ValueError, match="way"):
        moe_fresh_inputs.picker(make, "stale")(0)


def test_the_approximate_sigmoid_compiles_to_tanh_approx_for_sm_90():
    """approx_sigmoid_error.py's kernel, compiled by Triton for sm_90 without a GPU: one tanh.approx.f32 a value, the
    instruction whose distance from the sigmoid the script measures."""
    import approx_sigmoid_error
    import triton
    from triton.backends.compiler import GPUTarget

    src = triton.compiler.ASTSource(fn=approx_sigmoid_error.approx_sigmoid, constexprs={"BLOCK": 1024},
                                    signature={"x_ptr": "*fp32", "y_ptr": "*fp32", "n": "i32", "BLOCK": "constexpr"})
    ptx = triton.compile(src, target=GPUTarget("cuda", 90, 32)).asm["ptx"]
    assert ptx.count("tanh.approx.f32") >= 1 and "ex2.approx" not in ptx


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="the message for a machine without a GPU")
def test_the_approximate_sigmoid_script_says_it_needs_a_gpu():
    run = subprocess.run([sys.executable, str(BENCHMARKS / "approx_sigmoid_error.py")], capture_output=True,
                         text=True)
    assert run.returncode == 1 and "needs an NVIDIA GPU" in run.stderr


def test_a_warp_selects_again_where_two_of_a_tokens_best_k_plus_one_share_their_top_24_bits():
    """fp32_tie_warps.py's test, as the sorting-network kernel makes it on its 24-bit keys: logits alike in their top
    24 bits at the k-th and (k + 1)-th, or among the best k, or a k-th that is not positive, ask for a second
    selection; alike below the best k + 1, or differing in the top 24 bits, do not."""
    import fp32_tie_warps
    import torch

    def row(alike=None):   # alike (a, b): logit b takes logit a's top 24 bits, and a low byte of its own
        x = torch.tensor([[8.0, 7.0, 6.0, 5.0, 4.0, 3.0, 2.0, 1.0]])
        if alike:
            bits = x.view(torch.int32)
            bits[0, alike[1]] = (bits[0, alike[0]] & ~0xFF) | 0x5A
        return x

    assert not fp32_tie_warps.selects_again(row(), 4).item()
    for a, b, again in ((3, 4, True), (0, 2, True), (4, 5, False), (5, 7, False)):
        assert fp32_tie_warps.selects_again(row((a, b)), 4).item() == again, (a, b)
    assert fp32_tie_warps.selects_again(torch.tensor([[8.0, 7.0, 6.0, -5.0, -4.0, -3.0, -2.0, -1.0]]), 4).item()
    nudged = torch.tensor([[8.0, 7.0, 6.0, 5.0, 4.0]])
    nudged.view(torch.int32)[0, 4] = nudged.view(torch.int32)[0, 3] - 0x100   # one step below in the top 24 bits
    assert not fp32_tie_warps.selects_again(nudged, 4).item()


def test_exact_keys_fall_back_only_where_they_cannot_order_the_best_k():
    """fp32_tie_warps.py's model of exact 32-bit keys: a token falls back to 64-bit keys where its largest logit is
    negative or tiny, or where fewer than k of its logits lie within 2^S - 1 steps of the largest's bits (S = 32 -
    log2(experts): 26 bits, 8 binades, at 64 experts)."""
    import fp32_tie_warps
    import torch

    x = torch.full((4, 64), -1.0)
    x[0, :8] = torch.arange(1.0, 9.0)            # eight positive logits within 8 binades
    x[1, :8] = torch.arange(1.0, 9.0)
    x[1, 0] = 8.0 * 2.0 ** 9                     # the largest 12 binades above the next: only it above the bound
    x[2, :] = -torch.arange(1.0, 65.0)           # all negative
    x[3, :8] = torch.arange(1.0, 9.0) * 1e-39    # positive but tiny (subnormal): below 2^26 in its bits
    assert fp32_tie_warps.exact_keys_fall_back(x, 4).tolist() == [False, True, True, True]
    assert not fp32_tie_warps.exact_keys_fall_back(x[:1], 8).item()


def test_router_variants_load_side_by_side_and_the_summary_compares_each_to_the_first(tmp_path, capsys):
    """moe_routers.py --kernels: routing_cuda of two trees loaded side by side (each its own extension), bad
    arguments refused with a message, and the summary per kernel: its checks, speedup over the natural PyTorch,
    floor counts and time against the first kernel's."""
    overlay = tmp_path / "v"
    overlay.mkdir()
    (overlay / "topk_router.cu").write_text((ROOT / moe_variants.KERNELS / "topk_router.cu").read_text() + "// v\n")
    trees = {n: moe_variants.make_tree(n, o, tmp_path / "trees") for n, o in (("base", None), ("v", overlay))}
    folders = [moe_routers.kernels_arg(f"{n}={t / moe_variants.KERNELS}") for n, t in trees.items()]
    base, variant = (moe_large.load_kernels(n, f, "routing_cuda.py") for n, f in folders)
    assert base.HERE == trees["base"] / moe_variants.KERNELS and variant.HERE == trees["v"] / moe_variants.KERNELS
    assert base._sources()[0] != variant._sources()[0]
    with pytest.raises(argparse.ArgumentTypeError, match="no routing_cuda.py"):
        moe_routers.kernels_arg(f"x={tmp_path}")
    for argv, needle in ((["--kernels", f"base={folders[0][1]}"], "two or more"),
                         (["--kernels", f"a={folders[0][1]}", "--kernels", f"a={folders[1][1]}"], "name of its own"),
                         (["--kernels", f"a={folders[0][1]}", "--kernels", f"b={folders[1][1]}", "--rounds", "0"],
                          "--rounds")):
        with pytest.raises(SystemExit):
            moe_routers.parse_args(argv)
        assert needle in capsys.readouterr().err
    rows = [{"natural_us": 40.0, "kernels": {"base": {"us": 20.0, "ok": True}, "v": {"us": 10.0, "ok": True}}},
            {"natural_us": 30.0, "stream": {"us": 10.0},
             "kernels": {"base": {"us": 30.0, "ok": True}, "v": {"us": 12.0, "ok": False}}}]
    got = moe_routers.summarize(rows, ["base", "v"])
    assert got["base"] == {"cases": 2, "correct": 2, "geomean_vs_natural": 1.414, "large_cases": 1,
                           "large_within_1_5x_stream": 0, "worst_vs_stream": 3.0, "speedup_over_base": 1.0}
    assert got["v"]["correct"] == 1 and got["v"]["large_within_1_5x_stream"] == 1
    assert got["v"]["worst_vs_stream"] == 1.2 and got["v"]["speedup_over_base"] == 2.236
    plain = [{"natural_us": 40.0, "ours_us": 20.0, "ok": True}]
    assert moe_routers.summarize(plain)["geomean_vs_natural"] == 2.0


def test_token_sweep_refuses_bad_shapes_and_places_each_row_widths_threshold(capsys):
    """moe_token_sweep.py: shapes are ROUTER:EXPERTS:K of the three routers it times, bad ones refused with a
    message; the summary gives each token count's speedup over the first folder and, per row width, the least token
    count from which the last folder won at every larger count (none where it lost at the largest)."""
    import moe_token_sweep as sweep

    assert sweep.shape_arg("softmax:8:2") == ("softmax", 8, 2)
    for bad in ("grouped:256:8", "plain:8", "plain:8:9", "plain:x:2", "plain:600:4"):
        with pytest.raises(argparse.ArgumentTypeError):
            sweep.shape_arg(bad)
    with pytest.raises(SystemExit):
        sweep.parse_args(["--kernels", f"a={MOE / 'kernels'}"])
    assert "two or more" in capsys.readouterr().err

    def row(tokens, width, base, new):
        return {"tokens": tokens, "row_bytes": width,
                "kernels": {"base": {"us": base, "ok": True}, "new": {"us": new, "ok": new < 100}}}

    rows = [row(4096, 16, 4.0, 3.0), row(8192, 16, 5.0, 4.0), row(4096, 64, 4.0, 5.0), row(8192, 64, 5.0, 4.0),
            row(100000, 64, 9.0, 8.0), row(4096, 48, 4.0, 3.0), row(8192, 48, 5.0, 6.0), row(100000, 48, 9.0, 100.0)]
    got = sweep.summarize(rows, ["base", "new"])
    assert got["correct"] == {"base": 8, "new": 7} and got["cases"] == 8
    assert got["least_tokens_new_faster_by_row_bytes"] == {"16": 4096, "48": None, "64": 8192}
    assert got["speedup_over_base_by_tokens"]["4096"] == {"base": 1.0, "new": round((4 / 3 * 4 / 3 * 4 / 5) ** (1 / 3), 3)}


def test_in_graph_refuses_too_few_calls_and_sums_up_both_graph_timings(capsys):
    """moe_in_graph.py: a graph of fewer than two calls (or too few replays) is refused with a message; the summary
    gives the natural PyTorch's time over dispatch.py's per call in a graph of many calls and in a graph of one,
    and how many cases' outputs were right."""
    import moe_in_graph

    for bad in (["--calls", "1"], ["--replays", "2"]):
        with pytest.raises(SystemExit) as e:
            moe_in_graph.parse_args(bad)
        assert e.value.code == 2
        assert "must be" in capsys.readouterr().err
    assert moe_in_graph.parse_args([]).calls == 16
    rows = [{"ok": True, "natural_in_graph_us": 20.0, "ours_in_graph_us": 1.0, "natural_graph_of_one_us": 24.0,
             "ours_graph_of_one_us": 4.0},
            {"ok": False, "natural_in_graph_us": 50.0, "ours_in_graph_us": 10.0, "natural_graph_of_one_us": 54.0,
             "ours_graph_of_one_us": 13.5}]
    assert moe_in_graph.summarize(rows) == {"cases": 2, "correct": 1, "geomean_vs_natural_in_graph": 10.0,
                                            "geomean_vs_natural_graph_of_one": 4.899}


def test_stage_clocks_are_only_in_their_build_and_their_lines_parse(tmp_path):
    """router_stages.py: topk_router.cu built with MOE_STAGE_CLOCKS (the copy --make-tree writes) reads the SM clock
    at the end of each of eight stages in the rounds kernel (nine reads: the heads' stage in both forms of the rounds,
    2 and 3 keys a lane) and prints them, and the tree's build reads it never; the printed lines parse into each
    case's cycles a stage (a stage's end to the next's), medians over the launches; a tree that is not the clock
    build is refused."""
    require_tool("nvcc")
    import router_stages
    from kernelpilot.isa import analyze

    tree = tmp_path / "clocks"
    proc = subprocess.run([sys.executable, str(BENCHMARKS / "router_stages.py"), "--make-tree", str(tree)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    defines = {"MOE_ROUTER": "1", "MOE_W": "16", "MOE_P": "24", "MOE_DTYPE": "__nv_bfloat16"}
    for kernels, clocks in ((tree, 9), (ROOT / moe_variants.KERNELS, 0)):
        (rep,) = analyze(str(kernels / "topk_router.cu"), arch="sm_90", defines=defines)
        assert sum("SR_CLOCKLO" in i.operands for i in rep.isa.instructions) == clocks, kernels
        assert any(i.opcode.startswith("CALL.ABS") for i in rep.isa.instructions) == bool(clocks)   # vprintf
    line = "moe-stages router=1 experts=384 k=8 bytes=2 tokens=1 W=16 P=24 sink=7 clocks={}"
    text = "\n".join([line.format("100,400,450,500,600,900,950,1000"), "noise",
                      line.format("0,200,240,300,380,700,760,800"), line.format("0,300,360,400,500,800,850,900")])
    stages = router_stages.parse_stages(text)
    case = stages[(1, 384, 8, 2, 1)]
    assert (case["w"], case["p"]) == (16, 24) and case["launches"][0] == [300, 50, 50, 100, 300, 50, 50]
    assert router_stages.median_stages(case["launches"]) == {"shift_table": 300, "row": 50, "keys": 50, "heads": 100,
                                                             "rounds": 300, "selection": 50, "weights": 50,
                                                             "total": 900}
    with pytest.raises(ValueError, match="2 clocks"):
        router_stages.parse_stages(line.format("1,2"))
    proc = subprocess.run([sys.executable, str(BENCHMARKS / "router_stages.py"), "--tree",
                           str(ROOT / moe_variants.KERNELS)], capture_output=True, text=True)
    assert proc.returncode == 2 and "not the clock build" in proc.stderr
