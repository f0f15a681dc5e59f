"""The case study's CUDA kernels run on the CPU from their own source (emulation/): every router and shape the
router's GPU test covers and every algorithm of the sigmoid kernels, checked by the problems' checks, so that a
kernel change's logic is tested where there is no GPU; a broken kernel fails it (benchmarks/moe_emulation_check.py);
the emulator's warp collectives and barriers behave as CUDA's."""

from __future__ import annotations

import itertools
import shutil
import subprocess
import sys
import types

import pytest
from kpilot_testing import MOE, in_ci, require_module

pytestmark = pytest.mark.example
torch = require_module("torch")
sys.path.insert(0, str(MOE))
sys.path.insert(0, str(MOE / "emulation"))
sys.path.insert(0, str(MOE / "benchmarks"))
import moe_emulation_check  # noqa: E402
import moe_variants  # noqa: E402
import reference as ref  # noqa: E402
import router_emulation as em  # noqa: E402
import routing_cuda  # noqa: E402
import topk_sigmoid_cuda  # noqa: E402


@pytest.fixture(scope="module")
def emulation():
    """The emulation, built; skipped without a C++ compiler or CUDA's headers (a failure in CI)."""
    try:
        em.library_path()
    except em.EmulationUnavailable as e:
        if in_ci():
            pytest.fail(f"CI must build the router emulation: {e}")
        pytest.skip(str(e))
    return em


def _logits(tokens, experts, dtype, g):
    """Logits rounded to quarters, so that ties are common."""
    return ((torch.randn(tokens, experts, generator=g) * 8).round() / 4).to(dtype)


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_emulated_router_matches_the_references_on_every_shape(emulation, dtype, monkeypatch):
    """Every router and shape of the GPU test on 1 and 37 tokens, and at routing_cuda.merge_token_counts' those the
    merge kernel may take (k 4 to 8 from 4,096 tokens; up to 32 experts k 1 to 8 from 8,192, wide rows from
    65,536), ties common: each output passes its problem's check
    (moe_emulation_check.router_failures, the check a variant gets), which it finds by path even where the process
    holds another problem's module named `reference` (as one that ran a GPU MODE problem does)."""
    monkeypatch.setitem(sys.modules, "reference", types.ModuleType("reference"))
    failed = moe_emulation_check.router_failures(em.KERNELS, [dtype])
    assert not failed, failed[:5]


def test_merge_token_counts_reach_the_merge_kernel_as_router_launch_h_rules(emulation):
    """routing_cuda.merge_token_counts (what the tests route to reach the merge kernel) against merge_serves
    itself, compiled: for every path shape, each count is taken by the merge kernel in some dtype; in each dtype
    the first count it takes lies just above the threshold (4 tokens fewer it is not taken); and a dtype whose
    calls it takes at some token count is reached by one of the counts."""
    checked = 0
    for router, experts, k, _ in routing_cuda.path_shapes():
        counts = routing_cuda.merge_token_counts(router, experts, k)
        reached = set()
        for d in (torch.float32, torch.float16, torch.bfloat16):
            taken = [t for t in counts if em.merge_serves(router, d, t, experts, k)]
            reached.update(taken)
            if taken:
                assert not em.merge_serves(router, d, taken[0] - 4, experts, k), (router, experts, k, d, taken[0])
                checked += 1
            else:
                assert not em.merge_serves(router, d, 1 << 20, experts, k), (router, experts, k, d, "not reached")
        assert reached == set(counts), (router, experts, k, counts, reached)
    assert checked > 20


def _hard_rows(x, g, with_bias):
    """Rows every fifth token of a kind the kernels take a slower path for, beside ordinary ones in their warp:
    all negative, shifted down, +0 and -0 with fewer than k positive logits, and (with a bias) far below zero or
    at -inf in half the row."""
    tokens, experts = x.shape
    mode = (torch.arange(tokens) % 5)[:, None]
    half = torch.rand(x.shape, generator=g) < 0.5
    x = torch.where(mode == 1, -x.abs(), x)
    x = torch.where(mode == 2, x - 60.0 if with_bias else x - 4.0, x)
    few = torch.rand(x.shape, generator=g) < 1.5 / experts
    zeros = torch.where(half, -0.0, 0.0)
    x = torch.where(mode == 3, torch.where(few, x.abs() + 0.5, zeros), x)
    return torch.where((mode == 4) & half, torch.full_like(x, -float("inf") if with_bias else -100.0), x)


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_emulated_sigmoid_kernels_match_the_reference(emulation, dtype):
    """Every algorithm of the tuned grid's sigmoid kernels (packed keys, one warp a token, sorting networks pruned
    or not) on 64, 128 and 256 experts, k 4 and 8, with and without a bias, on 1, 37 and 301 tokens (ties planted
    by rounding to quarters on the odd counts, the hard rows of _hard_rows on 301): the problem's check."""
    failures = []
    for experts in (64, 128, 256):
        for k in (4, 8):
            for with_bias in (False, True):
                for tokens in (1, 37, 301):
                    g = torch.Generator().manual_seed(tokens + experts + k)
                    x = torch.randn(tokens, experts, generator=g) * 2.0
                    x = torch.round(x * 4) / 4 if tokens % 2 else x
                    x = (_hard_rows(x, g, with_bias) if tokens == 301 else x).to(getattr(torch, dtype))
                    bias = torch.randn(experts, generator=g) * 0.1 if with_bias else None
                    want = ref.topk_sigmoid(x, bias, k)
                    for algo, bps in topk_sigmoid_cuda.PATH_RUNS:
                        ok, msg = ref.check((x, bias, k), emulation.topk_sigmoid(x, bias, k, algo, bps), want)
                        if not ok:
                            failures.append((experts, k, with_bias, tokens, algo, bps, msg))
    assert not failures, failures[:5]


