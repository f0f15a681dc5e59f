"""The cheating suite: every known way a kernel under test can fool a harness (docs/gpu-tool-facts.md, last
section) as a candidate file under ``examples/problems/*/cheats/``, run through the real harness (isolated
worker processes, the reference in another process, secret seeds, hidden shapes), with the exact flag or failure
that catches it, and the honest candidates passing the same harness without an error-level flag.

Each harness run costs two Python processes that import torch (a few seconds each), so the runs the selected
tests need are started together, a few at a time, by the module's ``outcome`` fixture; each test then reads its
run's result. Runs use one or two seeds and the smallest case that shows the cheat. The CPU runs take one to two
minutes on two cores (about a minute when nothing else runs). Tests marked ``gpu`` run only where CUDA is available (on the H200 they cover the cheats that
need a GPU: side streams, stale memory, a fast path that never runs, the CUDA event timer).

A test marked ``xfail(strict=True)`` is a cheat or a bad input the harness does not handle yet: its reason says
what is wrong, and it turns into a failure (XPASS) as soon as the harness is fixed, so the mark gets removed.
"""

from __future__ import annotations

import errno
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from conftest import EXAMPLES, require_module

from kernelpilot.evaluate.result import EvalResult
from kernelpilot.evaluate.runner import EvalOptions, bench, check, evaluate

require_module("torch")

ROW = EXAMPLES / "problems" / "row_softmax"
KB = EXAMPLES / "problems" / "kernelbench_relu"
KB_PROBLEM = KB / "19_ReLU.py"

SMALL = "rows=64,cols=128,dtype=float32"              # the smallest public case
HALF = "rows=256,cols=1024,dtype=float16"             # the float16 public case
HIDDEN = ("rows=35,cols=128,dtype=float32", "rows=65,cols=128,dtype=float32")   # vary = ["rows"] of SMALL

# Bench: a short run; every sample still gets new inputs and the first timed output is always re-checked.
TINY_TIMING = {"budget_s": 0.2, "min_n": 5, "max_n": 50, "warmup": 1, "warmup_s": 0.01, "batch": 5}
# Enough samples that most re-checks fall on calls after the first few.
LONG_TIMING = {"budget_s": 2.0, "min_n": 200, "max_n": 300, "warmup": 1, "warmup_s": 0.01, "batch": 10,
               "rel_tol": 1e-9}

PARALLEL = 3


@dataclass(frozen=True)
class Run:
    """One harness call: ``mode`` (check, bench or eval) of ``candidate`` on ``problem``."""

    mode: str
    problem: Path
    candidate: Path
    cases: tuple[str, ...] | None = (SMALL,)
    seeds: int = 1
    timeout: float = 180.0
    device: str = "cpu"
    timing: dict[str, Any] = field(default_factory=lambda: dict(TINY_TIMING), hash=False)
    graphs: bool = False

    def __call__(self) -> tuple[EvalResult, float]:
        opts = EvalOptions(device=self.device, seeds=self.seeds, timeout=self.timeout,
                           cases=list(self.cases) if self.cases else None, timing=dict(self.timing),
                           graphs=self.graphs)
        fn = {"check": check, "bench": bench, "eval": evaluate}[self.mode]
        t0 = time.perf_counter()
        try:
            res = fn(self.problem, self.candidate, opts)
        except OSError as e:
            # Rarely, starting a worker from a thread of this (large) process fails in exec with EFAULT on
            # this sandbox's kernel; nothing to do with the candidate: run it once more.
            if e.errno != errno.EFAULT:
                raise
            res = fn(self.problem, self.candidate, opts)
        return res, time.perf_counter() - t0


def row(name: str, mode: str = "check", **kw) -> Run:
    folder = "candidates" if name in ("triton_softmax", "waited_side_stream") else "cheats"
    return Run(mode, ROW, ROW / folder / f"{name}.py", **kw)


def kb(name: str, mode: str = "check", **kw) -> Run:
    folder = "candidates" if name == "relu_triton" else "cheats"
    return Run(mode, KB_PROBLEM, KB / folder / f"{name}.py", cases=None, **kw)


