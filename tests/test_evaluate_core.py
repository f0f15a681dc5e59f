"""The harness's pure parts with real torch: output comparison, cost expressions, the native problem
format, the roofline floor, timing statistics."""

from __future__ import annotations

import json
import math

import pytest
from conftest import EXAMPLES, require_module

from kernelpilot.errors import InputFormatError, UsageError
from kernelpilot.evaluate.cost import evaluate_cost
from kernelpilot.evaluate.problem import Tolerance, load_problem
from kernelpilot.evaluate.roofline import floor, gpu_from_device_name
from kernelpilot.evaluate.timing import TimingOptions, cpu_sampler, measure, summarize

torch = require_module("torch")
from kernelpilot.evaluate.compare import compare_outputs  # noqa: E402

TOL = lambda dtype: Tolerance(1e-3, 1e-3)  # noqa: E731


def test_identical_outputs_pass():
    x = torch.randn(64, 32)
    c = compare_outputs(x, x.clone(), TOL)
    assert c.ok and c.max_abs_err == 0 and c.rel_err == 0 and c.total == 64 * 32


def test_one_wrong_element_is_reported_with_its_index():
    x = torch.randn(64, 32)
    y = x.clone()
    y[5, 7] += 0.5
    c = compare_outputs(y, x, TOL)
    assert not c.ok and c.mismatched == 1
    assert c.worst[0]["index"] == [5, 7] and c.worst[0]["got"] == pytest.approx(float(y[5, 7]))


def test_nan_never_passes_and_poison_is_caught():
    x = torch.randn(100)
    poisoned = torch.full_like(x, float("nan"))
    c = compare_outputs(poisoned, x, TOL)
    assert not c.ok and "NaN" in c.message
    # NaN where the reference has NaN too is not an error in itself
    x[3] = float("nan")
    assert compare_outputs(x.clone(), x, TOL).ok


def test_zeros_hiding_inside_atol_fail_on_relative_norm():
    expected = torch.full((1000,), 5e-4)
    c = compare_outputs(torch.zeros(1000), expected, TOL)
    assert c.mismatched == 0          # elementwise it would pass ...
    assert not c.ok and "relative norm error" in c.message   # ... the norm test does not


def test_shape_dtype_structure_and_integers():
    x = torch.randn(4, 4)
    assert "shape" in compare_outputs(x[:3], x, TOL).message
    assert "dtype float16, expected float32" in compare_outputs(x.half(), x, TOL).message
    assert "structure" in compare_outputs((x,), (x, x), TOL).message
    ids = torch.tensor([1, 2, 3], dtype=torch.int32)
    c = compare_outputs((x, ids + torch.tensor([0, 0, 1], dtype=torch.int32)), (x, ids), TOL)
    assert not c.ok and "exact match" in c.message


def test_tensor_subclass_is_rejected():
    class Lazy(torch.Tensor):
        pass

    x = torch.randn(3)
    c = compare_outputs(x.as_subclass(Lazy), x, TOL)
    assert not c.ok and "subclass" in c.message


def test_cost_expressions():
    p = {"rows": 4, "cols": 8, "dtype": "float16"}
    assert evaluate_cost("2 * rows * cols * itemsize", p) == 128
    assert evaluate_cost("max(rows, cols) // 3 + 2 ** 3", p) == 10
    with pytest.raises(UsageError, match="tokens"):
        evaluate_cost("tokens * 2", p)
    with pytest.raises(UsageError, match="not valid"):
        evaluate_cost("__import__('os')", p)


def test_native_problem_loads_with_hidden_variants():
    p = load_problem(EXAMPLES / "problems" / "row_softmax")
    assert p.format == "native" and p.entry == "softmax"
    hidden = [c for c in p.cases if c.hidden]
    public = [c for c in p.cases if not c.hidden]
    assert len(public) == 2 and hidden
    assert all(c.params["rows"] not in (64, 256) for c in hidden)
    assert p.tolerance_for("torch.float16") == Tolerance(1e-3, 1e-3)


