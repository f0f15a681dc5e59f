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

__all__ = ["run_job", "WorkerProcess", "describe_exit"]

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


class WorkerProcess:
    """A worker started ahead of its job: it imports torch and the harness while the caller is busy (e.g. the
    reference's worker while the candidate runs), then waits for the job on its standard input. With
    ``warm``, on a GPU it also creates its CUDA context and starts the profiler once (jobs that profile a
    call pay that start-up, seconds, before their job arrives)."""

    def __init__(self, out_dir: Path, name: str, device: str, *, warm: bool = False) -> None:
        self.out = Path(out_dir)
        self.name = name
        self.stdout, self.stderr = self.out / f"{name}.stdout", self.out / f"{name}.stderr"
        self.t0 = time.perf_counter()
        self.proc: subprocess.Popen | None = None
        self.error: str | None = None
        # A journal the worker appends to as it goes (fingerprints of the outputs it keeps): once written, a
        # record cannot be taken back by code running later in that process, unlike anything in its memory.
        jr, jw = os.pipe()
        env = _env(device)
        env["KPILOT_JOURNAL_FD"] = str(jw)
        with open(self.stdout, "wb") as so, open(self.stderr, "wb") as se:
            try:
                cmd = [sys.executable, "-m", "kernelpilot.evaluate.worker", "--stdin"]
                if warm and device.startswith("cuda"):
                    cmd += ["--warm", device]
                self.proc = subprocess.Popen(cmd,
                                             stdin=subprocess.PIPE, stdout=so, stderr=se, env=env,
                                             start_new_session=True, pass_fds=(jw,))
            except OSError as e:
                self.error = f"the worker process could not be started: {e.strerror or e}"
        os.close(jw)
        if self.proc is None:
            os.close(jr)
            self.reader = None
        else:
            self.reader = _Drain(jr)

    def run(self, job: dict[str, Any], *, timeout: float) -> dict[str, Any]:
        """Hand the worker ``job`` and wait for its result (see ``run_job``)."""
        if self.proc is None or self.reader is None:
            return {"fatal": self.error or "the worker process could not be started", "stderr": ""}
        job = {**job, "name": self.name}
        (self.out / f"{self.name}_job.json").write_text(json.dumps(job))
        try:
            assert self.proc.stdin is not None
            self.proc.stdin.write(json.dumps(job).encode())
            self.proc.stdin.close()
        except (BrokenPipeError, OSError):
            pass   # it died before reading: reported below from its exit status
        t_job = time.perf_counter()
        try:
            rc = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.close()
            return {"fatal": f"did not finish within {timeout:.0f} s (a hang, or a candidate far too slow); "
                             "it was killed", "stderr": _tail(self.stderr),
                    "seconds": round(time.perf_counter() - t_job, 2)}
        _kill(self.proc)   # anything it left behind in its session
        journal = self.reader.finish()
        result_path = self.out / f"{self.name}_result.json"
        if rc != 0 or not result_path.exists():
            return {"fatal": f"the worker process {describe_exit(rc)}", "stderr": _tail(self.stderr),
                    "seconds": round(time.perf_counter() - t_job, 2)}
        try:
            result = json.loads(result_path.read_text())
        except json.JSONDecodeError:
            return {"fatal": "the worker wrote an unreadable result", "stderr": _tail(self.stderr)}
        result["seconds"] = round(time.perf_counter() - t_job, 2)
        result["journal"] = journal
        if result.get("fatal"):
            result["stderr"] = _tail(self.stderr)
        return result

    def close(self) -> None:
        """Stop a worker that will not be given a job (or whose job is over)."""
        if self.proc is not None:
            _kill(self.proc)
        if self.reader is not None:
            self.reader.finish()
            self.reader = None


def run_job(job: dict[str, Any], *, timeout: float) -> dict[str, Any]:
    """Run ``job`` (see worker.py) in a new process and return its result dict; on a crash or timeout, a
    dict with ``fatal`` (what happened) and ``stderr`` (its last lines)."""
    profiles = job.get("mode") in ("check", "eval", "verify")   # these jobs profile one call (probe.py)
    return WorkerProcess(Path(job["out_dir"]), job["name"], job["device"], warm=profiles).run(job, timeout=timeout)


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