RUNS: dict[str, Run] = {
    # honest candidates
    "row/triton_softmax": row("triton_softmax", cases=None),          # every case, public and hidden
    "kb/relu_triton": kb("relu_triton", seeds=2),
    # native-form cheats (row_softmax)
    "row/input_mutation": row("input_mutation"),
    "row/lazy_subclass": row("lazy_subclass"),
    "row/patched_timer": row("patched_timer"),
    "row/cached_by_shape": row("cached_by_shape", seeds=2),
    "row/predicted_seed": row("predicted_seed"),
    "row/shape_specialised": row("shape_specialised", cases=(SMALL, *HIDDEN)),
    "row/zeros_tiny": row("zeros_tiny", cases=(HALF,)),
    "row/precision_downgrade": row("precision_downgrade"),
    "row/library_fallback": row("library_fallback"),
    "row/background_thread": row("background_thread"),
    "row/nondeterministic": row("nondeterministic"),
    "row/segfault": row("segfault"),
    "row/hang": row("hang", timeout=12.0),
    "row/import_error": row("import_error"),
    "row/wrong_shape": row("wrong_shape"),
    "row/skipped_flush": row("skipped_flush"),
    "row/replay_elsewhere": row("replay_elsewhere"),
    # KernelBench-form cheats (19_ReLU)
    "kb/library_fallback": kb("library_fallback"),
    "kb/input_mutation": kb("input_mutation"),
    "kb/cached_by_shape": kb("cached_by_shape", seeds=2),
    "kb/patched_timer": kb("patched_timer"),
    "kb/lazy_subclass": kb("lazy_subclass"),
    "kb/segfault": kb("segfault"),
    # bench on the CPU (--device cpu): timed outputs are re-checked
    "bench/row/triton_softmax": row("triton_softmax", "bench"),
    "bench/row/cached_by_shape": row("cached_by_shape", "bench"),
    "bench/kb/cached_by_shape": kb("cached_by_shape", "bench"),
    "bench/row/patched_timer": row("patched_timer", "bench"),
    "bench/row/lazy_subclass": row("lazy_subclass", "bench"),
    "bench/row/hooked_fingerprint": row("hooked_fingerprint", "bench", cases=(HALF,)),
    "bench/row/proxied_globals": row("proxied_globals", "bench"),
    "bench/row/hooked_runtime": row("hooked_runtime", "bench"),
    "bench/row/profile_hook": row("profile_hook", "bench"),
    "bench/row/signal_work": row("signal_work", "bench"),
    "bench/row/function_mode": row("function_mode", "bench"),
    "bench/row/swapped_module": row("swapped_module", "bench"),
    "eval/row/rigged_sampling": row("rigged_sampling", "eval", timing=LONG_TIMING),
    "eval/row/repaired_samples": row("repaired_samples", "eval", timing=LONG_TIMING),
    "eval/row/forged_samples": row("forged_samples", "eval"),
    "eval/row/moved_journal": row("moved_journal", "eval"),
    "eval/row/precomputed_batch": row("precomputed_batch", "eval"),
    # GPU
    "gpu/row/triton_softmax": row("triton_softmax", device="cuda", cases=None),
    "gpu/row/input_mutation": row("input_mutation", device="cuda"),
    "gpu/row/lazy_subclass": row("lazy_subclass", device="cuda"),
    "gpu/row/patched_timer": row("patched_timer", device="cuda"),
    "gpu/row/cached_by_shape": row("cached_by_shape", device="cuda", seeds=2),
    "gpu/row/background_thread": row("background_thread", device="cuda"),
    "gpu/row/side_stream": row("side_stream", device="cuda"),
    "gpu/row/waited_side_stream": row("waited_side_stream", device="cuda"),
    "gpu/row/stale_memory": row("stale_memory", device="cuda"),
    "gpu/row/fast_path_never_runs": row("fast_path_never_runs", device="cuda"),
    "gpu/row/patched_cuda_timer": row("patched_cuda_timer", device="cuda"),
    "gpu/kb/relu_triton": kb("relu_triton", device="cuda", seeds=2),
    "gpu/bench/row/triton_softmax": row("triton_softmax", "bench", device="cuda"),
    "gpu/bench/row/cached_by_shape": row("cached_by_shape", "bench", device="cuda"),
    "gpu/bench/row/patched_cuda_timer": row("patched_cuda_timer", "bench", device="cuda"),
    "gpu/bench/row/lazy_subclass": row("lazy_subclass", "bench", device="cuda"),
    "gpu/eval/row/rigged_sampling": row("rigged_sampling", "eval", device="cuda", timing=LONG_TIMING),
    "gpu/eval/row/repaired_samples": row("repaired_samples", "eval", device="cuda", timing=LONG_TIMING),
    "gpu/eval/row/forged_samples": row("forged_samples", "eval", device="cuda"),
    "gpu/eval/row/precomputed_batch": row("precomputed_batch", "eval", device="cuda"),
    "gpu/eval/row/side_stream_late": row("side_stream_late", "eval", device="cuda", timing=LONG_TIMING),
    "gpu/bench/row/hooked_fingerprint": row("hooked_fingerprint", "bench", device="cuda", cases=(HALF,)),
    "gpu/bench/row/proxied_globals": row("proxied_globals", "bench", device="cuda"),
    "gpu/bench/row/profile_hook": row("profile_hook", "bench", device="cuda"),
    "gpu/bench/row/function_mode": row("function_mode", "bench", device="cuda"),
    "gpu/bench/row/skipped_flush": row("skipped_flush", "bench", device="cuda", cases=(HALF,)),
    "gpu/bench/row/shrunk_flush": row("shrunk_flush", "bench", device="cuda", cases=(HALF,)),
    "gpu/bench/row/replay_elsewhere": row("replay_elsewhere", "bench", device="cuda", graphs=True),
    "gpu/bench/row/persisting_l2": row("persisting_l2", "bench", device="cuda", cases=(HALF,), graphs=True),
}