@pytest.mark.parametrize("text,needle", [
    ("name = 'x'\n", "missing reference"),
    ("reference = 'nope.py:f'\nmake_inputs = 'nope.py:g'\n[[cases]]\nn = 1\n", "not in"),
    ("reference = 'r.py:f'\nmake_inputs = 'r.py:g'\n", "at least one [[cases]]"),
    ("reference = 'r.py:f'\nmake_inputs = 'r.py:g'\nbogus = 1\n[[cases]]\nn = 1\n", "unknown keys"),
    ("this is = not toml [", "not valid TOML"),
    ("reference = 'r.py:f'\nmake_inputs = 'r.py:g'\n[tolerance]\nfloat32 = 3\n[[cases]]\nn = 1\n", "tolerance.float32"),
    ("reference = 'r.py:f'\nmake_inputs = 'r.py:g'\n[[case_grid]]\nn = []\n", "a [[case_grid]] list is empty"),
    ("reference = 'r.py:f'\nmake_inputs = 'r.py:g'\ncase_grid = 3\n", "each [[case_grid]] must be a table"),
    ("reference = 'r.py:f'\nmake_inputs = 'r.py:g'\ncheck = 'nope.py:c'\n[[cases]]\nn = 1\n", "check names nope.py"),
])
def test_malformed_native_problems(tmp_path, text, needle):
    (tmp_path / "problem.toml").write_text(text)
    (tmp_path / "r.py").write_text("def f(x): return x\ndef g(case, seed, device): return (1,)\n")
    with pytest.raises(InputFormatError, match=needle.replace("[", r"\[").replace("]", r"\]")):
        load_problem(tmp_path)


def test_case_grid_expands_every_combination(tmp_path):
    (tmp_path / "problem.toml").write_text("reference = 'r.py:f'\nmake_inputs = 'r.py:g'\n[[cases]]\nn = 7\nd = 'x'\n"
                                           "[[case_grid]]\nn = [1, 2]\nd = ['a', 'b', 'c']\nk = 4\n")
    (tmp_path / "r.py").write_text("def f(x): return x\ndef g(case, seed, device): return (1,)\n")
    p = load_problem(tmp_path)
    assert [c.name for c in p.cases] == ["n=7,d=x"] + [f"n={n},d={d},k=4" for n in (1, 2) for d in "abc"]


def test_not_a_problem(tmp_path):
    with pytest.raises(UsageError, match="not a problem"):
        load_problem(tmp_path)
    with pytest.raises(UsageError, match="no such problem"):
        load_problem(tmp_path / "missing")


def test_floor_from_arch_data():
    h200 = gpu_from_device_name("NVIDIA H200")
    assert h200 is not None and h200.memory_bandwidth_tbps == 4.8
    f = floor({"bytes": "2 * rows * cols * itemsize"}, {"rows": 1 << 16, "cols": 1 << 10, "dtype": "float32"}, h200)
    assert f["floor_us"] == pytest.approx(2 * 2**26 * 4 / 4.8e12 * 1e6, rel=1e-4)
    assert f["bound"] == "memory"
    assert gpu_from_device_name("NVIDIA H100 80GB HBM3").name.startswith("NVIDIA H100")
    assert gpu_from_device_name("AMD Instinct MI300X").arch == "gfx942"
    assert gpu_from_device_name("Some Other GPU") is None


def test_timing_statistics_and_options():
    t = summarize([3.0, 1.0, 2.0, 4.0, 100.0], "x", True)
    assert (t.median_us, t.min_us, t.max_us, t.n) == (3.0, 1.0, 100.0, 5)
    assert t.iqr_us == pytest.approx(2.0)
    with pytest.raises(ValueError):
        TimingOptions(min_n=1)
    calls = []
    res = measure(cpu_sampler(lambda: sum(range(1000)), prepare=calls.append), "cpu",
                  TimingOptions(min_n=5, max_n=50, budget_s=0.5, warmup=2, warmup_s=0.0))
    assert 5 <= res.n <= 50 and res.median_us > 0 and math.isfinite(res.iqr_us)
    assert calls[:2] == [-1, -2] and 0 in calls      # warm-up calls, then samples numbered from 0


def _digest_samples():
    from kernelpilot.evaluate import guards

    n = guards._DIGEST_WORDS * 2 + 3        # three chunks, the last partial, and a few tail bytes
    return [torch.arange(n * 2, dtype=torch.int32).view(-1, 2), torch.randn(1000, 37).to(torch.bfloat16),
            torch.arange(13, dtype=torch.uint8), torch.tensor(True), torch.randn(5, 7).t()]


