"""Run one worker job in its own process with a timeout. A crash, a hang, a CUDA error or an illegal memory
access becomes a result with the error text; the caller carries on."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from kernelpilot.toolchain.run import kernelpilot_env

__all__ = ["run_job", "WorkerProcess", "WorkerPool", "describe_exit"]

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
    env = kernelpilot_env()
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

    def __init__(self, log_dir: Path, name: str, device: str, *, warm: bool = False) -> None:
        self.name = name
        self.device, self.warm = device, warm
        self.stdout, self.stderr = Path(log_dir) / f"{name}.stdout", Path(log_dir) / f"{name}.stderr"
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

    def alive(self) -> bool:
        return self.proc is not None and self.reader is not None and self.proc.poll() is None

    def ready(self) -> bool:
        """Whether it has finished starting up (imports, and with ``warm`` the CUDA context and profiler)."""
        return self.reader is not None and self.reader.ready

    def run(self, job: dict[str, Any], *, timeout: float) -> dict[str, Any]:
        """Hand the worker ``job`` and wait for its result (see ``run_job``). The result is read from
        ``OUT_DIR/NAME_result.json`` (the job's ``out_dir`` and ``name``)."""
        if self.proc is None or self.reader is None:
            return {"fatal": self.error or "the worker process could not be started", "stderr": ""}
        out = Path(job["out_dir"])
        (out / f"{job['name']}_job.json").write_text(json.dumps(job))
        try:
            assert self.proc.stdin is not None
            self.proc.stdin.write(json.dumps(job).encode())
            self.proc.stdin.close()
        except (BrokenPipeError, OSError):
            pass   # it died before reading: reported below from its exit status
        t_job = time.perf_counter()
        # Finished when the worker says its result is written (its process may take a while more to tear
        # down a CUDA context: not waited for), or when the process ends.
        end = t_job + timeout
        while not self.reader.done.wait(0.02) and self.proc.poll() is None:
            if time.perf_counter() > end:
                self.close()
                return {"fatal": f"did not finish within {timeout:.0f} s (a hang, or a candidate far too slow); "
                                 "it was killed", "stderr": _tail(self.stderr),
                        "seconds": round(time.perf_counter() - t_job, 2)}
        rc = 0 if self.reader.done.is_set() else self.proc.poll()
        _kill(self.proc)   # anything it left behind in its session
        journal = self.reader.finish()
        result_path = out / f"{job['name']}_result.json"
        if self.reader.done.is_set() and not result_path.exists():
            return {"fatal": "the worker's journal said the result was written, but there is none (the candidate "
                             "wrote to the harness's journal)", "stderr": _tail(self.stderr),
                    "seconds": round(time.perf_counter() - t_job, 2)}
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
        self.reader = None   # its thread reads to the end and closes the pipe; nothing waits for that


def profiles(job: dict[str, Any]) -> bool:
    """Whether the job profiles a call (probe.py), so that its worker is best started ``warm``."""
    return job.get("mode") in ("check", "eval", "verify")


def run_job(job: dict[str, Any], *, timeout: float, pool: WorkerPool | None = None) -> dict[str, Any]:
    """Run ``job`` (see worker.py) in a new process (one of ``pool``'s, already started, where given) and
    return its result dict; on a crash or timeout, a dict with ``fatal`` (what happened) and ``stderr``."""
    warm = profiles(job)
    worker = (pool.take(job["device"], warm=warm) if pool is not None
              else WorkerProcess(Path(job["out_dir"]), job["name"], job["device"], warm=warm))
    return worker.run(job, timeout=timeout)


class WorkerPool:
    """Worker processes started ahead of the jobs that will need them. ``take`` hands out a started worker
    and starts its replacement, so a caller that evaluates candidate after candidate (the optimization loop,
    an agent's server) finds the interpreter, torch, the CUDA context and the profiler already up while
    every job still gets a process of its own. Use as a context manager, or call ``close``."""

    def __init__(self, spares: int = 2, *, refill: bool = True) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="kpilot-workers-"))
        os.chmod(self.dir, 0o700)
        self.spares = max(1, spares)     # kept ready per kind (a check needs two: candidate and reference)
        self.refill = refill             # start a replacement for each worker taken
        self.idle: dict[tuple[str, bool], list[WorkerProcess]] = {}
        self.n = 0

    def _start(self, device: str, warm: bool) -> WorkerProcess:
        self.n += 1
        return WorkerProcess(self.dir, f"w{self.n:04d}", device, warm=warm)

    def prestart(self, device: str, *, warm: bool = True) -> None:
        """Start workers of this kind now, up to ``spares``."""
        ready = self.idle.setdefault((device, warm), [])
        ready[:] = [w for w in ready if w.alive()]
        while len(ready) < self.spares:
            ready.append(self._start(device, warm))

    def take(self, device: str, *, warm: bool) -> WorkerProcess:
        ready = [w for w in self.idle.get((device, warm), []) if w.alive()]
        worker = ready.pop(0) if ready else self._start(device, warm)
        self.idle[(device, warm)] = ready
        if self.refill:
            self.prestart(device, warm=warm)
        return worker

    def wait_ready(self, timeout: float = 120.0) -> bool:
        """Wait until every idle worker has started up; False if some had not within ``timeout`` seconds."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if all(w.ready() or not w.alive() for ws in self.idle.values() for w in ws):
                return True
            time.sleep(0.05)
        return False

    def close(self) -> None:
        for ws in self.idle.values():
            for w in ws:
                w.close()
        self.idle.clear()
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> WorkerPool:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class _Drain:
    """Read the journal pipe on a thread (so a full pipe never blocks the worker) into JSON records. ``ready``:
    the worker has started up (its first record); ``done``: its result is written (``{"done": true}``)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.records: list[dict[str, Any]] = []
        self.ready = False
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        pending = b""
        try:
            while True:
                try:
                    data = os.read(self.fd, 65536)
                except OSError:
                    break
                if not data:
                    break
                self.ready = True    # the worker's first record is written once it has started up
                *lines, pending = (pending + data).split(b"\n")
                for line in lines:
                    rec = _record(line)
                    if rec is not None:
                        self.records.append(rec)
                        if rec.get("done") is True:
                            self.done.set()
        finally:
            os.close(self.fd)    # here, not in finish(): a descriptor closed under a blocked read may be reused

    def finish(self) -> list[dict[str, Any]]:
        """The records so far; once the result is written, what follows (the process ending) is not waited for."""
        if not self.done.is_set():
            self.thread.join(timeout=5)
        return list(self.records)


def _record(line: bytes) -> dict[str, Any] | None:
    try:
        rec = json.loads(line.decode("utf-8", "replace"))
    except json.JSONDecodeError:
        return None
    return rec if isinstance(rec, dict) else None


def _kill(proc: subprocess.Popen) -> None:
    """SIGKILL the worker's whole session and reap it on a thread: a process with a CUDA context can take a
    second to end, which no result waits on."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    threading.Thread(target=_reap, args=(proc,), daemon=True).start()


def _reap(proc: subprocess.Popen) -> None:
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pass