# Started first: the runs that take longest.
_SLOW_FIRST = ("eval/", "gpu/eval/", "row/triton_softmax", "row/hang", "bench/row/triton_softmax")


def _key_order(key: str) -> int:
    return next((i for i, p in enumerate(_SLOW_FIRST) if key.startswith(p)), len(_SLOW_FIRST))


def _skipped(item) -> bool:
    """Whether pytest will skip ``item`` (a skip mark, or a skipif mark whose condition holds)."""
    if item.get_closest_marker("skip"):
        return True
    return any(m.args and m.args[0] is True for m in item.iter_markers("skipif"))


@pytest.fixture(scope="module")
def outcome(request):
    """``outcome(key) -> EvalResult``: the run ``RUNS[key]``, started in the background together with every other
    run the selected (not skipped) tests of this module need."""
    wanted = []
    for item in request.session.items:
        if getattr(item, "module", None) is not request.module or _skipped(item):
            continue
        key = getattr(item, "callspec", None) and item.callspec.params.get("key")
        if key and key not in wanted:
            wanted.append(key)
    pool = ThreadPoolExecutor(max_workers=PARALLEL)
    # GPU runs one at a time: another run's kernels on the same GPU would show as work after the timed stream.
    gpu = ThreadPoolExecutor(max_workers=1)
    runner = lambda k: (gpu if RUNS[k].device == "cuda" else pool).submit(RUNS[k])  # noqa: E731
    futures: dict[str, Future] = {k: runner(k) for k in sorted(wanted, key=_key_order)}

    def get(key: str) -> EvalResult:
        if key not in futures:
            futures[key] = runner(key)
        res, seconds = futures[key].result()
        print(f"{key}: {seconds:.1f} s; " + _summary(res))    # shown with -s, or when the test fails
        return res

    yield get
    pool.shutdown(wait=True, cancel_futures=True)
    gpu.shutdown(wait=True, cancel_futures=True)


