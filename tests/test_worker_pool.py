"""Workers started ahead of their jobs (WorkerPool): every job still gets a process of its own, a crash in
one leaves the pool serving, and the results equal those without a pool."""

from __future__ import annotations

import pytest
from conftest import EXAMPLES, require_module

from kernelpilot.evaluate.isolation import WorkerPool
from kernelpilot.evaluate.runner import EvalOptions, check, evaluate

require_module("torch")
require_module("triton")

ROW = EXAMPLES / "problems" / "row_softmax"
SMALL = "rows=64,cols=128,dtype=float32"


def _run_with_pool(device: str):
    with WorkerPool() as pool:
        pool.prestart(device, warm=True)
        assert pool.wait_ready(180), "the pool's workers did not start"
        first_pids = {w.proc.pid for ws in pool.idle.values() for w in ws}
        opts = EvalOptions(device=device, cases=[SMALL], seeds=1, verify=1, timing={"budget_s": 0.2}, pool=pool,
                           baselines=["eager"])
        good = evaluate(ROW, ROW / "candidates" / "triton_softmax.py", opts)
        crash = check(ROW, ROW / "cheats" / "segfault.py", opts)
        again = evaluate(ROW, ROW / "candidates" / "triton_softmax.py", opts)
        wrong = check(ROW, ROW / "cheats" / "precision_downgrade.py", opts)
        later_pids = {w.proc.pid for ws in pool.idle.values() for w in ws}
        references = [w.proc.pid for w in pool.references.values()]
        dirs = pool.dir
    return good, crash, again, wrong, first_pids, later_pids, references, dirs


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_pool_serves_candidate_after_candidate(device):
    good, crash, again, wrong, first_pids, later_pids, references, pool_dir = _run_with_pool(device)
    for res in (good, again):
        assert res.passed and res.correct and res.bench and res.bench[0].timing, (res.error, res.flags)
        assert res.elapsed_s["candidate"] > 0 and res.elapsed_s["total"] >= res.elapsed_s["candidate"]
        assert res.bench[0].baselines["eager"].speedup > 0
    assert crash.error and "segmentation fault" in crash.error and not crash.passed
    # One reference worker served every candidate; the second on the problem got the same secret seeds, the
    # reference's outputs for them kept from the first, and the eager baseline's timing from the first run.
    assert len(references) == 1
    assert good.cases[0].seed == again.cases[0].seed == wrong.cases[0].seed
    assert not any("kept from an earlier candidate" in n for n in good.notes)
    assert any("outputs for 1 of" in n and "kept from an earlier candidate" in n for n in again.notes), again.notes
    assert any(n.startswith("baseline eager: timed earlier in this pool") for n in again.notes), again.notes
    assert "baseline eager" not in again.elapsed_s
    # A wrong candidate is still wrong against kept outputs.
    assert not wrong.correct and "elements outside" in wrong.cases[0].message
    assert not first_pids & later_pids          # the workers that ran jobs are gone; fresh ones wait
    assert not pool_dir.exists()                # closing the pool removes its folder


@pytest.mark.gpu
def test_default_device_asks_the_driver_without_torch():
    import subprocess
    import sys

    code = ("import sys; from kernelpilot.evaluate.runner import default_device, _nvidia_device_count; "
            "print(default_device(), _nvidia_device_count(), 'torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60).stdout.split()
    assert out[0] == "cuda" and int(out[1]) >= 1 and out[2] == "False"


def test_a_pool_serves_a_bounded_number_of_problems():
    """Past ``problems``, the problem used longest ago is let go: its reference worker ends, its seeds and
    baselines are forgotten, and coming back to it starts afresh with new secret seeds."""
    relu = EXAMPLES / "problems" / "kernelbench_relu"
    with WorkerPool(spares=1, problems=1) as pool:
        opts = EvalOptions(device="cpu", cases=[SMALL], seeds=1, pool=pool)
        first = check(ROW, ROW / "candidates" / "triton_softmax.py", opts)
        ref_first = next(iter(pool.references.values()))
        other = check(relu / "19_ReLU.py", relu / "candidates" / "relu_triton.py", EvalOptions(device="cpu", seeds=1, pool=pool))
        assert first.correct and other.correct, (first.cases, other.cases)
        assert len(pool.references) == 1 and ref_first not in pool.references.values()
        assert ref_first.wait_closed(15.0)
        assert {k for k, _ in pool.seeds} == {k for k, _ in pool.references}
        back = check(ROW, ROW / "candidates" / "triton_softmax.py", opts)
        assert back.correct and not any("kept from an earlier candidate" in n for n in back.notes)