def test_emulated_router_takes_unaligned_rows_and_wide_biases(emulation):
    """Logits not 16-byte aligned (element loads instead of vectors) and a bias spanning more than 1 (exact keys
    instead of quantized ones) route right too; bad arguments are refused before the kernel runs."""
    g = torch.Generator().manual_seed(1)
    for router, experts, k, extra in (("biased", 384, 8, {}), ("softmax", 160, 6, {"renormalize": False}),
                                      ("grouped", 256, 8, {"n_group": 8, "topk_group": 4}), ("plain", 64, 4, {})):
        for dtype in (torch.float32, torch.bfloat16):
            flat = _logits(4099 * experts + 1, 1, dtype, g).flatten()
            x = flat[1:].view(4099, experts)
            assert x.data_ptr() % 16 != 0
            for spread in (0.1, 3.0):
                bias = torch.randn(experts, generator=g) * spread
                ok, msg = ref.check_router(emulation.route, router, x, bias, k, extra)
                assert ok, (router, experts, k, dtype, spread, msg)
    with pytest.raises(ValueError, match="experts must be"):
        emulation.route("plain", torch.randn(4, 600), None, 4)
    with pytest.raises(ValueError, match="bias"):
        emulation.route("biased", torch.randn(4, 64), None, 4)
    with pytest.raises(ValueError, match="experts with k"):
        emulation.topk_sigmoid(torch.randn(4, 96), None, 4, "keys")
    with pytest.raises(ValueError, match="algo must be"):
        emulation.topk_sigmoid(torch.randn(4, 64), None, 4, "bogus")


def _variant(folder, file: str, *edits: tuple[str, str]):
    """A variant folder holding kernels/`file` with each (old, new) of `edits` replaced (each old must be there);
    called again on the same folder, it adds another file."""
    folder.mkdir(exist_ok=True)
    text = (MOE / "kernels" / file).read_text()
    for old, new in edits:
        assert old in text, old
        text = text.replace(old, new)
    (folder / file).write_text(text)
    return folder


def test_emulation_check_fails_a_broken_merge(emulation, tmp_path):
    """benchmarks/moe_emulation_check.py on a variant whose merge of two sorted lists skips its last
    compare-exchanges: it exits 1, naming router cases of 4,099 tokens (the merge kernel's) and none of 37 (the
    rounds kernel's, which does not merge lists), and sorting-network runs of the sigmoid kernels (which merge
    lists too) but no packed-key or one-warp run. (The tree's kernels pass: the tests above.)"""
    variant = _variant(tmp_path / "broken_merge", "topk_sigmoid_common.cuh",
                       ("for (int d = N / 2; d > 0; d /= 2) {", "for (int d = N / 2; d > 1; d /= 2) {"))
    script = MOE / "benchmarks" / "moe_emulation_check.py"
    args = ["--dtype", "bfloat16", "--tokens", "37", "--tokens", "4099"]
    bad = subprocess.run([sys.executable, str(script), str(variant), *args], capture_output=True, text=True)
    assert bad.returncode == 1, bad.stderr[-2000:]
    failed = [ln.strip() for ln in bad.stdout.splitlines() if ln.startswith("  ")]
    routers = [ln for ln in failed if not ln.startswith("sigmoid ")]
    sigmoid = [ln.split()[1] for ln in failed if ln.startswith("sigmoid ")]
    assert routers and all("tokens=4099" in ln for ln in routers), bad.stdout[-2000:]
    assert sigmoid and all(a.startswith(("sort", "prune")) for a in sigmoid), bad.stdout[-2000:]


def test_emulated_router_on_random_shapes(emulation):
    """moe_emulation_check.random_cases: 60 router calls of shapes, rules and inputs drawn at random (seed 0), every
    router and dtype among them, experts off the path shapes' list, each passing its problem's check."""
    cases = moe_emulation_check.random_cases(60, 0)
    assert {c.router for c in cases} == set(routing_cuda.ROUTERS) and {c.dtype for c in cases} == set(
        moe_emulation_check.DTYPES)
    listed = {experts for _, experts, _, _ in routing_cuda.path_shapes()}
    assert any(c.experts not in listed for c in cases) and any(c.tokens > 4096 for c in cases)
    failed = moe_emulation_check.random_failures(em.KERNELS, cases)
    assert not failed, failed[:5]


def test_emulation_check_random_fails_a_broken_merge(emulation, tmp_path):
    """benchmarks/moe_emulation_check.py --random on the variant whose merge of two sorted lists skips its last
    compare-exchanges: exit 1, the failures all at token counts the merge kernel takes (4,096 or more), each line
    naming its case's seed."""
    variant = _variant(tmp_path / "broken_merge", "topk_sigmoid_common.cuh",
                       ("for (int d = N / 2; d > 0; d /= 2) {", "for (int d = N / 2; d > 1; d /= 2) {"))
    script = MOE / "benchmarks" / "moe_emulation_check.py"
    bad = subprocess.run([sys.executable, str(script), str(variant), "--random", "60"], capture_output=True,
                         text=True, timeout=600)
    assert bad.returncode == 1, bad.stderr[-2000:]
    failed = [ln.strip() for ln in bad.stdout.splitlines() if ln.startswith("  ")]
    assert failed and all(int(ln.split("tokens=")[1].split()[0]) > 4096 and " seed=" in ln for ln in failed), failed