def _summary(res: EvalResult) -> str:
    parts = [f"correct={res.correct} passed={res.passed}"]
    parts += [f"[{f.level}] {f.id}: {f.message[:160]}" for f in res.flags]
    if res.error:
        parts.append("error: " + res.error.splitlines()[0][:200])
    parts += [f"FAIL {c.case}: {c.message[:160]}" for c in failing(res)[:3]]
    parts += [f"bench {b.case}: check_ok={b.check_ok} checked={b.checked} median_us={b.timing.median_us if b.timing else None}"
              for b in res.bench]
    return " | ".join(parts)


def ids(res: EvalResult, level: str | None = None) -> set[str]:
    return {f.id for f in res.flags if level is None or f.level == level}


def flag(res: EvalResult, fid: str):
    found = [f for f in res.flags if f.id == fid]
    assert found, f"no {fid} flag; flags: {[(f.id, f.level) for f in res.flags]}; error: {res.error}"
    return found[0]


def failing(res: EvalResult) -> list:
    return [c for c in res.cases if not c.ok]


def keys(*names: str, gpu: tuple[str, ...] = ()) -> list:
    """Parameters for ``key``: the CPU runs, then GPU runs marked ``gpu``."""
    return list(names) + [pytest.param(g, marks=pytest.mark.gpu) for g in gpu]


# ---------------------------------------------------------------- honest candidates pass


@pytest.mark.parametrize("key", keys("row/triton_softmax", "kb/relu_triton",
                                     gpu=("gpu/row/triton_softmax", "gpu/kb/relu_triton")))
def test_correct_candidates_pass_without_flags(outcome, key):
    res = outcome(key)
    assert res.error is None, res.error
    assert res.correct and res.passed, [(c.case, c.message) for c in failing(res)]
    assert not [f for f in res.flags if f.level in ("error", "warning")], [(f.id, f.message) for f in res.flags]
    assert len(res.cases) >= 2 and all(c.max_abs_err is not None and c.rel_err is not None for c in res.cases)
    if key.endswith("row/triton_softmax"):    # every case, hidden ones included
        assert {c.case for c in res.cases} == {SMALL, HALF, *HIDDEN}
        assert {c.case for c in res.cases if c.hidden} == set(HIDDEN)


# ---------------------------------------------------------------- guards that reject (error-level flags)


@pytest.mark.parametrize("key", keys("row/input_mutation", "kb/input_mutation", gpu=("gpu/row/input_mutation",)))
def test_input_mutation_is_rejected(outcome, key):
    res = outcome(key)
    # The outputs are right: only the guard catches it.
    assert res.correct is True and not failing(res)
    f = flag(res, "input-mutation")
    assert f.level == "error" and "modified its inputs" in f.message
    assert res.rejected and not res.passed


@pytest.mark.parametrize("key", keys("row/lazy_subclass", "kb/lazy_subclass", gpu=("gpu/row/lazy_subclass",)))
def test_lazy_tensor_subclass_is_rejected(outcome, key):
    res = outcome(key)
    assert res.correct is False and len(failing(res)) == len(res.cases) >= 1
    for c in res.cases:
        assert c.message.startswith("output rejected") and "(a tensor subclass)" in c.message, c.message
    f = flag(res, "lazy-output")
    assert f.level == "error" and ("_Deferred" in f.message or "_LazyReLU" in f.message)
    assert not res.passed


TIMERS = {"time.perf_counter", "torch.cuda.synchronize", "torch.cuda.Event.elapsed_time"}


@pytest.mark.parametrize("key", keys("row/patched_timer", "kb/patched_timer", gpu=("gpu/row/patched_timer",)))
def test_patched_timers_are_rejected(outcome, key):
    res = outcome(key)
    assert res.correct is True           # it computes correctly: only the guard catches it
    f = flag(res, "patched-timer")
    assert f.level == "error" and set(f.evidence["functions"]) == TIMERS, f.evidence
    static = flag(res, "static-patching")
    assert static.level == "info" and "assigns time.perf_counter" in static.message
    assert res.rejected and not res.passed


@pytest.mark.gpu
@pytest.mark.parametrize("key", ["gpu/row/patched_cuda_timer"])
def test_patched_cuda_event_timer_is_rejected(outcome, key):
    res = outcome(key)
    assert res.correct is True
    f = flag(res, "patched-timer")
    assert f.level == "error" and f.evidence["functions"] == ["torch.cuda.Event.elapsed_time"]
    assert not res.passed


