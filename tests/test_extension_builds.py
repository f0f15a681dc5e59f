"""A candidate's PyTorch extension builds (evaluate/extension_builds.py): the lock file of a build whose process
died is found and removed, a live build's is waited for; through the harness, a KernelBench candidate that builds
with load_inline is checked where a killed build left its lock file, and two candidates that name their extensions
alike, built at once, each run their own code."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from kernelpilot.evaluate import extension_builds

torch = pytest.importorskip("torch")
from torch.utils.file_baton import FileBaton  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
KB_PROBLEM = ROOT / "examples" / "problems" / "kernelbench_relu" / "19_ReLU.py"

# A process that builds: it takes the baton (patched), says so, and holds it until killed.
BUILDER = """
import sys, time
from kernelpilot.evaluate import extension_builds
extension_builds.guard_locks()
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
    extension_builds.guard_locks()
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
    assert not extension_builds.left_behind(str(lock))
    _age(lock)
    assert extension_builds.left_behind(str(lock)) and not lock.exists()


CANDIDATE = '''
"""ReLU (or, with BODY changed, something else) through a C++ extension of its own, built with load_inline."""
from pathlib import Path

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

Path(r"READY").touch()     # where the test sees that this candidate is about to write its sources and build
_ext = load_inline(name="NAME", cpp_sources="torch::Tensor relu(torch::Tensor x) { return BODY; }",
                   functions=["relu"], verbose=False)


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _ext.relu(x)
'''


def _tools_on_path(monkeypatch) -> None:
    """ninja and a C++ compiler on PATH (the virtual environment's bin first, where pip put ninja), or skip (a
    failure under CI)."""
    path = os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]])
    for tool in ("ninja", os.environ.get("CXX", "c++")):
        if shutil.which(tool, path=path) is None:
            if os.environ.get("CI") == "true":
                pytest.fail(f"{tool} not found: load_inline needs it")
            pytest.skip(f"{tool} not found")
    monkeypatch.setenv("PATH", path)


def _candidate(folder: Path, file: str, name: str, body: str = "torch::relu(x)") -> Path:
    path = folder / file
    ready = folder / f"{file}.ready"
    path.write_text(CANDIDATE.replace("NAME", name).replace("BODY", body).replace("READY", str(ready)))
    return path


def test_job_after_job_each_candidate_folder_is_under_the_extensions_folder(tmp_path):
    """A process that runs job after job (a worker serving several) gives each candidate its folder under the
    extensions folder it started with, not under the folder of the candidate before; the same candidate again finds
    the same folder."""
    a, b = tmp_path / "a.py", tmp_path / "b.py"
    a.write_text("A = 1\n")
    b.write_text("B = 2\n")
    code = ("import os, sys; from pathlib import Path; from kernelpilot.evaluate import extension_builds as e\n"
            "print(e.use_folder_for(Path(sys.argv[1]))); print(e.use_folder_for(Path(sys.argv[2])));"
            " print(e.use_folder_for(Path(sys.argv[1]))); print(os.environ['TORCH_EXTENSIONS_DIR'])")
    env = {**os.environ, "TORCH_EXTENSIONS_DIR": str(tmp_path / "extensions"),
           "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run([sys.executable, "-c", code, str(a), str(b)], env=env, capture_output=True, text=True,
                         check=True).stdout.split()
    base = tmp_path / "extensions"
    assert out == [str(extension_builds.candidate_folder(base, a)), str(extension_builds.candidate_folder(base, b)),
                   str(extension_builds.candidate_folder(base, a)), str(extension_builds.candidate_folder(base, a))]


def test_a_load_inline_candidate_is_checked_where_a_killed_build_left_its_lock(tmp_path, monkeypatch):
    """The candidate's extensions folder holds the lock file a killed worker's build of the same name left: the
    candidate builds and is checked, where PyTorch alone would wait on that file until the timeout."""
    from kernelpilot.evaluate.runner import EvalOptions, check

    _tools_on_path(monkeypatch)
    name = f"kpilot_lock_{os.getpid()}"
    extensions = tmp_path / "extensions"
    extensions.mkdir()
    candidate = _candidate(extensions, "relu_inline.py", name)
    left = extension_builds.candidate_folder(extensions, candidate) / name / "lock"
    left.parent.mkdir(parents=True)
    left.touch()
    _age(left)
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(extensions))
    res = check(KB_PROBLEM, candidate, EvalOptions(device="cpu", seeds=1, timeout=240))
    assert res.correct, (res.error, [(c.case, c.message) for c in res.cases if not c.ok])
    assert not left.exists() and list(left.parent.glob("*.so"))


def test_two_candidates_naming_their_extensions_alike_each_run_their_own_code(tmp_path, monkeypatch):
    """Two candidates build an extension of the same name at once, one ReLU, one that returns its input, while a
    build of that name is under way in the shared extensions folder (held here until both have written their
    sources). Sharing that folder, each would wait for that build and then load what it made, not its own code
    (here nothing: both fail to import); in folders of their own, the ReLU passes and the other fails."""
    _tools_on_path(monkeypatch)
    name = f"kpilot_alike_{os.getpid()}"
    extensions = tmp_path / "extensions"
    (extensions / name).mkdir(parents=True)
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(extensions))
    extension_builds.guard_locks()
    shared = FileBaton(str(extensions / name / "lock"))
    assert shared.try_acquire()                          # a build of that name in the shared folder, under way
    runs = {}
    try:
        for key, body in (("relu", "torch::relu(x)"), ("input", "x")):
            candidate = _candidate(extensions, f"{key}.py", name, body)
            runs[key] = subprocess.Popen(
                [sys.executable, "-m", "kernelpilot", "check", str(KB_PROBLEM), "-c", str(candidate), "--device",
                 "cpu", "--seeds", "1", "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                cwd=ROOT)
        deadline = time.monotonic() + 180
        while not all((extensions / f"{key}.py.ready").exists() for key in runs):
            assert time.monotonic() < deadline and all(r.poll() is None for r in runs.values()), \
                {k: r.poll() for k, r in runs.items()}
            time.sleep(0.2)
        time.sleep(3.0)                                  # both past writing their sources
    finally:
        shared.release()
    results = {}
    for key, run in runs.items():
        out, err = run.communicate(timeout=600)
        assert out.strip(), err[-3000:]
        results[key] = json.loads(out)
    assert results["relu"]["correct"] is True, results["relu"]["error"]
    assert results["input"]["correct"] is False, results["input"]["error"]