def test_emulation_check_stops_on_a_variant_that_does_not_build(emulation, tmp_path):
    """benchmarks/moe_emulation_check.py on a variant whose topk_router.cu does not compile for the host: one
    message with the compiler's error and a non-zero exit, at once (within the subprocess's timeout), not a build
    tried again for every case."""
    variant = _variant(tmp_path / "no_build", "topk_router.cu",
                       ("inline constexpr int kRowPrefetch = 1;", "inline constexpr int kRowPrefetch = ;"))
    script = MOE / "benchmarks" / "moe_emulation_check.py"
    bad = subprocess.run([sys.executable, str(script), str(variant), "--dtype", "bfloat16"], capture_output=True,
                         text=True, timeout=300)
    assert bad.returncode != 0 and "building the emulation failed" in bad.stderr, bad.stderr[-2000:]
    assert "kRowPrefetch" in bad.stderr and "FAILED" not in bad.stdout, bad.stdout[-2000:]


def test_emulation_check_fails_a_one_lane_merge_that_reads_one_chunk(emulation, tmp_path):
    """A variant whose one-lane merge (up to 32 experts) reads only a row's first chunk of 8 experts: on bf16 rows at
    the first of merge_token_counts (8,195 tokens, rows of at most 32 bytes), exactly the shapes of 9 to 16 experts
    at k up to 8 fail (12 experts, k 3), each router; 8 experts are one chunk and pass."""
    variant = _variant(tmp_path / "one_chunk", "topk_router.cu",
                       ("if (experts <= 32) return {1, (experts + 7) / 8};", "if (experts <= 32) return {1, 1};"))
    (tree,) = moe_variants.kernel_trees([variant], tmp_path / "trees").values()
    tokens = routing_cuda.merge_token_counts("plain", 12, 3)[0]
    failed = moe_emulation_check.router_failures(tree, ["bfloat16"], [tokens])
    assert sorted({ln.split()[0] for ln in failed}) == ["biased", "plain", "softmax"], failed[:5]
    assert all(" experts=12 k=3 " in ln and f"tokens={tokens} " in ln for ln in failed), failed[:5]


def _grouped_checks(emulation, tree, tokens, experts, k, extra, g):
    """The grouped router on `tree` in every dtype, with quantized keys (a bias spread of 0.1) and exact ones (3.0:
    a bias spanning more than 1), ties common: (dtype, spread, ok, message) of each call's check."""
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        x = _logits(tokens, experts, dtype, g)
        for spread in (0.1, 3.0):
            bias = torch.randn(experts, generator=g) * spread
            ok, msg = ref.check_router(
                lambda *a, **kw: emulation.route(*a, **kw, kernels=tree), "grouped", x, bias, k, extra)
            yield dtype, spread, ok, msg


def _failed_grouped_experts(tree, tokens) -> set[int]:
    """The expert counts of the path shapes whose bfloat16 routing fails on `tree` at `tokens`, all of them grouped
    (else the assertion fails)."""
    failed = moe_emulation_check.router_failures(tree, ["bfloat16"], [tokens])
    assert all(ln.startswith("grouped experts=") for ln in failed), failed[:5]
    return {int(ln.split(" k=")[0].removeprefix("grouped experts=")) for ln in failed}


def test_emulated_grouped_router_on_lanes_of_two_groups(emulation, tmp_path):
    """router_launch.h's kGroupedMergeLeastLanes at 4 (8 groups of 8 experts on 4 lanes of 2 groups each,
    grouped_best_keys_lanes), and with kGroupedPieceGroupsALane at 2 (the tree's) also 8 groups of 4, 12 or 20 (each
    group's chunks from its first expert, the last cut), or at 1 (one such group a lane): the 64- and 160-expert
    grouped selections route right at the merge kernel's token count in every dtype, with quantized and (a bias
    spanning more than 1) exact keys, ties common; with the lanes' group vote keeping one group too many, they fail,
    and among the path shapes exactly those of 8 groups of 4, 8, 12 and 20 experts (the tree) or of 8 alone (a group
    a lane), so it is that kernel the tree reaches."""
    vote = ("kept |= (unsigned)(ahead[g] < topk_group) << g;", "kept |= (unsigned)(ahead[g] <= topk_group) << g;")
    one = ("constexpr int kGroupedPieceGroupsALane = 2;", "constexpr int kGroupedPieceGroupsALane = 1;")
    _variant(tmp_path / "vote_one", "topk_router.cu", vote)
    variants = [_variant(tmp_path / "one", "router_launch.h", one), _variant(tmp_path / "vote", "topk_router.cu", vote),
                _variant(tmp_path / "vote_one", "router_launch.h", one)]
    trees = dict(zip(("one", "vote", "vote_one"), moe_variants.kernel_trees(variants, tmp_path / "trees").values()))
    (tokens,) = routing_cuda.merge_token_counts("grouped", 64, 6)
    g = torch.Generator().manual_seed(2)
    for experts, k, extra in ((64, 6, {"n_group": 8, "topk_group": 4}), (160, 6, {"n_group": 8, "topk_group": 3})):
        for name, tree in {"tree": MOE / "kernels", **trees}.items():
            for dtype, spread, ok, msg in _grouped_checks(emulation, tree, tokens, experts, k, extra, g):
                planted = name == "vote" or (name == "vote_one" and experts == 64)
                assert ok != planted, (experts, name, dtype, spread, msg)
    assert _failed_grouped_experts(trees["vote"], tokens) == {32, 64, 96, 160}
    assert _failed_grouped_experts(trees["vote_one"], tokens) == {64}