@pytest.mark.parametrize("key,replaced", [
    ("row/skipped_flush", "torch.amax"), ("row/replay_elsewhere", "torch.cuda.CUDAGraph.replay"),
    pytest.param("gpu/bench/row/skipped_flush", "torch.amax", marks=pytest.mark.gpu),
    pytest.param("gpu/bench/row/replay_elsewhere", "torch.cuda.CUDAGraph.replay", marks=pytest.mark.gpu),
])
def test_replaced_flush_or_replay_is_rejected(outcome, key, replaced):
    # the flush and the graph's replay call the functions held from before the import; the replacement is said
    res = outcome(key)
    f = flag(res, "patched-timer")
    assert f.level == "error" and f.evidence["functions"] == [replaced], f.evidence
    assert res.rejected and not res.passed
    if "/bench/" in key:
        assert res.bench and all(b.timing for b in res.bench), [b.error for b in res.bench]


@pytest.mark.parametrize("key,replaced", [
    ("bench/row/hooked_fingerprint", "torch.Tensor.detach"), ("bench/row/proxied_globals", "reference.py:torch"),
    ("bench/row/hooked_runtime", "kernelpilot.evaluate.formats.native.NativeRuntime.make_inputs"),
    ("bench/row/swapped_module", "sys.modules['kernelpilot.evaluate.guards']"),
    pytest.param("gpu/bench/row/hooked_fingerprint", "torch.Tensor.detach", marks=pytest.mark.gpu),
    pytest.param("gpu/bench/row/proxied_globals", "reference.py:torch", marks=pytest.mark.gpu),
])
def test_work_hooked_in_between_timed_calls_is_rejected(outcome, key, replaced):
    # its timed calls only look up outputs computed while the harness fingerprinted their inputs, or while the
    # problem's code or the harness's runtime made them: right, and fast; only the snapshots catch it
    res = outcome(key)
    f = flag(res, "harness-tampered")
    assert f.level == "error" and replaced in f.evidence["functions"], f.evidence
    assert res.bench and all(b.check_ok for b in res.bench)
    assert res.rejected


@pytest.mark.parametrize("key,hooks", [
    ("bench/row/profile_hook", ["profile function"]),
    ("bench/row/signal_work", ["SIGALRM's handler", "itimer-real interval timer"]),
    ("bench/row/function_mode", ["torch function modes"]),
    pytest.param("gpu/bench/row/profile_hook", ["profile function"], marks=pytest.mark.gpu),
    pytest.param("gpu/bench/row/function_mode", ["torch function modes"], marks=pytest.mark.gpu),
])
def test_hooks_into_the_harness_are_removed_and_rejected(outcome, key, hooks):
    # nothing replaced: Python's profile function, a signal's handler and an interval timer, a torch function mode,
    # compared around every timed call and put back before each call's inputs are made
    res = outcome(key)
    f = flag(res, "harness-tampered")
    assert f.level == "error" and f.evidence["hooks"] == hooks, f.evidence
    assert res.rejected


@pytest.mark.gpu
@pytest.mark.parametrize("key", ["gpu/bench/row/shrunk_flush"])
def test_a_shrunk_flush_buffer_stops_the_case(outcome, key):
    # nothing replaced: the buffer re-strided in place is found by the check before each flush
    res = outcome(key)
    f = flag(res, "harness-tampered")
    assert f.level == "error" and "L2 flush buffer was changed" in f.message
    assert res.rejected and not any(b.timing for b in res.bench)


@pytest.mark.gpu
def test_inputs_kept_in_l2_through_the_flush_are_demoted(outcome):
    # the L2 set aside for persisting lines: each flush found it and demoted them first (events and graph replays)
    res = outcome("gpu/bench/row/persisting_l2")
    f = flag(res, "l2-persisting")
    assert f.level == "warning" and f.evidence["cases"] == [HALF] and f.evidence["set_aside_bytes"] > 0, f.evidence
    assert res.bench and all(b.timing and b.graph_timing for b in res.bench), [b.error for b in res.bench]
    assert not any(x.level == "error" for x in res.flags), [x.id for x in res.flags]


