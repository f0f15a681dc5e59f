"""Workers forked from the fork server (evaluate/fork_server.py): each is a supervisor and a worker forked from one
process that imported torch once, and holds what a freshly started one would: its own temporary folder, the
worker's environment and nothing of the server's (no socket, no journal variable); without the server
(KPILOT_FORK_SERVER=0) workers start as fresh interpreters and evaluate the same; the server ends with the harness."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import EXAMPLES, ROOT, require_module

require_module("torch")
require_module("triton")

ROW = EXAMPLES / "problems" / "row_softmax"
SMALL = "rows=64,cols=128,dtype=float32"
SRC = str(ROOT / "src")

# A correct candidate that prints, when imported, what its process holds.
PROBE = '''
import ctypes, json, os, tempfile
import torch

def _comm(pid):
    with open(f"/proc/{pid}/comm") as f:
        return f.read().strip()

def _ppid(pid):
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])

_fds = {}
for fd in os.listdir("/proc/self/fd"):
    try:
        _fds[fd] = os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        pass
_sup = _ppid(os.getpid())
print("KPILOT-PROBE " + json.dumps({
    "tmp": tempfile.gettempdir(),
    "journal_var": "KPILOT_JOURNAL_FD" in os.environ,
    "secret": os.environ.get("KPILOT_PROBE_TOKEN"),
    "sockets": [t for t in _fds.values() if t.startswith("socket:")],
    "names": [_comm(os.getpid()), _comm(_sup), _comm(_ppid(_sup))],
    "dumpable": ctypes.CDLL(None).prctl(3, 0, 0, 0, 0),
}), flush=True)

def softmax(x):
    return torch.softmax(x, dim=-1)
'''


def _probe(tmp_path: Path, env: dict[str, str]) -> tuple[dict, dict]:
    """Check the probe candidate in a harness process of its own; what the candidate printed, and the result."""
    cand = tmp_path / "probe.py"
    cand.write_text(PROBE)
    keep = tmp_path / "keep"
    code = ("import json; from pathlib import Path; from kernelpilot.evaluate.runner import check, EvalOptions; "
            f"r = check({str(ROW)!r}, {str(cand)!r}, EvalOptions(device='cpu', seeds=1, cases=[{SMALL!r}], "
            f"keep=Path({str(keep)!r}))); print(json.dumps({{'correct': r.correct, 'error': r.error}}))")
    p = subprocess.run([sys.executable, "-c", code], env={**env, "PYTHONPATH": SRC}, capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0, p.stderr
    lines = [line for f in keep.rglob("stdout.txt") for line in f.read_text().splitlines()
             if line.startswith("KPILOT-PROBE ")]
    assert len(lines) == 1, lines
    return json.loads(lines[0].removeprefix("KPILOT-PROBE ")), json.loads(p.stdout.strip().splitlines()[-1])


def test_a_forked_worker_holds_what_a_fresh_one_would(tmp_path):
    seen, result = _probe(tmp_path, {**os.environ, "KPILOT_PROBE_TOKEN": "kp-probe-secret-0123456789"})
    assert result == {"correct": True, "error": None}
    assert seen["names"] == ["kpilot-worker", "kpilot-superv", "kpilot-server"]   # forked, not executed
    assert Path(seen["tmp"]).is_relative_to(tmp_path / "keep")       # its own folder, not the server's
    assert seen["journal_var"] is False and seen["secret"] is None
    assert seen["sockets"] == []                                     # nothing of the server's socket
    assert seen["dumpable"] == 1                                     # as an executed worker is


def test_without_the_fork_server_workers_start_fresh_and_evaluate_the_same(tmp_path):
    seen, result = _probe(tmp_path, {**os.environ, "KPILOT_FORK_SERVER": "0"})
    assert result == {"correct": True, "error": None}
    assert "kpilot-server" not in seen["names"] and "kpilot-worker" not in seen["names"]
    assert Path(seen["tmp"]).is_relative_to(tmp_path / "keep")
    assert seen["journal_var"] is False and seen["sockets"] == []


def _children_named(pid: int, name: str) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            comm = Path(f"/proc/{entry}/comm").read_text().strip()
        except OSError:
            continue
        if comm == name and int(stat.rsplit(")", 1)[1].split()[1]) == pid:
            out.append(int(entry))
    return out


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.parametrize("how", ["exit", "sigkill"])
def test_the_server_ends_with_the_harness(how):
    # The harness checks a candidate, then waits for its standard input to close, and exits (or is killed).
    code = ("import sys; from kernelpilot.evaluate.runner import check, EvalOptions; "
            f"check({str(ROW)!r}, {str(ROW / 'candidates' / 'triton_softmax.py')!r}, "
            f"EvalOptions(device='cpu', seeds=1, cases=[{SMALL!r}])); print('checked', flush=True); sys.stdin.read()")
    harness = subprocess.Popen([sys.executable, "-c", code], env={**os.environ, "PYTHONPATH": SRC},
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert harness.stdout.readline().strip() == "checked"
        servers = _children_named(harness.pid, "kpilot-server")
        assert len(servers) == 1
        if how == "sigkill":
            harness.send_signal(signal.SIGKILL)
        else:
            harness.stdin.close()
        harness.wait(timeout=60)
    finally:
        harness.kill()
        harness.wait()
    end = time.monotonic() + 15
    while any(_alive(pid) for pid in servers) and time.monotonic() < end:
        time.sleep(0.1)
    assert not any(_alive(pid) for pid in servers)
