"""Run one worker job in its own process, under a supervisor, with a timeout. A crash, a hang, a CUDA error, an
illegal memory access or a runaway allocation becomes a result with the error text; the caller carries on."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from kernelpilot.evaluate.fork_server import ForkedProcess, spawn
from kernelpilot.evaluate.jobs import Job, JobFormatError, WorkerResult
from kernelpilot.evaluate.supervise import set_dumpable
from kernelpilot.evaluate.worker_env import cache_dirs, redact, worker_env

__all__ = ["run_job", "run_boxed", "boxed_command", "Confinement", "WorkerProcess", "WorkerPool", "describe_exit",
           "default_memory_bytes", "hide_own_memory", "trusted_cache_dirs"]

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


def hide_own_memory() -> None:
    """Make this process non-dumpable (``supervise.set_dumpable``): its memory and ``/proc/PID/environ`` (API keys
    an LLM proposer holds, for one) can then be read only by a process with CAP_SYS_PTRACE, which workers never
    have. Debuggers of the same user can no longer attach to it, and it leaves no core dump."""
    set_dumpable(False)


def default_memory_bytes() -> int:
    """A worker's host-memory limit unless one is given: 80% of this machine's memory (its processes together).
    Past it the worker is killed with a clear message, before the kernel's OOM killer picks a process."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return int(int(line.split()[1]) * 1024 * 0.8)
    except (OSError, ValueError, IndexError):
        pass
    return 0


# How much a worker may write into its journal: far more than the harness writes (a few records per case, and
# its result), far less than would keep the parent busy reading.
JOURNAL_LIMIT_BYTES = 64 << 20
# How long the parent waits, past the job's own timeout, for a supervisor that has not enforced it.
_GRACE_S = 30.0


@dataclass(frozen=True)
class Confinement:
    """How a worker is boxed in: ``memory_bytes`` of host memory for it and what it starts (None: 80% of this
    machine's; 0: no limit), ``writable`` folders besides its own and the caches, and ``sandbox`` (Landlock, where
    the kernel has it; off only to debug a candidate that needs to write elsewhere)."""

    memory_bytes: int | None = None
    writable: tuple[str, ...] = ()
    sandbox: bool = True