def test_fingerprint_sees_every_word_and_only_the_contents():
    from kernelpilot.evaluate import guards
    from kernelpilot.evaluate.guards import fingerprint

    big = _digest_samples()[0]
    fp = fingerprint(big)
    assert fingerprint(big.clone()) == fp
    flat = big.view(-1)
    for pos in (0, 1, guards._DIGEST_WORDS * 2 - 1, guards._DIGEST_WORDS * 2, flat.numel() - 1):
        changed = big.clone()
        changed.view(-1)[pos] ^= 1 << 30    # one bit, in the first, a boundary, or the last word
        assert fingerprint(changed) != fp, pos
    swapped = big.clone().view(-1)
    swapped[[0, 1]] = swapped[[1, 0]]
    assert fingerprint(swapped.view_as(big)) != fp          # position matters, not just the multiset
    assert fingerprint(torch.zeros(4)) != fingerprint(torch.zeros(4, dtype=torch.int32))   # dtype counts
    assert fingerprint(torch.zeros(4)) != fingerprint(torch.zeros(2, 2))                   # shape counts
    assert fingerprint(torch.zeros(4)) != fingerprint(torch.tensor([0.0, -0.0, 0.0, 0.0]))  # bits, not values


@pytest.mark.gpu
def test_fingerprint_is_the_same_on_cpu_and_gpu():
    from kernelpilot.evaluate.guards import fingerprint

    for t in _digest_samples():
        assert fingerprint(t) == fingerprint(t.cuda()), (t.dtype, tuple(t.shape))


@pytest.mark.gpu
def test_graph_replay_time_leaves_out_a_slow_host():
    """graph_sampler replays the graph once per sample and keeps the GPU busy while the host calls the replay:
    with 300 us of host work before each replay (a busy host), a graph of one small kernel still times at a
    fraction of that, where without the lead the flush (tens of us) ends long before the replay is launched."""
    import time

    from kernelpilot.evaluate.timing import graph_sampler

    x = torch.zeros(1 << 16, device="cuda")
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        x.add_(1)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        x.add_(1)

    class SlowHost:
        def replay(self):
            t = time.perf_counter()
            while time.perf_counter() - t < 300e-6:
                pass
            graph.replay()

    sample = graph_sampler(SlowHost())
    times = [sample(i) for i in range(30)]
    torch.cuda.synchronize()
    assert float(x[0]) == 1 + 30 and len(sample.host_us) == 30 and min(sample.host_us) >= 300
    assert sorted(times)[15] < 100, times


@pytest.mark.parametrize("excess,median,level", [
    (22.5, 1.3, "error"),      # side_stream_late on an H200: the hidden softmax, against a 1.3 us timed launch
    (37.2, 1.3, "error"),
    (500.0, 400.0, "error"),   # most of a long kernel's work hidden
    (13.5, 23.7, "warning"),   # honest kernels on a busy H200 host: the host's wake-up jitter
    (11.1, 41.0, "warning"),
    (10.0, 5.0, None),
    (9.2, 3.8, None),
    (30.0, 200.0, None),
])
def test_side_stream_levels(excess, median, level):
    from kernelpilot.evaluate.timing import Tails, side_stream_level

    assert side_stream_level(excess, median) == level
    tails = Tails(baseline=[5.0, 6.0, 7.0], samples=[5.0 + excess, 6.0 + excess, 7.0 + excess])
    assert tails.excess_us() == pytest.approx(excess)


def _trace(*kernels, marker_stream=7):
    """Kineto-style events: the marker annotation and its kernel on the timed stream, then ``kernels`` as
    (name, stream, start_us, duration_us)."""
    events = [{"name": "kpilot_stream_marker", "cat": "user_annotation", "tid": 1, "ts": 0, "dur": 5},
              {"name": "marker_add", "cat": "kernel", "ts": 10, "dur": 2, "args": {"stream": marker_stream}}]
    events += [{"name": n, "cat": "kernel", "ts": ts, "dur": dur, "args": {"stream": s}} for n, s, ts, dur in kernels]
    return events