def test_emulated_half_chunks(emulation, tmp_path):
    """topk_router.cu's kHalfChunks: the tree (1: with two groups a lane, a group's last chunk of 4 experts made and
    sorted as 4), a variant at 0 (as a chunk of 8 whose last 4 are 0) and one with one such group a lane
    (router_launch.h's kGroupedPieceGroupsALane 1, where every chunk is made as 8) route 8 groups of 4, 12 and 20
    experts right at the merge kernel's token count in every dtype, with quantized and (a bias spanning more than 1)
    exact keys, ties common. A plant in the tree that leaves those 4 keys unsorted fails exactly the path shapes of
    groups of 12 and 20 (groups of 4, one chunk a group, keep the chunk of 8), so the tree takes the path of 4 there
    and only there."""
    one = ("constexpr int kGroupedPieceGroupsALane = 2;", "constexpr int kGroupedPieceGroupsALane = 1;")
    eight = ("constexpr int kHalfChunks = 1;", "constexpr int kHalfChunks = 0;")
    unsorted = ("    keys_of(CHUNKS - 1, four);\n    sort_network<4>(four);\n", "    keys_of(CHUNKS - 1, four);\n")
    variants = [_variant(tmp_path / "eight", "topk_router.cu", eight),
                _variant(tmp_path / "one", "router_launch.h", one),
                _variant(tmp_path / "unsorted", "topk_router.cu", unsorted)]
    trees = dict(zip(("eight", "one", "unsorted"), moe_variants.kernel_trees(variants, tmp_path / "trees").values()))
    g = torch.Generator().manual_seed(5)
    for experts, k, extra in ((32, 4, {"n_group": 8, "topk_group": 2}), (96, 8, {"n_group": 8, "topk_group": 4}),
                              (160, 6, {"n_group": 8, "topk_group": 3})):
        (tokens,) = routing_cuda.merge_token_counts("grouped", experts, k)
        for name, tree in (("tree", MOE / "kernels"), ("eight", trees["eight"]), ("one", trees["one"])):
            for dtype, spread, ok, msg in _grouped_checks(emulation, tree, tokens, experts, k, extra, g):
                assert ok, (experts, name, dtype, spread, msg)
    assert _failed_grouped_experts(trees["unsorted"], tokens) == {96, 160}


# The merge kernel's biased shapes (Kimi K2, GLM-4.5; 64 experts, which it takes in fp32 too) and grouped ones
# (DeepSeek-V3; 160 experts in groups of 20 and 64 in groups of 8, two groups a lane), each with the logit types
# that reach it there.
_SHIFT_SHAPES = [("biased", 384, 8, {}, ("bfloat16",)), ("biased", 160, 8, {}, ("bfloat16",)),
                 ("biased", 64, 8, {}, ("bfloat16", "float32")),
                 ("grouped", 256, 8, {"n_group": 8, "topk_group": 4}, ("bfloat16", "float32")),
                 ("grouped", 160, 6, {"n_group": 8, "topk_group": 3}, ("bfloat16",)),
                 ("grouped", 64, 6, {"n_group": 8, "topk_group": 4}, ("bfloat16",))]


def test_emulated_merge_kernel_shift_tables(emulation, tmp_path):
    """topk_router.cu's kMergeShiftLanes: the tree's merge kernel (1: its shift table with each lane's chunks side by
    side, merge_shift_slot) and a variant at 0 (the table by expert) route the biased and grouped selections right at
    the merge kernel's token count; with a lane reading its neighbour's shifts, every one of those shapes fails, so
    it is the side-by-side table the tree reads."""
    by_expert = ("constexpr int kMergeShiftLanes = 1;", "constexpr int kMergeShiftLanes = 0;")
    wrong = ("shift + (2 * v * W + lane) * 4", "shift + (2 * v * W + (lane ^ 1)) * 4")
    variants = moe_variants.kernel_trees([_variant(tmp_path / "by_expert", "topk_router.cu", by_expert),
                                          _variant(tmp_path / "wrong", "topk_router.cu", wrong)], tmp_path / "trees")
    by_expert_tree, wrong_tree = variants.values()
    trees = ((MOE / "kernels", True), (by_expert_tree, True), (wrong_tree, False))
    g = torch.Generator().manual_seed(3)
    for router, experts, k, extra, dtypes in _SHIFT_SHAPES:
        (tokens,) = routing_cuda.merge_token_counts(router, experts, k)
        for dtype in dtypes:
            x = _logits(tokens, experts, getattr(torch, dtype), g)
            bias = torch.randn(experts, generator=g) * 0.1
            for tree, right in trees:
                ok, msg = ref.check_router(
                    lambda *a, **kw: emulation.route(*a, **kw, kernels=tree), router, x, bias, k, extra)
                assert ok == right, (router, experts, k, dtype, tree.name, msg)


