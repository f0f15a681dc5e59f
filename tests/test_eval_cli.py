"""`kpilot check`, `kpilot bench` and `kpilot eval` as a user runs them: a subprocess, its exit status (0 passed,
3 the candidate failed or was rejected, 2 a usage error, 1 a malformed problem), its `--json` output
(`kernelpilot.eval/1`, the names DESIGN.md promises) and, for every bad input, one clear line and no traceback.

The commands that start workers take a few seconds each; the module's ``cli`` fixture starts every command the
selected tests need together, a few at a time, and each test reads its command's result.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import EXAMPLES, ROOT, has_gpu

ROW = EXAMPLES / "problems" / "row_softmax"
KB = EXAMPLES / "problems" / "kernelbench_relu"
GOOD = ROW / "candidates" / "triton_softmax.py"
CHEATS = ROW / "cheats"
SMALL = "rows=64,cols=128,dtype=float32"
HALF = "rows=256,cols=1024,dtype=float16"             # the problem's other case
ONE = ["--device", "cpu", "--case", SMALL]            # the smallest case on the CPU

PASSED, FAILED, USAGE, PROBLEM = 0, 3, 2, 1
PARALLEL = 3


@dataclass
class Done:
    rc: int
    out: str
    err: str

    @property
    def text(self) -> str:
        return self.out + self.err

    def json(self) -> dict:
        return json.loads(self.out)


# Bad inputs written by the fixture into a private folder ({tmp} in the commands).
REFERENCE = (ROW / "reference.py").read_text()
TOML = (ROW / "problem.toml").read_text()
FILES = {
    "bad_toml/problem.toml": 'name = "broken"\nreference = "reference.py:softmax\n',   # unterminated string
    "bad_toml/reference.py": REFERENCE,
    "no_reference/problem.toml": TOML,                                                # reference.py missing
    "no_cases/problem.toml": TOML.split("[[cases]]")[0],
    "no_cases/reference.py": REFERENCE,
    "wrong_function/problem.toml": TOML.replace('"reference.py:softmax"', '"reference.py:soft_max"'),
    "wrong_function/reference.py": REFERENCE,
    "reference_syntax/problem.toml": TOML,
    "reference_syntax/reference.py": REFERENCE + "\ndef broken(:\n",
    "kb_no_inputs.py": "import torch\n\nclass Model(torch.nn.Module):\n    def forward(self, x):\n"
                       "        return torch.relu(x)\n",
    "wrong_entry.py": "import torch\n\n\ndef soft_max(x):\n    return torch.softmax(x, dim=-1)\n",
    "syntax_error.py": "import torch\n\n\ndef softmax(x)\n    return x\n",
    "torch_softmax.py": "import torch\n\n\ndef softmax(x):\n    return torch.softmax(x, dim=-1)\n",
    # an error whose cause comes last, after a long traceback (as an exception from a subprocess carries one)
    "baseline_fails_on_float16.py": "import torch\n\n\ndef softmax(x):\n    if x.dtype == torch.float16:\n"
                                    "        raise RuntimeError('in a subprocess:\\n' + 'File x.py\\n' * 900"
                                    " + 'no half kernel here')\n"
                                    "    return torch.softmax(x, dim=-1)\n",
}

COMMANDS: dict[str, list[str]] = {
    # passes
    "check/pass/json": ["check", ROW, "-c", GOOD, *ONE, "--seeds", "1", "--json"],
    "check/pass/kb": ["check", KB / "19_ReLU.py", "-c", KB / "candidates" / "relu_triton.py", "--device", "cpu",
                      "--seeds", "1"],
    "check/fallback/json": ["check", ROW, "-c", CHEATS / "library_fallback.py", *ONE, "--seeds", "1", "--json"],
    "bench/pass/json": ["bench", ROW, "-c", GOOD, *ONE, "--budget", "0.1", "--json"],
    "eval/pass/json": ["eval", ROW, "-c", GOOD, *ONE, "--seeds", "1", "--budget", "0.1", "--baseline", "eager",
                       "--json"],
    "bench/baseline_fails_on_a_case/json": ["bench", ROW, "-c", "{tmp}/torch_softmax.py", *ONE, "--case", HALF,
                                            "--budget", "0.1", "--baseline", "{tmp}/baseline_fails_on_float16.py",
                                            "--json"],
    # the candidate ran and failed, or was rejected
    "check/wrong_shape": ["check", ROW, "-c", CHEATS / "wrong_shape.py", *ONE, "--seeds", "1"],
    "check/rejected/json": ["check", ROW, "-c", CHEATS / "input_mutation.py", *ONE, "--seeds", "1", "--json"],
    "eval/rejected": ["eval", ROW, "-c", CHEATS / "input_mutation.py", *ONE, "--seeds", "1", "--budget", "0.1"],
    "bench/replayed/json": ["bench", ROW, "-c", CHEATS / "cached_by_shape.py", *ONE, "--budget", "0.1", "--json"],
    "check/segfault": ["check", ROW, "-c", CHEATS / "segfault.py", *ONE, "--seeds", "1"],
    "check/hang": ["check", ROW, "-c", CHEATS / "hang.py", *ONE, "--seeds", "1", "--timeout", "10"],
    "check/hang/json": ["check", ROW, "-c", CHEATS / "hang.py", *ONE, "--seeds", "1", "--timeout", "10", "--json"],
    "check/import_error": ["check", ROW, "-c", CHEATS / "import_error.py", *ONE, "--seeds", "1"],
    "check/wrong_entry": ["check", ROW, "-c", "{tmp}/wrong_entry.py", *ONE, "--seeds", "1"],
    "check/syntax_error": ["check", ROW, "-c", "{tmp}/syntax_error.py", *ONE, "--seeds", "1"],
    # usage errors
    "usage/no_candidate_option": ["check", ROW],
    "usage/missing_candidate_file": ["check", ROW, "-c", "{tmp}/no_such_candidate.py"],
    "usage/unknown_case": ["check", ROW, "-c", GOOD, "--case", "rows=1"],
    "usage/unknown_device": ["check", ROW, "-c", GOOD, "--device", "tpu"],
    "usage/seeds_not_a_number": ["check", ROW, "-c", GOOD, "--seeds", "many"],
    "usage/no_such_problem": ["check", "{tmp}/no_such_problem", "-c", GOOD],
    "usage/bench_without_gpu": ["bench", ROW, "-c", GOOD],
    # malformed problems
    "problem/bad_toml": ["check", "{tmp}/bad_toml", "-c", GOOD, *ONE],
    "problem/no_reference": ["check", "{tmp}/no_reference", "-c", GOOD, *ONE],
    "problem/no_cases": ["check", "{tmp}/no_cases", "-c", GOOD, "--device", "cpu"],
    "problem/kb_no_inputs": ["check", "{tmp}/kb_no_inputs.py", "-c", KB / "candidates" / "relu_triton.py",
                             "--device", "cpu"],
    "problem/wrong_function": ["check", "{tmp}/wrong_function", "-c", GOOD, *ONE, "--seeds", "1"],
    "problem/reference_syntax": ["check", "{tmp}/reference_syntax", "-c", GOOD, *ONE, "--seeds", "1"],
}

_SLOW_FIRST = ("eval/pass", "check/hang", "bench/pass", "check/pass")


class _Commands:
    """Runs commands as subprocesses, at most ``PARALLEL`` at a time, all started from the calling thread (output
    to files, so no pipe fills up); ``result(key)`` waits for that one, starting others as slots free up."""

    def __init__(self, keys: list[str], tmp: Path) -> None:
        self.tmp = tmp
        self.queue = list(keys)
        self.running: dict[str, tuple[subprocess.Popen, Path, Path]] = {}
        self.done: dict[str, Done] = {}

    def _start(self, key: str) -> None:
        argv = [str(a).replace("{tmp}", str(self.tmp)) for a in COMMANDS[key]]
        out, err = self.tmp / f"{key.replace('/', '_')}.out", self.tmp / f"{key.replace('/', '_')}.err"
        with open(out, "w") as o, open(err, "w") as e:
            proc = subprocess.Popen([sys.executable, "-m", "kernelpilot", *argv], stdout=o, stderr=e,
                                    stdin=subprocess.DEVNULL, cwd=ROOT)
        self.running[key] = (proc, out, err)

    def _reap(self) -> None:
        for key, (proc, out, err) in list(self.running.items()):
            if proc.poll() is not None:
                self.done[key] = Done(proc.returncode, out.read_text(), err.read_text())
                del self.running[key]

    def result(self, key: str) -> Done:
        if key not in self.done and key not in self.running:
            if key in self.queue:
                self.queue.remove(key)
            self.queue.insert(0, key)
        deadline = time.monotonic() + 600
        while key not in self.done:
            self._reap()
            while self.queue and len(self.running) < PARALLEL:
                self._start(self.queue.pop(0))
            if key not in self.done:
                assert time.monotonic() < deadline, f"{key}: still running after 600 s"
                time.sleep(0.05)
        return self.done[key]

    def close(self) -> None:
        for proc, _, _ in self.running.values():
            proc.kill()
            proc.wait()


def _skipped(item) -> bool:
    """Whether pytest will skip ``item`` (a skip mark, or a skipif mark whose condition holds)."""
    if item.get_closest_marker("skip"):
        return True
    return any(m.args and m.args[0] is True for m in item.iter_markers("skipif"))


@pytest.fixture(scope="module")
def cli(request, tmp_path_factory):
    """``cli(key) -> Done``: the command ``COMMANDS[key]``, run in the background with the others the selected
    tests need."""
    tmp = tmp_path_factory.mktemp("bad_inputs")
    for rel, text in FILES.items():
        (tmp / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp / rel).write_text(text)
    wanted = []
    for item in request.session.items:
        if getattr(item, "module", None) is not request.module or _skipped(item):
            continue
        key = getattr(item, "callspec", None) and item.callspec.params.get("key")
        if key and key not in wanted:
            wanted.append(key)
    wanted.sort(key=lambda k: next((i for i, p in enumerate(_SLOW_FIRST) if k.startswith(p)), len(_SLOW_FIRST)))
    commands = _Commands(wanted, tmp)
    yield commands.result
    commands.close()


def no_traceback(done: Done) -> None:
    assert "Traceback" not in done.text and 'File "' not in done.text, done.text


def one_error_line(done: Done) -> str:
    """The single ``error: ...`` line a user error prints on stderr (nothing else there, nothing on stdout)."""
    no_traceback(done)
    lines = done.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), done.text
    assert done.out == "", done.out
    return lines[0]


def report_error(done: Done) -> str:
    """The one ``ERROR  ...`` line of a human report for a candidate that could not be run. (Lines after it, if
    any, are the tail of the worker's stderr, which can hold what the candidate printed; never a traceback.)"""
    no_traceback(done)
    lines = done.out.strip().splitlines()
    assert lines[-1] == "FAILED", done.text
    errors = [l for l in lines if l.startswith("ERROR  ")]
    assert len(errors) == 1, done.text
    return errors[0]


# ---------------------------------------------------------------- passes and the JSON schema


@pytest.mark.parametrize("key", ["check/pass/json"])
def test_check_passes_with_json(cli, key):
    done = cli(key)
    assert done.rc == PASSED, done.text
    r = done.json()
    assert r["schema"] == "kernelpilot.eval/1"
    assert r["correct"] is True and r["passed"] is True and r["error"] is None
    assert r["problem"] == "row_softmax" and r["device"] == "cpu"
    assert r["cases"] and all(c["case"] == SMALL for c in r["cases"])
    for c in r["cases"]:
        assert c["ok"] is True and c["message"] == ""
        assert 0 <= c["max_abs_err"] < 1e-5 and 0 <= c["rel_err"] < 1e-4
        assert isinstance(c["seed"], int) and c["hidden"] is False
    assert r["flags"] == [] and r["timing"] is None and r["baselines"] == {} and r["bench"] == []


@pytest.mark.parametrize("key", ["check/pass/kb"])
def test_check_passes_in_text(cli, key):
    done = cli(key)
    assert done.rc == PASSED, done.text
    lines = done.out.strip().splitlines()
    assert lines[0].startswith("problem 19_ReLU  candidate ") and lines[-1] == "PASSED"
    assert "correct: yes (1/1 case runs passed)" in done.out
    assert done.err == ""


@pytest.mark.parametrize("key", ["check/fallback/json"])
def test_flags_in_json(cli, key):
    done = cli(key)
    assert done.rc == PASSED, done.text          # a warning does not fail the check
    r = done.json()
    (f,) = [f for f in r["flags"] if f["id"] == "library-fallback"]
    assert f["level"] == "warning" and f["message"].endswith("aten::_softmax, aten::softmax")
    assert f["evidence"] == {"ops": ["aten::_softmax", "aten::softmax"]}
    assert all({"id", "message", "level", "evidence"} <= set(f) for f in r["flags"])


@pytest.mark.parametrize("key", ["bench/pass/json"])
def test_bench_on_the_cpu_passes_with_json(cli, key):
    done = cli(key)
    assert done.rc == PASSED, done.text
    r = done.json()
    assert r["schema"] == "kernelpilot.eval/1" and r["correct"] is True and r["passed"] is True
    t = r["timing"]
    assert t["method"] == "cpu-wall-clock" and t["n"] >= 3
    assert 0 < t["min_us"] <= t["median_us"] and t["iqr_us"] >= 0
    (b,) = r["bench"]
    assert b["case"] == SMALL and b["check_ok"] is True and b["checked"] >= 1
    assert b["roofline"]["bytes"] == 2 * 64 * 128 * 4 and b["roofline"]["floor_us"] is None   # no GPU: no floor
    assert any("CPU wall-clock" in n for n in r["notes"])


@pytest.mark.parametrize("key", ["bench/baseline_fails_on_a_case/json"])
def test_a_baseline_that_fails_on_one_case_is_said_and_the_other_case_keeps_its_speedup(cli, key):
    done = cli(key)
    assert done.rc == PASSED, done.text
    r = done.json()
    by_case = {b["case"]: b for b in r["bench"]}
    assert by_case[SMALL]["baselines"]["baseline_fails_on_float16.py"]["speedup"] > 0
    assert not by_case[HALF].get("baselines")
    (note,) = [n for n in r["notes"] if "could not be timed on case" in n]
    assert HALF in note and "in a subprocess" in note and "no half kernel here" in note and len(note) < 1400


@pytest.mark.parametrize("key", ["eval/pass/json"])
def test_eval_passes_with_baseline_and_json(cli, key):
    done = cli(key)
    assert done.rc == PASSED, done.text
    r = done.json()
    assert r["schema"] == "kernelpilot.eval/1" and r["correct"] is True and r["passed"] is True
    assert r["cases"] and all(c["ok"] for c in r["cases"])
    assert {"median_us", "iqr_us", "min_us", "n", "method"} <= set(r["timing"])
    eager = r["baselines"]["eager"]
    assert eager["speedup"] > 0 and eager["cases"] == 1
    (b,) = r["bench"]
    assert b["check_ok"] is True and b["checked"] >= 1
    assert b["baselines"]["eager"]["speedup"] == pytest.approx(eager["speedup"])
    assert b["baselines"]["eager"]["median_us"] > 0


# ---------------------------------------------------------------- failed or rejected candidates: exit 3


@pytest.mark.parametrize("key", ["check/wrong_shape"])
def test_wrong_shape_fails_with_the_shapes(cli, key):
    done = cli(key)
    assert done.rc == FAILED, done.text
    no_traceback(done)
    assert "out: shape (128, 64), expected (64, 128)" in done.out
    assert "correct: no (0/1 case runs passed)" in done.out and done.out.strip().endswith("FAILED")


@pytest.mark.parametrize("key", ["check/rejected/json"])
def test_rejected_candidate_exits_3_with_the_flag(cli, key):
    done = cli(key)
    assert done.rc == FAILED, done.text
    r = done.json()
    assert r["correct"] is True and r["passed"] is False        # right outputs, rejected by a guard
    (f,) = [f for f in r["flags"] if f["id"] == "input-mutation"]
    assert f["level"] == "error" and "modified its inputs" in f["message"]


@pytest.mark.parametrize("key", ["eval/rejected"])
def test_eval_does_not_bench_a_rejected_candidate(cli, key):
    done = cli(key)
    assert done.rc == FAILED, done.text
    no_traceback(done)
    assert "[error] input-mutation:" in done.out
    assert "note: not benchmarked: the candidate was rejected" in done.out
    assert "median us" not in done.out


@pytest.mark.parametrize("key", ["bench/replayed/json"])
def test_bench_with_wrong_timed_outputs_exits_3(cli, key):
    done = cli(key)
    assert done.rc == FAILED, done.text
    r = done.json()
    assert r["correct"] is False and r["passed"] is False
    (b,) = r["bench"]
    assert b["check_ok"] is False and "re-checked timed outputs were wrong" in b["message"]
    assert [f["level"] for f in r["flags"] if f["id"] == "timed-output-wrong"] == ["error"]


@pytest.mark.parametrize("key", ["check/segfault"])
def test_segfault_is_one_line(cli, key):
    done = cli(key)
    assert done.rc == FAILED, done.text
    line = report_error(done)
    assert line == "ERROR  the candidate could not be run: the worker process crashed with a segmentation fault (SIGSEGV)"


@pytest.mark.parametrize("key", ["check/hang"])
def test_hang_is_one_line(cli, key):
    done = cli(key)
    assert done.rc == FAILED, done.text
    line = report_error(done)
    assert "did not finish within 10 s" in line and "killed" in line


@pytest.mark.parametrize("key", ["check/hang/json"])
def test_hang_in_json(cli, key):
    done = cli(key)
    assert done.rc == FAILED, done.text
    r = done.json()
    assert r["schema"] == "kernelpilot.eval/1" and r["passed"] is False and r["correct"] is False
    assert "did not finish within 10 s" in r["error"] and r["cases"] == []


@pytest.mark.parametrize("key,words", [
    ("check/import_error", "fused_softmax_ext"),
    ("check/wrong_entry", "defines no 'softmax'"),
    ("check/syntax_error", "syntax error at line 4"),
])
def test_candidate_that_cannot_be_loaded_says_why_in_one_line(cli, key, words):
    done = cli(key)
    assert done.rc == FAILED, done.text
    line = report_error(done)
    assert line.startswith("ERROR  the candidate could not be run") and words in line, line


# ---------------------------------------------------------------- usage errors: exit 2


@pytest.mark.parametrize("key,words", [
    ("usage/missing_candidate_file", "no_such_candidate.py: no such candidate file."),
    ("usage/unknown_case", "no case named rows=1; cases: "),
    ("usage/no_such_problem", "no_such_problem: no such problem"),
])
def test_usage_errors_are_one_line(cli, key, words):
    done = cli(key)
    assert done.rc == USAGE, done.text
    assert words in one_error_line(done)


@pytest.mark.parametrize("key,words", [
    ("usage/no_candidate_option", "Missing option '--candidate' / '-c'"),
    ("usage/unknown_device", "Invalid value for '--device'"),
    ("usage/seeds_not_a_number", "Invalid value for '--seeds'"),
])
def test_bad_options_are_reported_by_click(cli, key, words):
    done = cli(key)
    assert done.rc == USAGE, done.text
    no_traceback(done)
    assert f"error: {words}" in done.err and len(done.err.splitlines()) == 1 and done.out == ""


@pytest.mark.skipif(has_gpu(), reason="a CUDA GPU is present: bench runs on it")
@pytest.mark.parametrize("key", ["usage/bench_without_gpu"])
def test_bench_without_a_gpu_asks_for_device_cpu(cli, key):
    done = cli(key)
    assert done.rc == USAGE, done.text
    line = one_error_line(done)
    assert "no CUDA GPU here" in line and "--device cpu" in line


# ---------------------------------------------------------------- malformed problems: exit 1


@pytest.mark.parametrize("key,words", [
    ("problem/bad_toml", "bad_toml/problem.toml: not valid TOML"),
    ("problem/no_reference", "reference names reference.py, which is not in"),
    ("problem/no_cases", "needs at least one [[cases]] or [[case_grid]] table"),
    ("problem/kb_no_inputs", "not a KernelBench problem: it defines no get_inputs, get_init_inputs"),
])
def test_malformed_problem_is_one_line(cli, key, words):
    done = cli(key)
    assert done.rc == PROBLEM, done.text
    assert words in one_error_line(done)


# The problem's own code fails only in a worker (the parent never imports it): still a problem error, not a
# failed candidate.
@pytest.mark.parametrize("key,words", [
    ("problem/wrong_function", "defines no 'soft_max'"),
    ("problem/reference_syntax", "syntax error at line"),
])
def test_problem_code_errors_are_problem_errors(cli, key, words):
    done = cli(key)
    assert done.rc == PROBLEM, done.text
    assert words in one_error_line(done)