@pytest.mark.parametrize("key", ["row/shape_specialised"])
def test_shape_specialisation_is_rejected(outcome, key):
    res = outcome(key)
    public = [c for c in res.cases if not c.hidden]
    hidden = [c for c in res.cases if c.hidden]
    assert public and all(c.ok for c in public)
    assert {c.case for c in hidden} == set(HIDDEN) and not any(c.ok for c in hidden)
    f = flag(res, "shape-specialised")
    assert f.level == "error" and f.evidence["cases"] == sorted(HIDDEN)
    assert not res.passed


@pytest.mark.gpu
@pytest.mark.parametrize("key", ["gpu/row/side_stream"])
def test_side_stream_is_rejected(outcome, key):
    res = outcome(key)
    f = flag(res, "side-stream")
    assert f.level == "error" and "stream" in f.message
    assert flag(res, "static-streams").level == "info"
    assert not res.passed


@pytest.mark.gpu
@pytest.mark.parametrize("key", ["gpu/row/waited_side_stream"])
def test_a_side_stream_the_caller_waits_for_passes_with_a_warning(outcome, key):
    res = outcome(key)
    assert res.correct and res.passed, (res.error, [(f.id, f.message) for f in res.flags])
    assert "side-stream" not in ids(res)
    f = flag(res, "other-streams")
    assert f.level == "warning" and "waited for" in f.message


# ---------------------------------------------------------------- cheats that fail the check


@pytest.mark.parametrize("key", keys("row/cached_by_shape", "kb/cached_by_shape", gpu=("gpu/row/cached_by_shape",)))
def test_output_cached_by_shape_fails_on_the_second_secret_seed(outcome, key):
    res = outcome(key)
    assert len(res.cases) == 2 and res.cases[0].case == res.cases[1].case
    assert res.cases[0].seed != res.cases[1].seed
    # right for the inputs it was computed from, wrong for the next seed's
    assert res.cases[0].ok and not res.cases[1].ok
    assert "elements outside" in res.cases[1].message
    assert res.correct is False and not res.passed


@pytest.mark.parametrize("key", ["row/predicted_seed"])
def test_predicted_seed_fails_and_work_at_import_is_flagged(outcome, key):
    res = outcome(key)
    assert res.cases and all(not c.ok and "elements outside" in c.message for c in res.cases)
    assert all(c.seed not in (0, 42) for c in res.cases)
    f = flag(res, "work-at-import")
    assert f.level == "warning" and f.evidence["ops"] == ["aten::_softmax", "aten::softmax"]
    assert not res.passed


@pytest.mark.parametrize("key", ["row/zeros_tiny"])
def test_zeros_where_tiny_fails_only_the_relative_norm_test(outcome, key):
    res = outcome(key)
    (case,) = res.cases
    assert case.case == HALF and not case.ok
    # Every element is within atol (an allclose-style check passes it); the norm test does not.
    assert "relative norm error" in case.message and "elements outside" not in case.message, case.message
    assert case.max_abs_err < 1e-3 and case.rel_err > 1e-2
    assert not res.passed


@pytest.mark.parametrize("key", ["row/precision_downgrade"])
def test_precision_downgrade_fails(outcome, key):
    res = outcome(key)
    (case,) = res.cases
    assert not case.ok and "elements outside atol=1e-05, rtol=1e-05" in case.message
    assert case.max_abs_err > 1e-4
    assert not res.passed


@pytest.mark.parametrize("key", keys("row/background_thread", gpu=("gpu/row/background_thread",)))
def test_background_thread_fails_and_is_flagged(outcome, key):
    res = outcome(key)
    assert res.cases and all(not c.ok for c in res.cases)
    f = flag(res, "threads")
    assert f.level == "warning" and "softmax-filler" in f.evidence["threads"]
    assert flag(res, "static-threads").level == "info"
    assert not res.passed