def test_emulated_rounds_by_redux(emulation, tmp_path):
    """topk_router.cu's kRoundsRedux: the tree's rounds kernel (1: a round's largest key over 16 lanes by two warp
    REDUX, each half's keys alone) and a variant at 0 (xor shuffles) route the rounds kernel's shapes of 16 lanes
    (biased, grouped and softmax) right on 1 and 37 tokens; with the halves' results swapped, they fail on 37
    tokens, so it is REDUX the tree's rounds take (on one token the warp's other half routes the same row, as tokens
    past the end do). The tree runs first, so that the variants' libraries are checked apart from its."""
    swapped = ("return up ? hi : lo;", "return up ? lo : hi;")
    variants = moe_variants.kernel_trees(
        [_variant(tmp_path / "shuffles", "topk_router.cu", ("constexpr int kRoundsRedux = 1;",
                                                            "constexpr int kRoundsRedux = 0;")),
         _variant(tmp_path / "swapped", "topk_router.cu", swapped)], tmp_path / "trees")
    shuffles_tree, swapped_tree = variants.values()
    # fp32 softmax on these logits (quarters: ties common) is decided by exact keys, not by the rounds
    shapes = [("biased", 384, 8, {}, (torch.float32, torch.bfloat16)), ("biased", 160, 8, {}, (torch.float32,)),
              ("softmax", 160, 6, {"renormalize": False}, (torch.bfloat16,)),
              ("grouped", 256, 8, {"n_group": 8, "topk_group": 4}, (torch.float32, torch.bfloat16))]
    g = torch.Generator().manual_seed(5)
    for router, experts, k, extra, dtypes in shapes:
        for tokens in (1, 37):
            for dtype in dtypes:
                x = _logits(tokens, experts, dtype, g)
                bias = torch.randn(experts, generator=g) * 0.1
                trees = [(MOE / "kernels", True), (shuffles_tree, True), (swapped_tree, False)]
                for tree, right in trees[:2] if tokens == 1 else trees:   # one token: both halves route its row
                    ok, msg = ref.check_router(
                        lambda *a, **kw: emulation.route(*a, **kw, kernels=tree), router, x, bias, k, extra)
                    assert ok == right, (router, experts, k, tokens, dtype, tree.name, msg)


def test_emulated_lanes_by_redux(emulation, tmp_path):
    """topk_router.cu's kLanesRedux: the tree (1: a whole warp's max and min by one warp REDUX, as make_shifts takes
    the bias's range; 16 lanes' by two) and a variant at 0 (xor shuffles) route the biased, grouped and softmax
    routers right on the rounds kernel (1 and 37 tokens) and the merge kernel (its token count), with a bias narrow
    enough for packed keys and a wide one (exact keys: rounds by lanes_max and lanes_min of 16 lanes). Two plants
    on the tree show these are the paths taken: the whole warp's min and max swapped fails every biased and grouped
    shape (softmax has no bias); 16 lanes reduced over the whole warp fails where a warp holds two tokens (37
    tokens), never on one token (the warp's other half routes the same row, as tokens past the end do)."""
    variants = moe_variants.kernel_trees(
        [_variant(tmp_path / "shuffles", "topk_router.cu", ("constexpr int kLanesRedux = 1;",
                                                            "constexpr int kLanesRedux = 0;")),
         _variant(tmp_path / "warp_swapped", "topk_router.cu",
                  ("return warp_redux<MAX>(v);", "return warp_redux<!MAX>(v);")),
         _variant(tmp_path / "whole_warp", "topk_router.cu",
                  ("return halves_redux<MAX>(v);", "return warp_redux<MAX>(v);"))], tmp_path / "trees")
    shuffles_tree, swapped_tree, whole_tree = variants.values()
    redux_tree = MOE / "kernels"
    shapes = [("biased", 384, 8, {}, torch.bfloat16), ("biased", 160, 8, {}, torch.float32),
              ("grouped", 256, 8, {"n_group": 8, "topk_group": 4}, torch.bfloat16),
              ("softmax", 160, 6, {"renormalize": False}, torch.bfloat16)]
    g = torch.Generator().manual_seed(6)
    failed = {swapped_tree: set(), whole_tree: set()}
    for router, experts, k, extra, dtype in shapes:
        for tokens in (1, 37, *routing_cuda.merge_token_counts(router, experts, k)):
            x = _logits(tokens, experts, dtype, g)
            for spread in (0.1, 3.0):
                bias = torch.randn(experts, generator=g) * spread
                for tree in (redux_tree, shuffles_tree, swapped_tree, whole_tree):
                    ok, msg = ref.check_router(
                        lambda *a, **kw: emulation.route(*a, **kw, kernels=tree), router, x, bias, k, extra)
                    if tree in (redux_tree, shuffles_tree):
                        assert ok, (router, experts, k, tokens, dtype, spread, msg)
                    elif not ok:
                        failed[tree].add((router, experts, tokens, spread))
    assert {(r, e) for r, e, _, _ in failed[swapped_tree]} == {("biased", 384), ("biased", 160), ("grouped", 256)}
    assert {("biased", 384, 37, 3.0), ("grouped", 256, 37, 0.1)} <= failed[whole_tree]
    assert not {case for case in failed[whole_tree] if case[2] == 1}


def test_emulated_groups_at_once(emulation, tmp_path):
    """topk_router.cu's kGroupsAtOnce: the tree (4: keep_groups gathers the group keys four shuffles at once, the
    groups past n_group in the last four counting for nothing) and a variant at 1 (one at a time) route the grouped
    router right on the rounds kernel (1 and 37 tokens) and the merge kernel, on 8 groups (two whole runs of four),
    5 groups of 32 (a run of one, the groups reduced over all lanes) and both of 2 groups of 32 kept on 8 lanes (4
    lanes a group: groups 2 and 3 of the first run are lanes 8 and 12, which a shuffle of 8 lanes wraps to 0 and 4).
    A plant that lets those groups count fails the 2 groups (the weaker one counted as 2 ahead and dropped), not
    the 8."""
    variants = moe_variants.kernel_trees(
        [_variant(tmp_path / "one", "topk_router.cu", ("constexpr int kGroupsAtOnce = 4;",
                                                       "constexpr int kGroupsAtOnce = 1;")),
         _variant(tmp_path / "unmasked", "topk_router.cu",
                  ("const bool group = A == 1 || o < n_group;", "const bool group = true;"))], tmp_path / "trees")
    one_tree, unmasked_tree = variants.values()
    tree = MOE / "kernels"
    shapes = [(256, 8, 8, 4, torch.bfloat16), (160, 6, 5, 2, torch.float32), (64, 6, 2, 2, torch.bfloat16)]
    g = torch.Generator().manual_seed(7)
    failed = set()
    for experts, k, n_group, topk_group, dtype in shapes:
        extra = {"n_group": n_group, "topk_group": topk_group}
        for tokens in (1, 37, *routing_cuda.merge_token_counts("grouped", experts, k)):
            x = _logits(tokens, experts, dtype, g)
            bias = torch.randn(experts, generator=g) * 0.1
            for kernels in (tree, one_tree, unmasked_tree):
                ok, msg = ref.check_router(lambda *a, **kw: emulation.route(*a, **kw, kernels=kernels), "grouped",
                                           x, bias, k, extra)
                if kernels is unmasked_tree:
                    if not ok:
                        failed.add((n_group, tokens))
                else:
                    assert ok, (experts, k, n_group, tokens, dtype, kernels.name, msg)
    assert {n for n, _ in failed} == {2}, failed