def test_probe_tells_work_outside_the_timer_from_side_streams_the_timed_stream_waits_for():
    from kernelpilot.evaluate.probe import analyze_trace

    # the side-stream cheat: the work on another stream, nothing on the timed stream after the marker
    p = analyze_trace(_trace(("softmax", 9, 20, 50)))
    assert p.side_stream_kernels == ["softmax (stream 9)"] and not p.other_stream_kernels
    # work on a helper stream that the timed stream's later kernel follows (CUDA graphs' capture, NCCL-like)
    p = analyze_trace(_trace(("capture", 9, 20, 50), ("replay", 7, 80, 10)))
    assert not p.side_stream_kernels and p.other_stream_kernels == ["capture (stream 9)"]
    assert p.kernels == ["capture", "replay"]
    # a late piece on the side stream that outlasts the timed stream's last kernel is outside the timer
    p = analyze_trace(_trace(("capture", 9, 20, 50), ("replay", 7, 80, 10), ("tail", 9, 85, 40)))
    assert p.side_stream_kernels == ["tail (stream 9)"] and p.other_stream_kernels == ["capture (stream 9)"]
    # one stream only
    p = analyze_trace(_trace(("k", 7, 20, 5)))
    assert not p.side_stream_kernels and not p.other_stream_kernels and p.kernels == ["k"]


def _wait(stream, on, record_corr, corr=None):
    args = {"cuda_sync_kind": "Stream Wait Event", "stream": stream, "wait_on_stream": on,
            "wait_on_cuda_event_record_corr_id": record_corr}
    if corr is not None:
        args["correlation"] = corr
    return {"name": "Stream Wait Event", "cat": "cuda_sync", "ts": 0, "dur": 0, "args": args}


def test_probe_follows_stream_waits():
    from kernelpilot.evaluate.probe import analyze_trace

    def kernel(name, stream, corr, ts=20):
        return {"name": name, "cat": "kernel", "ts": ts, "dur": 50, "args": {"stream": stream, "correlation": corr}}

    # CUDA graphs' warm-up: all of it on a stream of its own, which the caller's stream then waits for
    ev = _trace() + [kernel("warm1", 9, 100), kernel("warm2", 9, 101), _wait(7, 9, 102)]
    p = analyze_trace(ev)
    assert not p.side_stream_kernels and p.other_stream_kernels == ["warm1 (stream 9)", "warm2 (stream 9)"]
    # work launched after the recorded event is not waited for
    p = analyze_trace(_trace() + [kernel("early", 9, 100), _wait(7, 9, 101), kernel("late", 9, 103)])
    assert p.side_stream_kernels == ["late (stream 9)"] and p.other_stream_kernels == ["early (stream 9)"]
    # a wait by some other stream covers nothing, unless the timed stream waited for that stream afterwards
    p = analyze_trace(_trace() + [kernel("k", 9, 100), _wait(11, 9, 101, corr=102)])
    assert p.side_stream_kernels == ["k (stream 9)"]
    ev = _trace() + [kernel("k", 9, 100), _wait(11, 9, 101, corr=102), _wait(7, 11, 103)]
    assert analyze_trace(ev).other_stream_kernels == ["k (stream 9)"]
    ev = _trace() + [kernel("k", 9, 100), _wait(7, 11, 101), _wait(11, 9, 102, corr=103)]
    assert analyze_trace(ev).side_stream_kernels == ["k (stream 9)"]     # stream 11 waited only after


def test_a_baseline_keeps_its_graph_replay_and_the_summary_its_speedup():
    """With --graphs a baseline's CUDA-graph replay is kept beside its event timing, the candidate's replay speedup
    over it is summed up as a geometric mean, and both survive the JSON round trip a target's answer takes."""
    from kernelpilot.evaluate.result import Baseline, BenchCase, EvalResult

    def t(us):
        return summarize([us, us, us], "cuda-events", True)

    bench = [BenchCase(case=f"n={n}", params={"n": n}, timing=t(10.0), graph_timing=t(5.0),
                       baselines={"natural.py": Baseline(t(40.0), 4.0, t(5.0 * g), g)})
             for n, g in ((1, 2.0), (2, 8.0))]
    bench.append(BenchCase(case="n=3", params={"n": 3}, timing=t(10.0), graph_error="not capturable",
                           baselines={"natural.py": Baseline(t(40.0), 4.0)}))
    res = EvalResult(problem="p", candidate="c.py", device="cuda", bench=bench)
    summary = res.baselines()["natural.py"]
    assert summary["speedup"] == 4.0 and summary["graph_speedup"] == 4.0 and summary["graph_cases"] == 2
    back = EvalResult.from_json(json.loads(json.dumps(res.to_json())))
    assert back.baselines() == res.baselines()
    assert back.bench[0].baselines["natural.py"].graph_timing.median_us == 10.0
    assert back.bench[2].baselines["natural.py"].graph_timing is None