@pytest.mark.gpu
@pytest.mark.parametrize("key", ["gpu/row/stale_memory"])
def test_stale_memory_fails_on_poisoned_memory(outcome, key):
    res = outcome(key)
    (case,) = res.cases
    assert not case.ok and "NaN" in case.message, case.message
    assert not res.passed


# ---------------------------------------------------------------- warnings: correct, but reported


@pytest.mark.parametrize("key,ops", [("row/library_fallback", ["aten::_softmax", "aten::softmax"]),
                                     ("kb/library_fallback", ["aten::clamp_min", "aten::relu"])])
def test_library_fallback_is_flagged(outcome, key, ops):
    res = outcome(key)
    f = flag(res, "library-fallback")
    assert f.level == "warning" and f.evidence["ops"] == ops
    assert f.message.endswith(", ".join(ops))
    assert res.correct and res.passed      # a warning, not a rejection


@pytest.mark.parametrize("key", ["row/nondeterministic"])
def test_nondeterminism_is_flagged(outcome, key):
    res = outcome(key)
    f = flag(res, "nondeterministic")
    assert f.level == "warning" and f.evidence["cases"] == [SMALL]
    assert res.correct and res.passed


@pytest.mark.gpu
@pytest.mark.parametrize("key", ["gpu/row/fast_path_never_runs"])
def test_fast_path_that_never_runs_is_flagged(outcome, key):
    res = outcome(key)
    f = flag(res, "fast-path-not-run")
    assert f.level == "warning" and f.evidence["defined"] == ["fused_softmax_kernel"]
    assert flag(res, "library-fallback").evidence["ops"] == ["aten::_softmax", "aten::softmax"]
    assert res.correct and res.passed


# ---------------------------------------------------------------- candidates that break the process


@pytest.mark.parametrize("key", ["row/segfault", "kb/segfault"])
def test_segfault_is_an_error_result(outcome, key):
    res = outcome(key)
    assert res.error and "segmentation fault (SIGSEGV)" in res.error
    assert res.error.startswith("the candidate could not be run")
    assert not res.cases and not res.passed


@pytest.mark.parametrize("key", ["row/hang"])
def test_hang_is_killed_at_the_timeout(outcome, key):
    res = outcome(key)
    assert res.error and "did not finish within 12 s" in res.error and "killed" in res.error
    assert not res.passed


@pytest.mark.parametrize("key", ["row/import_error"])
def test_import_error_is_an_error_result_that_says_why(outcome, key):
    res = outcome(key)
    assert res.error and res.error.startswith("the candidate could not be run")
    assert "fused_softmax_ext" in res.error                      # the module it could not import
    assert 'File "' not in res.error and "Traceback" not in res.error
    assert not res.cases and not res.passed


@pytest.mark.parametrize("key", ["row/wrong_shape"])
def test_wrong_shape_fails_with_the_shapes(outcome, key):
    res = outcome(key)
    (case,) = res.cases
    assert not case.ok and case.message == "out: shape (128, 64), expected (64, 128)"
    assert not res.passed


# ---------------------------------------------------------------- bench re-checks timed outputs


@pytest.mark.parametrize("key", keys("bench/row/triton_softmax", gpu=("gpu/bench/row/triton_softmax",)))
def test_bench_of_a_correct_candidate_rechecks_its_outputs(outcome, key):
    res = outcome(key)
    assert res.error is None and not [f for f in res.flags if f.level == "error"]
    # a bench job's worker starts cold: the L2 set-aside its context starts with is not the candidate's
    assert "l2-persisting" not in ids(res), [f.message for f in res.flags]
    (b,) = res.bench
    assert b.check_ok and b.checked >= 1 and b.timing.n >= TINY_TIMING["min_n"]
    assert b.timing.method == ("cuda-events" if key.startswith("gpu/") else "cpu-wall-clock")
    assert b.timing.median_us > 0 and b.timing.min_us <= b.timing.median_us


@pytest.mark.parametrize("key", keys("bench/row/cached_by_shape", "bench/kb/cached_by_shape",
                                     gpu=("gpu/bench/row/cached_by_shape",)))