def test_emulated_key_logits(emulation, tmp_path):
    """topk_router.cu's kKeyLogits: the tree (1: the chosen experts' logits and the softmax's row maximum from the top
    16 bits of 16-bit logits' exact keys) and a variant at 0 (read again from the row) route the plain and softmax
    routers right on the rounds kernel (1 and 37 tokens) and the merge kernel (its token counts: 4 lanes, 16 lanes,
    one lane a token), in every dtype. A plant in the tree that doubles the logit a key gives fails every 16-bit
    shape on both kernels and no fp32 one (fp32 keys keep 23 bits, and those routers read the row at either
    setting), so the tree takes the keys' logits on every 16-bit path."""
    variants = moe_variants.kernel_trees(
        [_variant(tmp_path / "row", "topk_router.cu",
                  ("constexpr int kKeyLogits = 1;", "constexpr int kKeyLogits = 0;")),
         _variant(tmp_path / "doubled", "topk_router.cu",
                  ("return from_bits<T>(bits_of_order16(opaque(key) >> 16));",
                   "return 2.0f * from_bits<T>(bits_of_order16(opaque(key) >> 16));"))], tmp_path / "trees")
    row_tree, doubled_tree = variants.values()
    shapes = [("plain", 100, 8, {}), ("softmax", 160, 6, {"renormalize": False}),
              ("softmax", 128, 8, {"renormalize": True}), ("softmax", 8, 2, {"renormalize": True})]
    g = torch.Generator().manual_seed(8)
    for router, experts, k, extra in shapes:
        for tokens in (1, 37, *routing_cuda.merge_token_counts(router, experts, k)):
            for dtype in (torch.float32, torch.float16, torch.bfloat16):
                x = _logits(tokens, experts, dtype, g)
                for kernels, right in ((MOE / "kernels", True), (row_tree, True),
                                       (doubled_tree, dtype == torch.float32)):
                    ok, msg = ref.check_router(lambda *a, **kw: emulation.route(*a, **kw, kernels=kernels), router,
                                               x, None, k, extra)
                    assert ok == right, (router, experts, k, tokens, dtype, kernels.name, msg)


def _setting_trees(tmp_path, constant: str, *plant: tuple[str, str]):
    """Two variants of topk_router.cu's `constant` (0 or 1): the tree at the other setting, and at 1 with the edits
    `plant` (the tree keeps whichever setting it has)."""
    now = 1 if f"constexpr int {constant} = 1;" in (MOE / "kernels" / "topk_router.cu").read_text() else 0
    at = f"constexpr int {constant} = {now};"
    variants = [_variant(tmp_path / "other", "topk_router.cu", (at, f"constexpr int {constant} = {1 - now};")),
                _variant(tmp_path / "planted", "topk_router.cu", (at, f"constexpr int {constant} = 1;"), *plant)]
    return moe_variants.kernel_trees(variants, tmp_path / "trees").values()


def test_emulated_four_lists(emulation, tmp_path):
    """topk_router.cu's kFourLists: at 1 (at k 4 or less the merge kernel's plain, biased and softmax lists of
    quantized keys hold 4) and at 0 (lists of 8 whatever k), the tree at its setting and a variant at the other, the
    routers route right on the rounds kernel (37 tokens) and the merge kernel (its token counts: 4 lanes of 4 chunks,
    8 of 6, 4 of 2 read element by element, one lane of 3 chunks and of 1), in every dtype, with quantized and (a
    bias spanning more than 1) exact keys, ties common (and fp32 logits without ties, which the quantized keys
    decide). A plant at 1 whose lists of 4 leave a lane's last chunk out fails exactly the merge kernel's calls of
    more than one chunk a lane on quantized keys (not one lane of one chunk, nor fp32's 384 experts, which take the
    rounds kernel, nor a bias spanning more than 1, whose exact keys take lists of 8), so those calls take the lists
    of 4 and the exact keys do not. (fp32 logits with ties are not asked of the plant: a warp where two of a token's
    top k + 1 share their quantized bits selects again on exact keys, and most warps hold such a token.)"""
    select = "best_keys<unsigned, N, W, C, FP32>(keys_of, top, below);"
    other_tree, dropped_tree = _setting_trees(
        tmp_path, "kFourLists", (select, select.replace("W, C,", "W, (N == 4 && C > 1 ? C - 1 : C),")))
    # (router, experts, k, extra, whether a lane of the merge kernel holds more than one chunk in each dtype)
    shapes = [("plain", 128, 4, {}, lambda d: True), ("biased", 384, 4, {}, lambda d: d != torch.float32),
              ("softmax", 50, 4, {"renormalize": False}, lambda d: True),
              ("softmax", 24, 2, {"renormalize": True}, lambda d: True), ("biased", 8, 3, {}, lambda d: False)]
    g = torch.Generator().manual_seed(9)
    for router, experts, k, extra, chunks in shapes:
        for tokens in (37, *routing_cuda.merge_token_counts(router, experts, k)):
            for dtype in (torch.float32, torch.float16, torch.bfloat16):
                fp32_exact = dtype == torch.float32 and router != "biased"   # ties take exact keys
                tied = [(True, _logits(tokens, experts, dtype, g))]
                untied = [(False, torch.randn(tokens, experts, generator=g) * 2)] if fp32_exact else []
                for (ties, x), spread in itertools.product(tied + untied,
                                                           (0.1, 3.0) if router == "biased" else (None,)):
                    bias = None if spread is None else torch.randn(experts, generator=g) * spread
                    trees = [(MOE / "kernels", True), (other_tree, True)]
                    if not (ties and fp32_exact):
                        trees.append((dropped_tree, tokens == 37 or not chunks(dtype) or spread == 3.0))
                    for kernels, right in trees:
                        ok, msg = ref.check_router(lambda *a, **kw: emulation.route(*a, **kw, kernels=kernels),
                                                   router, x, bias, k, extra)
                        assert ok == right, (router, experts, k, tokens, dtype, spread, ties, kernels.name, msg)


