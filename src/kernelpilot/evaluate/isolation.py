"""Run one worker job in its own process with a timeout. A crash, a hang, a CUDA error or an illegal memory
access becomes a result with the error text; the caller carries on."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

__all__ = ["run_job", "describe_exit"]

_SIGNALS = {
    signal.SIGSEGV: "crashed with a segmentation fault (SIGSEGV)",
    signal.SIGABRT: "aborted (SIGABRT)",
    signal.SIGBUS: "crashed with a bus error (SIGBUS)",
    signal.SIGFPE: "crashed with a floating-point exception (SIGFPE)",
    signal.SIGILL: "crashed with an illegal instruction (SIGILL)",
    signal.SIGKILL: "was killed (SIGKILL; out of memory?)",
}


def describe_exit(rc: int) -> str:
    if rc < 0:
        try:
            sig = signal.Signals(-rc)
        except ValueError:
            return f"died from signal {-rc}"
        return _SIGNALS.get(sig, f"died from {sig.name}")
    return f"exited with status {rc}"


def _tail(path: Path, limit: int = 3000) -> str:
    try:
        data = path.read_bytes()
    except OSError:
        return ""
    text = data[-limit:].decode("utf-8", "replace")
    # drop the profiler's own chatter
    lines = [l for l in text.splitlines() if not l.startswith(("USDT:", "STAGE:"))]
    return "\n".join(lines).strip()


def _env(device: str) -> dict[str, str]:
    env = dict(os.environ)
    src = str(Path(__file__).resolve().parents[2])   # the folder holding the kernelpilot package
    env["PYTHONPATH"] = src + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.setdefault("PYTHONUNBUFFERED", "1")
    if not device.startswith("cuda"):
        env["TRITON_INTERPRET"] = "1"   # Triton kernels run on CPU tensors through the interpreter
        env.setdefault("CUDA_VISIBLE_DEVICES", "")
    return env


def run_job(job: dict[str, Any], *, timeout: float) -> dict[str, Any]:
    """Run ``job`` (see worker.py) and return its result dict; on a crash or timeout, a dict with
    ``fatal`` (what happened) and ``stderr`` (its last lines)."""
    out = Path(job["out_dir"])
    name = job["name"]
    job_path = out / f"{name}_job.json"
    job_path.write_text(json.dumps(job))
    stdout, stderr = out / f"{name}.stdout", out / f"{name}.stderr"
    t0 = time.perf_counter()
    # A journal the worker appends to as it goes (fingerprints of the outputs it keeps): once written, a record
    # cannot be taken back by code running later in that process, unlike anything held in its memory.
    jr, jw = os.pipe()
    env = _env(job["device"])
    env["KPILOT_JOURNAL_FD"] = str(jw)
    with open(stdout, "wb") as so, open(stderr, "wb") as se:
        try:
            proc = subprocess.Popen([sys.executable, "-m", "kernelpilot.evaluate.worker", str(job_path)],
                                    stdin=subprocess.DEVNULL, stdout=so, stderr=se, env=env,
                                    start_new_session=True, pass_fds=(jw,))
        except OSError as e:
            os.close(jw)
            os.close(jr)
            return {"fatal": f"the worker process could not be started: {e.strerror or e}", "stderr": ""}
        os.close(jw)
        reader = _Drain(jr)
        try:
            rc = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            _kill(proc)
            reader.finish()
            return {"fatal": f"did not finish within {timeout:.0f} s (a hang, or a candidate far too slow); "
                             "it was killed", "stderr": _tail(stderr), "seconds": round(time.perf_counter() - t0, 2)}
    _kill(proc)   # anything it left behind in its session
    journal = reader.finish()
    result_path = out / f"{name}_result.json"
    if rc != 0 or not result_path.exists():
        return {"fatal": f"the worker process {describe_exit(rc)}", "stderr": _tail(stderr),
                "seconds": round(time.perf_counter() - t0, 2)}
    try:
        result = json.loads(result_path.read_text())
    except json.JSONDecodeError:
        return {"fatal": "the worker wrote an unreadable result", "stderr": _tail(stderr)}
    result["seconds"] = round(time.perf_counter() - t0, 2)
    result["journal"] = journal
    if result.get("fatal"):
        result["stderr"] = _tail(stderr)
    return result


class _Drain:
    """Read the journal pipe on a thread (so a full pipe never blocks the worker) into JSON records."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.chunks: list[bytes] = []
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while True:
            try:
                data = os.read(self.fd, 65536)
            except OSError:
                break
            if not data:
                break
            self.chunks.append(data)

    def finish(self) -> list[dict[str, Any]]:
        self.thread.join(timeout=5)
        try:
            os.close(self.fd)
        except OSError:
            pass
        records = []
        for line in b"".join(self.chunks).decode("utf-8", "replace").splitlines():
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(rec, dict):
                records.append(rec)
        return records


def _kill(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pass