def test_bench_catches_replayed_outputs(outcome, key):
    res = outcome(key)
    (b,) = res.bench
    assert not b.check_ok and b.checked >= 1 and "re-checked timed outputs were wrong" in b.message
    assert flag(res, "timed-output-wrong").level == "error"


@pytest.mark.parametrize("key", keys("bench/row/patched_timer", gpu=("gpu/bench/row/patched_cuda_timer",)))
def test_bench_alone_catches_patched_timers(outcome, key):
    # bench runs no check, so the timers are compared in the bench itself (and timed with the originals)
    res = outcome(key)
    assert flag(res, "patched-timer").level == "error"
    assert res.rejected


@pytest.mark.parametrize("key", keys("bench/row/lazy_subclass", gpu=("gpu/bench/row/lazy_subclass",)))
def test_bench_alone_rejects_lazy_outputs(outcome, key):
    # its re-checked outputs are right (the copy computes them): only the output-type guard catches it
    res = outcome(key)
    f = flag(res, "lazy-output")
    assert f.level == "error" and "(a tensor subclass)" in f.message
    assert res.rejected


@pytest.mark.parametrize("key", keys("eval/row/rigged_sampling", gpu=("gpu/eval/row/rigged_sampling",)))
def test_patched_random_source_is_rejected(outcome, key):
    res = outcome(key)
    assert res.correct is True          # check sees only honest calls
    f = flag(res, "patched-timer")
    assert f.level == "error" and f.evidence["functions"] == ["os.urandom"]
    assert flag(res, "static-patching").level == "info"
    assert not res.passed and not res.bench     # rejected by the check: not benchmarked


@pytest.mark.parametrize("key", keys("eval/row/repaired_samples", gpu=("gpu/eval/row/repaired_samples",)))
def test_repaired_timed_outputs_are_caught(outcome, key):
    res = outcome(key)
    assert res.correct is True          # check sees only honest calls
    # Caught either way: a whole kept output it repaired no longer matches the fingerprint journaled when it was
    # kept (tampered), or, should every kept one have come from an honest call, the sixteen calls re-checked by
    # their journaled samples, nine in ten of them stale (wrong).
    assert {"timed-output-tampered", "timed-output-wrong"} & set(ids(res, "error"))
    assert not res.passed


@pytest.mark.parametrize("key", keys("eval/row/forged_samples", gpu=("gpu/eval/row/forged_samples",)))
def test_forged_records_of_timed_calls_are_caught(outcome, key):
    res = outcome(key)
    assert res.correct is True          # check is untimed: every call there is honest
    found = [f for f in res.flags if f.id == "timed-output-tampered" and "second record" in f.message]
    assert found and found[0].level == "error", [(f.id, f.message) for f in res.flags]
    assert not res.passed


@pytest.mark.parametrize("key", ["eval/row/moved_journal"])
def test_a_journal_moved_while_timing_is_caught(outcome, key):
    res = outcome(key)
    assert res.correct is True
    moved = [f for f in res.flags if f.id == "timed-output-tampered" and "journal was moved" in f.message]
    assert moved and moved[0].level == "error", [(f.id, f.message) for f in res.flags]
    assert any("second record" in f.message for f in res.flags)     # the harness's record reached it after all
    assert not res.passed


@pytest.mark.parametrize("key", keys("eval/row/precomputed_batch", gpu=("gpu/eval/row/precomputed_batch",)))
def test_no_later_inputs_exist_while_a_timed_call_runs(outcome, key):
    # It answers from later calls' inputs where it finds any, else replays an earlier answer: it finds none.
    res = outcome(key)
    assert res.correct is True
    assert "timed-output-wrong" in ids(res, "error")
    assert not res.passed


@pytest.mark.gpu
@pytest.mark.parametrize("key", ["gpu/eval/row/side_stream_late"])
def test_side_stream_after_the_first_call_is_caught_while_timing(outcome, key):
    # The profiled first call is honest, so check passes it; bench sees the device busy after the timed stream.
    res = outcome(key)
    assert res.correct is True
    f = flag(res, "side-stream")
    assert f.level == "error" and "after the timed stream finished" in f.message
    assert not res.passed