def test_emulated_wide_merge_shapes(emulation, tmp_path):
    """router_launch.h's kMergeWideTokens set (the tree's 0 builds no wider shape): below it the merge kernel takes
    twice the lanes a token and half the chunks a lane (moe::wide_merge_shape), and the routers route right there
    (4,099 tokens: plain 128 experts on 8 lanes of 2 chunks, biased 160 16-bit on 8 of 3, softmax 384 16-bit on 16
    of 3, DeepSeek-V3's groups on 16 lanes of 2, two a group) and above it (16,387 tokens: the tree's shapes), in
    every dtype, ties common, with quantized and (a bias spanning more than 1) exact keys. A plant whose wider shape
    rounds a lane's chunks down fails exactly the 16-bit biased 160 experts below the threshold (5 chunks a lane to
    2 of 8 lanes: 32 experts left out; the even ones lose none, fp32 160 takes the rounds kernel), so those calls take
    the wider shapes."""
    at = ("constexpr int kMergeWideTokens = 0;", "constexpr int kMergeWideTokens = 16384;")
    down = ("return {2 * s.w, (s.p + 1) / 2};", "return {2 * s.w, s.p / 2 > 0 ? s.p / 2 : 1};")
    variants = [_variant(tmp_path / "wide", "router_launch.h", at), _variant(tmp_path / "down", "router_launch.h", at)]
    _variant(tmp_path / "down", "topk_router.cu", down)
    wide, planted = moe_variants.kernel_trees(variants, tmp_path / "trees").values()
    assert routing_cuda.merge_token_counts("plain", 128, 8, wide) == (4099, 16387)
    shapes = [("plain", 128, 8, {}), ("biased", 160, 8, {}), ("softmax", 384, 8, {"renormalize": True}),
              ("grouped", 256, 8, {"n_group": 8, "topk_group": 4})]
    g = torch.Generator().manual_seed(11)
    for router, experts, k, extra in shapes:
        for tokens, dtype in itertools.product((4099, 16387), (torch.float32, torch.float16, torch.bfloat16)):
            x = _logits(tokens, experts, dtype, g)
            for spread in (0.1, 3.0) if router in ("biased", "grouped") else (None,):
                bias = None if spread is None else torch.randn(experts, generator=g) * spread
                short = router == "biased" and tokens == 4099 and dtype != torch.float32
                for kernels, right in ((wide, True), (planted, not short)):
                    ok, msg = ref.check_router(lambda *a, **kw: emulation.route(*a, **kw, kernels=kernels),
                                               router, x, bias, k, extra)
                    assert ok == right, (router, experts, k, tokens, dtype, spread, kernels.name, msg)


def test_emulated_term_fma(emulation, tmp_path):
    """topk_router.cu's kTermFma: the tree at its setting and a variant at the other (1: a softmax term by one FFMA,
    0: by an FADD and an FMUL) route the softmax router right on the rounds kernel (1 and 37 tokens) and the merge
    kernel (its token counts: 4 lanes, 16 lanes of fp32, one lane a token), renormalised over the k or not, in every
    dtype, ties common. A plant at 1 that halves the terms' slope fails every one of those calls but k 1's
    renormalised (its one weight is 1 whatever the slope), so every softmax term of both kernels, the sums and the
    weights, goes through it."""
    slope = "exp2_ftz(fmaf(x, kLog2E, -scaled))"
    other_tree, halved_tree = _setting_trees(tmp_path, "kTermFma", (slope, slope.replace("kLog2E", "0.5f * kLog2E")))
    g = torch.Generator().manual_seed(10)
    for experts, k, renormalize in ((60, 4, False), (160, 6, True), (128, 8, False), (8, 2, True), (24, 1, True)):
        for tokens in (1, 37, *routing_cuda.merge_token_counts("softmax", experts, k)):
            for dtype in (torch.float32, torch.float16, torch.bfloat16):
                x = _logits(tokens, experts, dtype, g)
                trees = ((MOE / "kernels", True), (other_tree, True), (halved_tree, k == 1 and renormalize))
                for kernels, right in trees:
                    ok, msg = ref.check_router(lambda *a, **kw: emulation.route(*a, **kw, kernels=kernels),
                                               "softmax", x, None, k, {"renormalize": renormalize})
                    assert ok == right, (experts, k, renormalize, tokens, dtype, kernels.name, msg)


