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
        opts = EvalOptions(device=device, cases=[SMALL], seeds=1, verify=1, timing={"budget_s": 0.2}, pool=pool)
        good = evaluate(ROW, ROW / "candidates" / "triton_softmax.py", opts)
        crash = check(ROW, ROW / "cheats" / "segfault.py", opts)
        again = evaluate(ROW, ROW / "candidates" / "triton_softmax.py", opts)
        later_pids = {w.proc.pid for ws in pool.idle.values() for w in ws}
        dirs = pool.dir
    return good, crash, again, first_pids, later_pids, dirs


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_pool_serves_candidate_after_candidate(device):
    good, crash, again, first_pids, later_pids, pool_dir = _run_with_pool(device)
    for res in (good, again):
        assert res.passed and res.correct and res.bench and res.bench[0].timing, (res.error, res.flags)
        assert res.elapsed_s["candidate"] > 0 and res.elapsed_s["total"] >= res.elapsed_s["candidate"]
    assert crash.error and "segmentation fault" in crash.error and not crash.passed
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