class WorkerProcess:
    """A worker started ahead of its job, under its supervisor (``supervise.py``): it imports torch and the
    harness while the caller is busy (e.g. the reference's worker while the candidate runs), then waits for
    messages on its standard input: ``load`` (a problem to import now, before any candidate code runs) and
    ``job``. With ``warm``, on a GPU it also creates its CUDA context and starts the profiler once (jobs that
    profile a call pay that start-up, seconds, before their job arrives).

    The worker writes only beneath its own folder ``dir`` and the compilers' caches (Landlock, where the
    kernel has it), gets an environment without credentials (``worker_env.py``), and it and everything it
    starts end when its job ends, when the job's time is up, when it holds more than ``memory_bytes`` of host
    memory, or when this process dies. ``trusted`` workers (the reference, the eager and compiled baselines:
    code from the problem, never a candidate's) use compiler caches of their own, which candidates cannot write,
    so a candidate cannot plant slow kernels for a baseline to load."""

    def __init__(self, work_dir: Path, device: str, *, warm: bool = False, trusted: bool = False,
                 box: Confinement = Confinement()) -> None:
        self.dir = Path(work_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        os.chmod(self.dir, 0o700)
        self.name = self.dir.name
        self.device, self.warm, self.trusted = device, warm, trusted
        self.stdout, self.stderr = self.dir / "stdout.txt", self.dir / "stderr.txt"
        self.t0 = time.perf_counter()
        self.proc: subprocess.Popen | ForkedProcess | None = None
        self.error: str | None = None
        self.sandbox: dict[str, Any] | None = None
        self.exit: dict[str, Any] | None = None
        self._exited = threading.Event()
        # A journal the worker appends to as it goes (fingerprints of the outputs it keeps, then its result):
        # once written, a record cannot be taken back by code running later in that process.
        jr, jw = os.pipe()
        caches = trusted_cache_dirs() if trusted else cache_dirs()
        extra = {"KPILOT_JOURNAL_FD": str(jw), **{k: str(v) for k, v in caches.items()}}
        if not device.startswith("cuda"):
            extra["TRITON_INTERPRET"] = "1"   # Triton kernels run on CPU tensors through the interpreter
            extra["CUDA_VISIBLE_DEVICES"] = ""
        env = worker_env(self.dir, extra=extra)
        limit = default_memory_bytes() if box.memory_bytes is None else box.memory_bytes
        self.memory_limit = limit
        opts = ["--memory-bytes", str(int(limit))]
        for path in _writable(self.dir, caches, box.writable):
            opts += ["--writable", path]
        if not box.sandbox:
            opts.append("--no-sandbox")
        worker_args = ["--stdin", "--dir", str(self.dir)]
        if warm and device.startswith("cuda"):
            worker_args += ["--warm", device]
        out_fd = os.open(self.stdout, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with open(self.stderr, "wb") as se:
            # A CPU worker from the fork server where there is one (torch already imported: a start in
            # milliseconds); a GPU worker, or any where there is no server, from a fresh interpreter for the
            # supervisor and one for the worker (a GPU worker's start is mostly its CUDA context and warm-up).
            self.proc = (None if device.startswith("cuda") else
                         spawn("cpu", opts, worker_args, env, stderr_fd=se.fileno(), journal_fd=jw,
                               stdout_fd=out_fd))
            if self.proc is None:
                cmd = [sys.executable, "-m", "kernelpilot.evaluate.supervise", *opts, "--stdout-fd", str(out_fd),
                       "--", sys.executable, "-m", "kernelpilot.evaluate.worker", *worker_args]
                try:
                    self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=se,
                                                 env=env, start_new_session=True, pass_fds=(jw, out_fd))
                except OSError as e:
                    self.error = f"the worker process could not be started: {e.strerror or e}"
        os.close(jw)
        os.close(out_fd)
        if self.proc is None:
            os.close(jr)
            self.reader = None
        else:
            self.reader = _Drain(jr, on_flood=self.close)
            threading.Thread(target=self._read_reports, daemon=True).start()

    def _read_reports(self) -> None:
        """The supervisor's reports: the sandbox it started the worker in, and how the worker ended."""
        assert self.proc is not None and self.proc.stdout is not None
        for line in self.proc.stdout:
            rec = _record(line)
            if rec is None:
                continue
            if isinstance(rec.get("sandbox"), dict):
                self.sandbox = rec["sandbox"]
            if isinstance(rec.get("exit"), dict):
                self.exit = rec["exit"]
        self._exited.set()

    def alive(self) -> bool:
        return self.proc is not None and self.reader is not None and self.proc.poll() is None

    def ready(self) -> bool:
        """Whether it has finished starting up (imports, and with ``warm`` the CUDA context and profiler)."""
        return self.reader is not None and self.reader.ready

    def send(self, message: dict[str, Any]) -> bool:
        """Write one message to the worker (through its supervisor); False if it is gone."""
        if self.proc is None or self.proc.stdin is None or self.proc.stdin.closed:
            return False
        try:
            self.proc.stdin.write(json.dumps(message).encode() + b"\n")
            self.proc.stdin.flush()
            return True
        except (BrokenPipeError, OSError, ValueError):
            return False

    def load(self, problem: dict[str, Any], seal: dict[str, str]) -> bool:
        """Have the worker import ``problem`` now (checking its files against ``seal``), before any candidate
        code runs anywhere; its job later uses what was imported."""
        return self.send({"load": {"problem": problem, "seal": seal}})

    def run(self, job: Job, *, timeout: float) -> WorkerResult:
        """Hand the worker ``job`` and wait for its result; see ``run_job``.

        A result counts only if it is the one result record in the worker's journal and the worker then exited
        with the job's exit token: a random status it is told with the job and keeps only in a local variable,
        so a candidate that writes a result of its own and ends the process does not pass for the harness."""
        if self.proc is None or self.reader is None:
            return WorkerResult(fatal=self.error or "the worker process could not be started")
        payload = job.to_json()
        (self.dir / "job.json").write_text(json.dumps(payload))
        token = secrets.randbelow(200) + 3          # not 0-2: statuses a crash or a plain exit would give
        t_job = time.perf_counter()
        self.send({"job": {**payload, "timeout": timeout, "exit_token": token}})
        try:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
        except OSError:
            pass
        seconds = lambda: round(time.perf_counter() - t_job, 2)  # noqa: E731
        end = t_job + timeout + _GRACE_S
        t_result = None
        while not self._exited.wait(0.02):
            if t_result is None and self.reader.results:
                t_result = time.perf_counter()
            if time.perf_counter() > end:
                self.close()
                return WorkerResult(fatal=_timeout_text(timeout), stderr=self._stderr(), seconds=seconds())
        t_exit = time.perf_counter()
        self.reader.finish(wait=5.0)
        if self.reader.flooded:
            return WorkerResult(fatal="the worker wrote more than the harness's journal takes "
                                      f"({JOURNAL_LIMIT_BYTES >> 20} MiB; the candidate wrote to it); it was killed",
                                stderr=self._stderr(), seconds=seconds())
        results = self.reader.results
        status = (self.exit or {}).get("status")
        if len(results) > 1 or (results and status != token and (self.exit or {}).get("reason") is None):
            what = (f"holds {len(results)} results where the harness writes one" if len(results) > 1 else
                    "holds a result, but the worker did not end as the harness ends it")
            return WorkerResult(fatal=f"the worker's journal {what} (the candidate wrote to the harness's journal)",
                                forged=True, stderr=self._stderr(), seconds=seconds())
        if not results or status != token:
            return WorkerResult(fatal=self._death(timeout), stderr=self._stderr(), seconds=seconds())
        try:
            result = WorkerResult.from_json(results[0])
        except JobFormatError as e:
            return WorkerResult(fatal=str(e), stderr=self._stderr(), seconds=seconds())
        # From the result's arrival to the worker's end (a CUDA context's teardown, its stray processes' sweep).
        phases = {**result.phases_s, "exit": round(t_exit - (t_result or t_exit), 3)}
        return replace(result, seconds=seconds(), phases_s=phases, journal=tuple(self.reader.records),
                       sandbox=self.sandbox, stderr=self._stderr() if result.fatal else "",
                       strays=tuple(c for c in (self.exit or {}).get("strays", []) if not _library_helper(c)))

    def request(self, job: Job, *, timeout: float) -> WorkerResult:
        """Hand a serving worker (a reference's: it never runs candidate code) one more ``job`` and wait for its
        result; the worker stays up for the next. On a crash or timeout, ``fatal`` as in ``run``."""
        if self.proc is None or self.reader is None:
            return WorkerResult(fatal=self.error or "the worker process could not be started")
        before = len(self.reader.results)
        t_job = time.perf_counter()
        if not self.send({"job": {**job.to_json(), "timeout": timeout, "serve": True}}):
            self._exited.wait(5.0)
            return WorkerResult(fatal=self._death(timeout), stderr=self._stderr())
        end = t_job + timeout + _GRACE_S
        while len(self.reader.results) <= before:
            if self._exited.wait(0.01):
                self.reader.finish(wait=2.0)
                if len(self.reader.results) > before:
                    break
                return WorkerResult(fatal=self._death(timeout), stderr=self._stderr(),
                                    seconds=round(time.perf_counter() - t_job, 2))
            if time.perf_counter() > end:
                self.close()
                return WorkerResult(fatal=_timeout_text(timeout), stderr=self._stderr())
        self.send({"idle": True})
        try:
            result = WorkerResult.from_json(self.reader.results[before])
        except JobFormatError as e:
            return WorkerResult(fatal=str(e), stderr=self._stderr())
        return replace(result, seconds=round(time.perf_counter() - t_job, 2),
                       stderr=self._stderr() if result.fatal else "")

    def _death(self, timeout: float) -> str:
        """Why a worker ended without a result, from its supervisor's report."""
        ex = self.exit
        if ex is None:
            return "the worker's supervisor was killed before it could report (the candidate killed it?)"
        if ex.get("reason") == "deadline":
            return _timeout_text(timeout)
        if ex.get("reason") == "memory":
            return (f"the worker's processes held {_gib(ex.get('rss_peak') or 0)} of host memory, over its limit "
                    f"of {_gib(self.memory_limit)}; it was killed")
        status = ex.get("status")
        return f"the worker process {describe_exit(status if isinstance(status, int) else -9)}"

    def _stderr(self) -> str:
        return redact(_tail(self.stderr))

    def close(self) -> None:
        """End the worker and everything it started (its supervisor sweeps them); does not wait."""
        if self.proc is not None and self.proc.poll() is None:
            try:
                self.proc.send_signal(signal.SIGTERM)
            except (ProcessLookupError, OSError):
                pass
            threading.Thread(target=_reap, args=(self.proc,), daemon=True).start()

    def wait_closed(self, timeout: float = 10.0) -> bool:
        """Wait until the worker and everything it started have ended; False if not within ``timeout``."""
        if self.proc is None:
            return True
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return False
        return True


# Processes libraries start for themselves and keep for the life of the process (torch.compile's pool of compile
# workers): not something a candidate left behind.
_LIBRARY_HELPERS = ("torch/_inductor/compile_worker", "torch._inductor.compile_worker")


def _library_helper(cmd: str) -> bool:
    return any(h in cmd for h in _LIBRARY_HELPERS)


def _gib(n: int) -> str:
    return f"{n / (1 << 30):.1f} GiB"


def _timeout_text(timeout: float) -> str:
    return f"did not finish within {timeout:.0f} s (a hang, or a candidate far too slow); it was killed"


def trusted_cache_dirs() -> dict[str, Path]:
    """Compiler caches for trusted workers (reference, baselines), apart from the ones candidates write."""
    root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "kernelpilot" / "trusted"
    return {name: root / name.lower() for name in cache_dirs()}


def _writable(work_dir: Path, caches: dict[str, Path], extra: tuple[str, ...]) -> list[str]:
    """What a sandboxed worker may write: its folder, its caches (created here, so that they can be named in
    the ruleset), ``/dev`` (the GPU's device files, ``/dev/shm``), its own ``/proc/self`` (the CUDA driver writes
    there when it initialises; resolved in the worker's process, so no other process's entries) and what the
    caller adds."""
    paths = [work_dir]
    for name, path in caches.items():
        if name == "XDG_CACHE_HOME":
            path = path / "torch"          # torch's own kernel cache; the rest of ~/.cache stays read-only
        elif name == "TRITON_CACHE_DIR":
            path = path.parent             # Triton's home (~/.triton): its cache, dumps and overrides
        try:
            path.mkdir(parents=True, exist_ok=True)
        except OSError:
            continue
        paths.append(path)
    return [str(p) for p in paths] + ["/dev", "/proc/self"] + [str(Path(p).resolve()) for p in extra]


def profiles(job: Job) -> bool:
    """Whether the job profiles a call (probe.py), so that its worker is best started ``warm``."""
    return job.mode in ("check", "eval", "verify")


def trusted(job: Job) -> bool:
    """Whether the job runs only the problem's own code (the reference, the eager or compiled baseline)."""
    return job.role in ("reference", "baseline")


def run_job(job: Job, *, timeout: float, pool: WorkerPool | None = None, work_dir: Path | None = None,
            box: Confinement = Confinement()) -> tuple[WorkerResult, WorkerProcess]:
    """Run ``job`` (see worker.py) in a new worker (one of ``pool``'s, already started, where given; else one
    started in ``work_dir``); returns its result (on a crash or timeout, one with ``fatal``, what happened, and
    ``stderr``) and the worker, which has ended with everything it started."""
    worker = (pool.take(job.device, warm=profiles(job), trusted=trusted(job)) if pool is not None
              else WorkerProcess(work_dir or Path(tempfile.mkdtemp(prefix="kpilot-worker-")), job.device,
                                 warm=profiles(job), trusted=trusted(job), box=box))
    return worker.run(job, timeout=timeout), worker


class WorkerPool:
    """Worker processes started ahead of the jobs that will need them. ``take`` hands out a started worker
    and starts its replacement, so a caller that evaluates candidate after candidate (the optimization loop,
    an agent's server) finds the interpreter, torch, the CUDA context and the profiler already up while
    every job still gets a process of its own. Use as a context manager, or call ``close``."""

    def __init__(self, spares: int = 2, *, refill: bool = True, box: Confinement = Confinement(),
                 problems: int = 2) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="kpilot-workers-"))
        os.chmod(self.dir, 0o700)
        self.spares = max(1, spares)     # kept ready per kind (a check needs two: candidate and reference)
        self.refill = refill             # start a replacement for each worker taken
        self.box = box
        self.idle: dict[tuple[str, bool, bool], list[WorkerProcess]] = {}
        self.taken: list[WorkerProcess] = []
        self.n = 0
        # Per problem (its content and seal): a reference worker that serves every candidate and keeps the
        # expected outputs, the secret seeds those were made from, and the baselines' timings.
        self.references: dict[tuple[str, str], WorkerProcess] = {}
        self.seeds: dict[tuple[str, str], list[int]] = {}
        self.baselines: dict[tuple[str, str], dict[str, Any]] = {}
        # Problems served at once (each reference worker holds a GPU context and up to a quarter of the device's
        # memory in kept outputs): past this, the one used longest ago is let go with all that is kept for it.
        self.problems = max(1, problems)

    def _start(self, device: str, warm: bool, trusted: bool) -> WorkerProcess:
        self.n += 1
        return WorkerProcess(self.dir / f"w{self.n:04d}", device, warm=warm, trusted=trusted, box=self.box)

    def prestart(self, device: str, *, warm: bool = True, trusted: bool = False) -> None:
        """Start workers of this kind now, up to ``spares``."""
        ready = self.idle.setdefault((device, warm, trusted), [])
        ready[:] = [w for w in ready if w.alive()]
        while len(ready) < self.spares:
            ready.append(self._start(device, warm, trusted))

    def take(self, device: str, *, warm: bool, trusted: bool = False) -> WorkerProcess:
        kind = (device, warm, trusted)
        ready = [w for w in self.idle.get(kind, []) if w.alive()]
        worker = ready.pop(0) if ready else self._start(device, warm, trusted)
        self.idle[kind] = ready
        if self.refill:
            self.prestart(device, warm=warm, trusted=trusted)
        self.taken = [w for w in self.taken if w.alive()] + [worker]
        return worker

    def reference(self, key: str, device: str, problem: dict[str, Any], seal: dict[str, str]) -> WorkerProcess:
        """The serving reference worker for the problem ``key`` on ``device``: the one already up, else a new one
        that imports the problem now."""
        worker = self.references.pop((key, device), None)
        if worker is None or not worker.alive():
            self.n += 1
            worker = WorkerProcess(self.dir / f"r{self.n:04d}", device, warm=True, trusted=True, box=self.box)
            worker.load(problem, seal)
        self.references[(key, device)] = worker          # the most recently used last
        served = {k for k, _ in self.references}
        while len(served) > self.problems:
            self.forget(next(k for k, _ in self.references))
            served = {k for k, _ in self.references}
        return worker

    def forget(self, key: str) -> None:
        """Let go of everything kept for problem ``key``: its reference workers, its seeds, its baselines."""
        for k in [k for k in self.references if k[0] == key]:
            self.references.pop(k).close()
        for k in [k for k in self.seeds if k[0] == key]:
            del self.seeds[k]
        for k in [k for k in self.baselines if k[0] == key]:
            del self.baselines[k]

    def seeds_for(self, key: str, case: str, n: int) -> list[int]:
        """The secret seeds of ``case`` for every candidate on problem ``key`` in this pool (drawn once, here in
        the parent, so the reference's outputs for them can be kept)."""
        have = self.seeds.setdefault((key, case), [])
        while len(have) < n:
            have.append(secrets.randbelow(1 << 31))
        return have[:n]

    def wait_ready(self, timeout: float = 120.0) -> bool:
        """Wait until every idle worker has started up; False if some had not within ``timeout`` seconds."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if all(w.ready() or not w.alive() for ws in self.idle.values() for w in ws):
                return True
            time.sleep(0.05)
        return False

    def close(self) -> None:
        workers = [w for ws in self.idle.values() for w in ws] + self.taken + list(self.references.values())
        for w in workers:
            w.close()
        for w in workers:
            w.wait_closed(10.0)
        self.idle.clear()
        self.taken.clear()
        self.references.clear()
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> WorkerPool:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class _Drain:
    """Read the journal pipe on a thread (so a full pipe never blocks the worker) into JSON records, the result
    records apart (``results``). ``ready``: the worker has started up (its first record). Past
    ``JOURNAL_LIMIT_BYTES`` it stops reading, marks ``flooded`` and calls ``on_flood`` (which ends the worker)."""

    def __init__(self, fd: int, *, on_flood=None) -> None:
        self.fd = fd
        self.records: list[dict[str, Any]] = []
        self.results: list[dict[str, Any]] = []
        self.ready = False
        self.flooded = False
        self.on_flood = on_flood
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        pending = b""
        total = 0
        try:
            while True:
                try:
                    data = os.read(self.fd, 1 << 20)
                except OSError:
                    break
                if not data:
                    break
                total += len(data)
                if total > JOURNAL_LIMIT_BYTES:
                    self.flooded = True
                    if self.on_flood is not None:
                        self.on_flood()
                    break
                self.ready = True    # the worker's first record is written once it has started up
                *lines, pending = (pending + data).split(b"\n")
                for line in lines:
                    rec = _record(line)
                    if rec is None:
                        continue
                    if "result" in rec:
                        if isinstance(rec["result"], dict):
                            self.results.append(rec["result"])
                    else:
                        self.records.append(rec)
        finally:
            os.close(self.fd)    # here, not in finish(): a descriptor closed under a blocked read may be reused

    def finish(self, wait: float = 5.0) -> None:
        """Wait until every writer has closed the pipe (the worker and whatever it started are ended), at most
        ``wait`` seconds."""
        self.thread.join(timeout=wait)


def _record(line: bytes) -> dict[str, Any] | None:
    try:
        rec = json.loads(line.decode("utf-8", "replace"))
    except json.JSONDecodeError:
        return None
    return rec if isinstance(rec, dict) else None


def _reap(proc: subprocess.Popen | ForkedProcess) -> None:
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        pass


def boxed_command(cmd: list[str], work_dir: Path, *, box: Confinement = Confinement(),
                  gpu: bool = True) -> tuple[list[str], dict[str, str]]:
    """``cmd`` as the box a candidate's worker gets would run it: the command line that starts it under its
    supervisor (writes confined to ``work_dir``, the compilers' caches and the device files; a memory limit; what
    it starts ended with it) and the environment to start that with (the allow-listed variables only: no
    credentials; the GPUs hidden unless ``gpu``). A caller may put a profiler in front of the command line."""
    work_dir.mkdir(parents=True, exist_ok=True)
    caches = cache_dirs()
    extra = {k: str(v) for k, v in caches.items()}
    if not gpu:
        extra["CUDA_VISIBLE_DEVICES"] = ""
    env = worker_env(work_dir, extra=extra)
    limit = default_memory_bytes() if box.memory_bytes is None else box.memory_bytes
    opts = ["--memory-bytes", str(int(limit))]
    for path in _writable(work_dir, caches, box.writable):
        opts += ["--writable", path]
    if not box.sandbox:
        opts.append("--no-sandbox")
    return [sys.executable, "-m", "kernelpilot.evaluate.supervise", *opts, "--", *cmd], env


def run_boxed(cmd: list[str], work_dir: Path, *, timeout: float, box: Confinement = Confinement()) -> tuple[int, str]:
    """Run ``cmd`` (a command that runs untrusted code without a GPU: an offline compile that imports a
    candidate's Triton file) in the box a candidate's worker gets: its writes confined to ``work_dir`` and the
    compilers' caches, an environment without credentials, a memory limit, no GPU, and a time limit after which
    it and everything it started are killed. Returns its exit status (-1: killed at the time limit) and the end
    of its standard error; -2: the memory limit)."""
    work_dir = Path(work_dir)
    boxed, env = boxed_command(cmd, work_dir, box=box, gpu=False)
    stderr, reports = work_dir / "stderr.txt", work_dir / "supervisor.jsonl"
    with open(stderr, "wb") as se, open(reports, "wb") as so:
        proc = subprocess.Popen(boxed, stdin=subprocess.DEVNULL, stdout=so, stderr=se, env=env, cwd=work_dir,
                                start_new_session=True)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.terminate()              # the supervisor ends what it started
            try:
                proc.wait(timeout=_GRACE_S)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            return -1, _tail(stderr)
    # The supervisor's last report says how the command ended (it writes nothing else to its output).
    exit_ = next((r["exit"] for r in map(_record, reversed(reports.read_bytes().splitlines()))
                  if r and isinstance(r.get("exit"), dict)), {})
    if exit_.get("reason") == "memory":
        return -2, _tail(stderr)
    status = exit_.get("status")
    return (status if isinstance(status, int) else 1), _tail(stderr)