def test_emulation_fails_misaligned_and_out_of_bounds_accesses(emulation, tmp_path):
    """A variant with two planted bugs a GPU would show as faults, not as wrong outputs: the grouped router takes
    groups of 15 experts (120 in 8) on the merge kernel, whose chunks then read the shift table's 16-byte vectors
    off their alignment ("misaligned address"; the table by expert, kMergeShiftLanes 0, as the side-by-side one is
    aligned at any group size); and a chunk's second piece of 4 experts is read even where it starts
    at or past the row's end (past the logits on the last token: 8 groups of 4, 12 or 20 experts, the last lane of
    100 experts). The emulation fails exactly those cases, each with its cause: the type and source line
    (simt_host.h's alignment handler), or the array and how far past its end (device_memory.h's guard pages)."""
    piece = "e0 + 4 < end ? __ldg(reinterpret_cast<const uint2*>(row + e0 + 4)) : make_uint2(0, 0)"
    variant = _variant(tmp_path / "faults", "topk_router.cu",
                       ("return per % 4 == 0 && n_group >= 4", "return n_group >= 4"),
                       ("constexpr int kMergeShiftLanes = 1;", "constexpr int kMergeShiftLanes = 0;"),
                       (piece, "__ldg(reinterpret_cast<const uint2*>(row + e0 + 4))"))
    (tree,) = moe_variants.kernel_trees([variant], tmp_path / "trees").values()
    failed = moe_emulation_check.router_failures(tree, ["bfloat16"], [4099])
    misaligned = [ln for ln in failed if ln.startswith("grouped experts=120 ")]
    beyond = [ln for ln in failed if ln.startswith(("grouped experts=32 ", "grouped experts=96 ",
                                                    "grouped experts=160 ", "plain experts=100 ",
                                                    "biased experts=100 ", "softmax experts=100 "))]
    assert len(misaligned) + len(beyond) == len(failed), failed[:5]
    assert misaligned and all("misaligned address: 'const struct float4'" in ln and "topk_router.cu:" in ln
                              for ln in misaligned)
    assert any(ln.startswith("grouped experts=160 ") for ln in beyond), beyond[:5]
    assert all("out of bounds: an access at byte" in ln and "past the end of the logits" in ln for ln in beyond)


_COLLECTIVES = r"""
#include "simt_host.h"
#include <cstdio>

// Two blocks of 64 threads: shuffles within segments of 8 lanes, a vote, reductions, and a block barrier over
// shared memory.
void kernel(int* out) {
  __shared__ int seen[64];
  const int t = threadIdx.x, lane = t % 32;
  const int up = __shfl_up_sync(0xffffffffu, lane, 1, 8);        // lane - 1 within the segment, else its own
  const int x = __shfl_xor_sync(0xffffffffu, lane, 4, 8);        // lane ^ 4
  const int from = __shfl_sync(0xffffffffu, lane * 10, 3, 8);    // lane 3 of the segment, times 10
  const unsigned odd = __ballot_sync(0xffffffffu, lane % 2);
  const int low = __reduce_min_sync(0xffffffffu, lane - 20);                 // signed: -20
  const unsigned high = __reduce_max_sync(0xffffffffu, (unsigned)(lane - 20));  // unsigned: 0xffffffff
  seen[t] = t + 100 * (int)blockIdx.x;
  __syncthreads();
  const int other = seen[63 - t];
  out[(blockIdx.x * 64 + t) * 5 + 0] = up;
  out[(blockIdx.x * 64 + t) * 5 + 1] = x;
  out[(blockIdx.x * 64 + t) * 5 + 2] = from;
  out[(blockIdx.x * 64 + t) * 5 + 3] = odd == 0xaaaaaaaau && low == -20 && high == 0xffffffffu;
  out[(blockIdx.x * 64 + t) * 5 + 4] = other;
}

int main() {
  static int out[2 * 64 * 5];
  simt::launch(2, 64, [&] { kernel(out); });
  for (int i = 0; i < 2 * 64 * 5; ++i) std::printf("%d\n", out[i]);
  try {
    simt::launch(1, 32, [&] { if (threadIdx.x < 16) __syncwarp(); });
  } catch (const std::exception& e) {
    std::printf("%s\n", e.what());
  }
}
"""


def test_emulator_collectives_behave_as_cuda_does(emulation, tmp_path):
    """The emulator's shuffles (segments of `width` lanes), ballot, reductions (signed for int, unsigned for
    unsigned) and block barrier give CUDA's results, and a collective that some lanes never reach is reported, not
    hung on."""
    src = tmp_path / "collectives.cpp"
    src.write_text(_COLLECTIVES)
    exe = tmp_path / "collectives"
    cxx = shutil.which("g++")
    subprocess.run([cxx, "-std=c++17", f"-I{MOE / 'emulation'}", f"-I{em.cuda_include()}", str(src), "-o", str(exe)],
                   check=True)
    lines = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout.splitlines()
    values = [int(v) for v in lines[:2 * 64 * 5]]
    for b in range(2):
        for t in range(64):
            lane = t % 32
            up, x, frm, odd, other = values[(b * 64 + t) * 5:(b * 64 + t) * 5 + 5]
            assert up == (lane - 1 if lane % 8 else lane)
            assert x == lane ^ 4
            assert frm == (lane // 8 * 8 + 3) * 10
            assert odd == 1
            assert other == 63 - t + 100 * b
    assert "waits on a thread that has exited" in lines[-1]
