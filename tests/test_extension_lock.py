"""PyTorch extension builds that a killed build does not hold up (evaluate/extension_lock.py): the lock file of a
build whose process died is found and removed, a live build's is waited for, and a KernelBench candidate that
builds with load_inline is checked through the harness where a killed build left its lock file."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from kernelpilot.evaluate import extension_lock

torch = pytest.importorskip("torch")
from torch.utils.file_baton import FileBaton  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
KB_PROBLEM = ROOT / "examples" / "problems" / "kernelbench_relu" / "19_ReLU.py"

# A process that builds: it takes the baton (patched), says so, and holds it until killed.
BUILDER = """
import sys, time
from kernelpilot.evaluate import extension_lock
extension_lock.install()
from torch.utils.file_baton import FileBaton
assert FileBaton(sys.argv[1]).try_acquire()
print("building", flush=True)
time.sleep(600)
"""


def _age(path: Path, seconds: float = 60.0) -> None:
    """Make ``path`` look ``seconds`` old, past the grace a just-made lock file gets."""
    then = time.time() - seconds
    os.utime(path, (then, then))


@pytest.fixture
def patched():
    extension_lock.install()
    yield


@pytest.fixture
def builder(tmp_path):
    lock = tmp_path / "lock"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen([sys.executable, "-c", BUILDER, str(lock)], stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert proc.stdout.readline() == "building\n"
        yield proc, lock
    finally:
        proc.kill()
        proc.wait(10)


def test_a_live_build_is_waited_for_and_a_killed_ones_lock_is_taken_over(patched, builder):
    proc, lock = builder
    _age(lock)
    assert not FileBaton(str(lock)).try_acquire()        # held: however old the file, the build is alive
    assert lock.exists()
    proc.kill()
    proc.wait(10)
    baton = FileBaton(str(lock))
    assert baton.try_acquire()                           # its process is gone: the file is taken over
    baton.release()
    assert not lock.exists()


def test_waiting_on_a_build_ends_when_its_process_is_killed(patched, builder):
    proc, lock = builder
    _age(lock)
    waiter = threading.Thread(target=FileBaton(str(lock), wait_seconds=0.05).wait, daemon=True)
    waiter.start()
    waiter.join(1.0)
    assert waiter.is_alive()
    proc.kill()
    proc.wait(10)
    waiter.join(10.0)
    assert not waiter.is_alive() and not lock.exists()


def test_a_lock_file_just_made_is_not_taken_for_a_leftover(patched, tmp_path):
    # between making its file and locking it, a build holds no flock yet: a young file is left alone
    lock = tmp_path / "lock"
    lock.touch()
    assert not FileBaton(str(lock)).try_acquire() and lock.exists()
    assert not extension_lock.left_behind(str(lock))
    _age(lock)
    assert extension_lock.left_behind(str(lock)) and not lock.exists()


CANDIDATE = '''
"""ReLU through a C++ extension of its own, built with load_inline (KernelBench form)."""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

_relu = load_inline(name="NAME", cpp_sources="torch::Tensor relu(torch::Tensor x) { return torch::relu(x); }",
                    functions=["relu"], verbose=False)


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _relu.relu(x)
'''


def test_a_load_inline_candidate_is_checked_where_a_killed_build_left_its_lock(tmp_path, monkeypatch):
    """The worker's extensions folder holds the lock file a killed worker's build of the same name left: the
    candidate builds and is checked, where PyTorch alone would wait on that file until the timeout."""
    from kernelpilot.evaluate.runner import EvalOptions, check

    for tool in ("ninja", os.environ.get("CXX", "c++")):
        found = shutil.which(tool, path=os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]]))
        if found is None:
            if os.environ.get("CI") == "true":
                pytest.fail(f"{tool} not found: load_inline needs it")
            pytest.skip(f"{tool} not found")
    name = f"kpilot_lock_{os.getpid()}"
    extensions = tmp_path / "extensions"
    (extensions / name).mkdir(parents=True)
    left = extensions / name / "lock"
    left.touch()
    _age(left)
    candidate = tmp_path / "relu_inline.py"
    candidate.write_text(CANDIDATE.replace("NAME", name))
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(extensions))
    monkeypatch.setenv("PATH", os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]]))
    res = check(KB_PROBLEM, candidate, EvalOptions(device="cpu", seeds=1, timeout=240))
    assert res.correct, (res.error, [(c.case, c.message) for c in res.cases if not c.ok])
    assert not left.exists() and list((extensions / name).glob("*.so"))
