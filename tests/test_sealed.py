"""The harness's box: what a candidate cannot reach. Each cheat under ``examples/problems/row_softmax/cheats/`` that
attacks the harness itself (its output channel, the problem's files, its timing code, its processes, its
environment, the host's memory, its journal) runs through the real harness on the CPU, and the test shows it
caught or contained; the pieces (the supervisor, Landlock, the environment allow-list, the output rules, the
problem's seal) are tested on their own below."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import EXAMPLES, ROOT, require_module

from kernelpilot.evaluate import landlock
from kernelpilot.evaluate.problem_files import Seal, problem_files
from kernelpilot.evaluate.worker_env import redact, redact_json, secret_values, worker_env

ROW = EXAMPLES / "problems" / "row_softmax"
SMALL = "rows=64,cols=128,dtype=float32"
TINY_TIMING = {"budget_s": 0.3, "min_n": 5, "max_n": 20, "warmup": 1, "warmup_s": 0.01, "batch": 5}
SRC = str(ROOT / "src")


def _run(mode: str, cheat: str, problem: Path = ROW, **kw):
    require_module("torch")
    from kernelpilot.evaluate.runner import EvalOptions, bench, check, evaluate

    opts = EvalOptions(device="cpu", seeds=1, cases=[SMALL], timeout=120, timing=dict(TINY_TIMING), **kw)
    fn = {"check": check, "bench": bench, "eval": evaluate}[mode]
    return fn(problem, problem / "cheats" / f"{cheat}.py", opts)


def _flag(res, fid: str):
    found = [f for f in res.flags if f.id == fid]
    assert found, f"no {fid}; flags: {[(f.id, f.level, f.message) for f in res.flags]}; error: {res.error}"
    return found[0]


def _processes_with(text: str) -> list[int]:
    """Processes (but this one) with ``text`` in their command line or in the path of a file they hold open (a
    forked worker keeps the fork server's command line, and holds its folder's stdout.txt)."""
    out = []
    for name in os.listdir("/proc"):
        if name.isdigit() and int(name) != os.getpid():
            try:
                cmd = Path(f"/proc/{name}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            try:
                files = [os.readlink(f"/proc/{name}/fd/{fd}") for fd in os.listdir(f"/proc/{name}/fd")]
            except OSError:
                files = []
            if text in cmd or any(text in f for f in files):
                out.append(int(name))
    return out


# ---------------------------------------------------------------- cheats, through the real harness


def test_an_output_that_is_not_plain_data_is_rejected_and_never_unpickled():
    marker = Path("/tmp/kpilot-cheat-pickled-output-ran")
    marker.unlink(missing_ok=True)
    res = _run("check", "pickled_output")
    (case,) = res.cases
    assert not case.ok and case.message.startswith("output rejected: out is a ")
    assert "outputs are tensors, plain numbers and strings" in case.message
    assert _flag(res, "lazy-output").level == "error"
    assert not res.passed
    assert not marker.exists()          # its __reduce__ never ran, in any process


def test_a_candidate_cannot_rewrite_the_problem(tmp_path):
    problem = tmp_path / "row_softmax"
    shutil.copytree(ROW, problem)
    before = (problem / "reference.py").read_bytes()
    res = _run("check", "rewrite_reference", problem=problem)
    assert res.correct is False and not res.passed        # the reference stayed the real softmax
    assert "elements outside" in res.cases[0].message
    assert (problem / "reference.py").read_bytes() == before
    if landlock.abi_version() > 0:
        assert not [f for f in res.flags if f.id == "problem-tampered"]   # its write was refused
        assert not [n for n in res.notes if "not sandboxed" in n]


def test_without_the_sandbox_a_rewritten_problem_is_caught_and_put_back(tmp_path):
    problem = tmp_path / "row_softmax"
    shutil.copytree(ROW, problem)
    before = (problem / "reference.py").read_bytes()
    res = _run("check", "rewrite_reference", problem=problem, sandbox=False)
    f = _flag(res, "problem-tampered")
    assert f.level == "error" and "reference.py" in f.message and "put back" in f.message
    assert f.evidence["files"] == [str((problem / "reference.py").resolve())]
    assert res.correct is False and not res.passed
    assert (problem / "reference.py").read_bytes() == before
    assert any("not sandboxed (turned off)" in n for n in res.notes)


def test_replacing_the_harness_timing_function_is_rejected_and_the_time_is_true():
    res = _run("bench", "patched_measure")
    f = _flag(res, "harness-tampered")
    assert f.level == "error" and "kernelpilot.evaluate.timing.measure" in f.evidence["functions"]
    assert res.rejected
    (b,) = res.bench
    assert b.timing.median_us >= 20_000       # each call sleeps 20 ms; not the 0.5 us it reports


def test_a_forged_result_fails_the_candidate():
    res = _run("check", "forged_journal")
    assert res.error and "holds a result, but the worker did not end as the harness ends it" in res.error
    assert not res.cases and not res.bench and not res.passed


def test_daemons_are_killed_with_the_worker():
    assert not _processes_with("kpilot-cheat-daemon")
    res = _run("check", "setsid_daemon")
    assert res.correct                              # its softmax is right: the daemons are what is wrong
    f = _flag(res, "stray-processes")
    assert f.level == "warning" and f.evidence["count"] >= 2
    assert not _processes_with("kpilot-cheat-daemon")


def test_no_credential_reaches_a_worker_or_a_result(monkeypatch, tmp_path):
    key = "sk-kpilot-test-" + os.urandom(8).hex()
    monkeypatch.setenv("KPILOT_TEST_API_KEY", key)
    res = _run("check", "leak_key", keep=tmp_path)
    assert not res.passed and "keys: []" in res.cases[0].message     # it found none
    assert key not in json.dumps(res.to_json())
    for f in tmp_path.rglob("*"):
        if f.is_file():
            assert key.encode() not in f.read_bytes(), f


def test_a_worker_past_its_memory_limit_is_killed():
    t0 = time.perf_counter()
    res = _run("check", "memory_hog", memory_limit_gb=1.0)
    assert res.error and "of host memory, over its limit of 1.0 GiB" in res.error and "killed" in res.error
    assert time.perf_counter() - t0 < 60 and not res.passed


def test_a_flooded_journal_ends_the_worker():
    t0 = time.perf_counter()
    res = _run("check", "journal_flood")
    assert res.error and "wrote more than the harness's journal takes" in res.error
    assert time.perf_counter() - t0 < 60 and not res.passed


def test_workers_die_with_a_killed_parent(tmp_path):
    require_module("torch")
    mark = "kpilot-cheat-orphan"
    assert not _processes_with(mark)
    cand = ROW / "cheats" / "orphan_and_hang.py"
    keep = tmp_path / "keep"
    code = ("from kernelpilot.evaluate.runner import check, EvalOptions; "
            f"check({str(ROW)!r}, {str(cand)!r}, EvalOptions(device='cpu', seeds=1, cases=[{SMALL!r}], "
            f"timeout=600, keep=__import__('pathlib').Path({str(keep)!r})))")
    env = {**os.environ, "PYTHONPATH": SRC + os.pathsep + os.environ.get("PYTHONPATH", "")}
    parent = subprocess.Popen([sys.executable, "-c", code], env=env)
    try:
        end = time.monotonic() + 120
        while not _processes_with(mark):
            assert time.monotonic() < end and parent.poll() is None, "the candidate never started"
            time.sleep(0.2)
        assert set(_processes_with(str(keep))) - {parent.pid}      # the workers of that evaluation
    finally:
        parent.send_signal(signal.SIGKILL)
        parent.wait()
    end = time.monotonic() + 15
    while (_processes_with(mark) or _processes_with(str(keep))) and time.monotonic() < end:
        time.sleep(0.1)
    assert not _processes_with(mark)
    assert not _processes_with(str(keep))


# ---------------------------------------------------------------- the supervisor on its own (no torch)


def _supervise(args: list[str], messages: list[dict], timeout: float = 30) -> tuple[list[dict], float]:
    env = {**os.environ, "PYTHONPATH": SRC}
    t0 = time.perf_counter()
    p = subprocess.Popen([sys.executable, "-m", "kernelpilot.evaluate.supervise", *args], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, env=env)
    for m in messages:
        p.stdin.write(json.dumps(m).encode() + b"\n")
    p.stdin.flush()
    out, _ = p.communicate(timeout=timeout)
    return [json.loads(line) for line in out.splitlines()], time.perf_counter() - t0


def test_supervisor_enforces_the_job_deadline():
    reports, seconds = _supervise(["--", "sleep", "60"], [{"job": {"timeout": 1.0}}])
    assert reports[-1]["exit"]["reason"] == "deadline"
    assert 1.0 <= seconds < 10


def test_supervisor_reports_the_worker_status_and_kills_what_it_left():
    mark = os.urandom(4).hex()
    script = ("import subprocess, sys; subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)', "
              f"'{mark}'], start_new_session=True); raise SystemExit(7)")
    reports, _ = _supervise(["--", sys.executable, "-c", script], [])
    ex = reports[-1]["exit"]
    assert ex["status"] == 7 and ex["reason"] is None
    assert len(ex["strays"]) == 1 and ex["strays"][0].endswith(f"time.sleep(600) {mark}")
    assert not _processes_with(f"time.sleep(600) {mark}")


def test_supervisor_refuses_to_run_without_a_command():
    p = subprocess.run([sys.executable, "-m", "kernelpilot.evaluate.supervise"], capture_output=True, text=True,
                       env={**os.environ, "PYTHONPATH": SRC}, timeout=30)
    assert p.returncode == 2 and "usage" in p.stderr


# ---------------------------------------------------------------- Landlock


@pytest.mark.skipif(landlock.abi_version() < 1, reason="this kernel has no Landlock")
def test_landlock_allows_writes_only_beneath_the_given_folders(tmp_path):
    ok, no = tmp_path / "ok", tmp_path / "no"
    ok.mkdir()
    no.mkdir()
    script = (f"from kernelpilot.evaluate import landlock; landlock.restrict_writes([{str(ok)!r}])\n"
              f"open({str(ok / 'a')!r}, 'w').write('x')\n"
              f"try:\n    open({str(no / 'b')!r}, 'w').write('x')\nexcept PermissionError:\n    print('denied')\n")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60,
                         env={**os.environ, "PYTHONPATH": SRC})
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "denied"
    assert (ok / "a").exists() and not (no / "b").exists()


# ---------------------------------------------------------------- environment


def test_worker_env_is_an_allow_list_without_credentials(tmp_path):
    env = {"PATH": "/usr/bin", "HOME": "/home/u", "CUDA_VISIBLE_DEVICES": "0", "TRITON_CACHE_DIR": "/c",
           "ANTHROPIC_API_KEY": "sk-ant-123456789", "OPENAI_API_KEY": "sk-456789012", "HF_TOKEN": "hf_abcdefgh",
           "TORCH_SECRET_TOKEN": "s3cr3t-value", "AWS_SECRET_ACCESS_KEY": "aws-secret-1", "FOO": "bar",
           "PYTHONPATH": "/user/lib", "LC_ALL": "C"}
    out = worker_env(tmp_path, env=env)
    assert out["PATH"] == "/usr/bin" and out["CUDA_VISIBLE_DEVICES"] == "0" and out["LC_ALL"] == "C"
    assert out["TMPDIR"] == str(tmp_path) and out["TRITON_CACHE_DIR"] == "/c"
    assert out["PYTHONPATH"].startswith(SRC) and out["PYTHONPATH"].endswith("/user/lib")
    for name in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "HF_TOKEN", "TORCH_SECRET_TOKEN", "AWS_SECRET_ACCESS_KEY",
                 "FOO"):
        assert name not in out
    assert not set(secret_values(env)) & set(out.values())


def test_redact_blanks_credentials_wherever_they_occur():
    secrets = secret_values({"OPENAI_API_KEY": "sk-abcdefgh12", "SHORT_KEY": "abc", "PATH": "/usr/bin"})
    assert secrets == {"sk-abcdefgh12": "OPENAI_API_KEY"}
    assert redact("key=sk-abcdefgh12!", secrets) == "key=[redacted OPENAI_API_KEY]!"
    assert redact_json({"a": ["x sk-abcdefgh12"], "sk-abcdefgh12": 1}, secrets) == \
        {"a": ["x [redacted OPENAI_API_KEY]"], "[redacted OPENAI_API_KEY]": 1}


# ---------------------------------------------------------------- outputs


def test_plain_outputs_and_what_is_not():
    torch = require_module("torch")
    from kernelpilot.evaluate.outputs import load_outputs, plain_output, save_outputs

    t = torch.zeros(3)
    assert plain_output(t) is None
    assert plain_output((t, [t, {"a": t, 1: None}], 3, 2.5, "s", True)) is None
    assert "a tensor subclass" in plain_output(torch.nn.Parameter(t))
    assert "is a builtins.object" in plain_output([object()])
    assert "keys must be str or int" in plain_output({(1, 2): t})
    assert "sparse_coo tensor" in plain_output(t.to_sparse())
    assert "meta tensor" in plain_output(torch.empty(2, device="meta"))
    deep: list = []
    for _ in range(40):
        deep = [deep]
    assert "nested more than" in plain_output(deep)
    from collections import OrderedDict

    assert "OrderedDict" in plain_output(OrderedDict(a=t))


def test_outputs_folders_are_read_as_data(tmp_path, monkeypatch):
    torch = require_module("torch")
    from kernelpilot.evaluate.outputs import OutputsRejected, Rejected, load_outputs, save_outputs

    value = (torch.arange(6, dtype=torch.int16).reshape(2, 3).t(), "x", None, True, 2**70, -0.1, complex(1, -2),
             {"a": torch.ones(0, 4), 3: [torch.tensor(1.5, dtype=torch.bfloat16)]}, torch.tensor([1 + 2j]).conj())
    save_outputs({"k": value}, tmp_path / "one" / "00000")
    save_outputs({"j": [1]}, tmp_path / "one" / "00001")
    got = load_outputs(tmp_path / "one")
    assert set(got) == {"k", "j"} and got["j"] == [1]
    g = got["k"]
    assert torch.equal(g[0], value[0]) and g[1:7] == value[1:7] and type(g[0]) is torch.Tensor
    assert g[7]["a"].shape == (0, 4) and torch.equal(g[7][3][0], value[7][3][0])
    assert torch.equal(g[8], value[8].resolve_conj())

    # written and read a piece at a time on several threads
    from kernelpilot.evaluate import outputs

    big = torch.randn(3, 1000, dtype=torch.float64)
    monkeypatch.setattr(outputs, "_PIECE_BYTES", 1000)
    save_outputs({"big": big}, tmp_path / "pieces")
    assert torch.equal(outputs.to_device(load_outputs(tmp_path / "pieces")["big"], "cpu"), big)

    # A folder the candidate's process could have rewritten: each malformed entry is rejected with its reason,
    # nothing in it runs, and no file outside the folder is read.
    bad = tmp_path / "bad"
    save_outputs({"short": torch.zeros(8), "big": torch.zeros(2), "link": torch.zeros(2), "dtype": torch.zeros(2),
                  "ok": torch.ones(2)}, bad)
    index = json.loads((bad / "index.json").read_text())
    outs = index["outputs"]
    (bad / outs["short"]["file"]).write_bytes(b"\0" * 4)
    outs["big"]["shape"] = [10**6]
    (bad / outs["link"]["file"]).unlink()
    (bad / outs["link"]["file"]).symlink_to(bad / outs["ok"]["file"])
    outs["dtype"]["dtype"] = "Tensor"
    outs["evil"] = {"t": "object", "v": "os.system"}
    outs["path"] = {"t": "tensor", "dtype": "float32", "shape": [2], "file": "../one/00000/0.bin"}
    (bad / "index.json").write_text(json.dumps(index))
    got = load_outputs(bad)
    assert torch.equal(got["ok"], torch.ones(2))
    for key, why in [("short", "holds 4 bytes"), ("big", "not the 4000000 of"), ("link", "symbolic links"),
                     ("dtype", "unknown dtype"), ("evil", "of type 'object'"), ("path", "not a name in the folder")]:
        assert isinstance(got[key], Rejected) and why in got[key], (key, got[key])

    marker = tmp_path / "ran"

    class Evil:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    pickled = tmp_path / "pickled"
    pickled.mkdir()
    torch.save({"k": Evil()}, pickled / "index.json")
    with pytest.raises(OutputsRejected, match="not valid JSON"):
        load_outputs(pickled)
    assert not marker.exists()
    (tmp_path / "elsewhere").symlink_to(tmp_path / "one")
    with pytest.raises(OutputsRejected, match="could not be opened"):
        load_outputs(tmp_path / "elsewhere")


# ---------------------------------------------------------------- the problem's seal


def test_problem_files_and_seal(tmp_path):
    require_module("torch")
    from kernelpilot.evaluate.problem import load_problem

    shutil.copytree(ROW, tmp_path / "p")
    prob = load_problem(tmp_path / "p")
    files = [f.name for f in problem_files(prob)]
    assert files == ["problem.toml", "reference.py"]
    seal = Seal.take(problem_files(prob))
    assert seal.changed() == []
    ref = tmp_path / "p" / "reference.py"
    original = ref.read_bytes()
    ref.write_text("def softmax(x): return x\n")
    assert seal.changed() == [str(ref.resolve())]
    assert seal.restore(seal.changed()) == []
    assert ref.read_bytes() == original and seal.changed() == []

    kb = load_problem(EXAMPLES / "problems" / "kernelbench_relu" / "19_ReLU.py")
    assert [f.name for f in problem_files(kb)] == ["19_ReLU.py"]
    gm = load_problem(EXAMPLES / "problems" / "gpumode_vectoradd")
    assert {f.name for f in problem_files(gm)} >= {"reference.py", "task.yml", "task.py", "utils.py"}


def test_cli_refuses_a_memory_limit_that_is_not_positive():
    p = subprocess.run([sys.executable, "-m", "kernelpilot", "check", str(ROW), "-c",
                        str(ROW / "candidates" / "triton_softmax.py"), "--device", "cpu", "--memory-limit", "0"],
                       capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHONPATH": SRC})
    assert p.returncode == 2 and "--memory-limit must be more than 0" in p.stderr
    assert "Traceback" not in p.stderr
