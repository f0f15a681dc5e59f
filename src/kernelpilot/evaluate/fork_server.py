"""A fork server for workers: one process per harness process and kind of worker (``isolation.WorkerProcess`` uses
it for CPU workers) that imports torch, Triton and the worker's modules once, then forks each worker's supervisor
on request. Importing them costs seconds of CPU; a fork costs milliseconds, so a worker is ready almost at once,
for a cold ``kpilot eval`` as for the hundredth candidate of a search.

    python -m kernelpilot.evaluate.fork_server FD        (started by ``spawn``, never by hand)

The server is started in a worker's environment (``worker_env.py``: no credentials), so nothing it holds is
secret, and it never initialises CUDA (a forked child could not use a context made before the fork; if one
exists, each request gets a fresh interpreter executed from the forked child instead). It is not dumpable: a
candidate running as the same user cannot trace it to plant code in the workers forked after it, trusted ones
(the reference's) among them.

Each request carries the supervisor's options, the worker's arguments, the environment and working folder,
and five descriptors (SCM_RIGHTS): the supervisor's standard input, its report pipe, its standard error, the
worker's journal and its standard output. The server forks; the child starts a new session, takes those
descriptors and closes every other, replaces its environment, and runs ``supervise.main`` as ``python -m
kernelpilot.evaluate.supervise`` would, except that the worker is forked from it and runs ``worker.main`` in
place of an exec. The reply is a pidfd of the child, through which the harness signals and waits for it
(``ForkedProcess``, which acts as the ``subprocess.Popen`` it replaces).

The server ends when the harness's end of its socket closes (the harness exited, or was killed); each
supervisor then finds itself re-parented and ends its worker, as it does when the harness dies. Where Linux or
Python lacks pidfds or descriptor passing, or ``KPILOT_FORK_SERVER=0``, ``spawn`` returns None and the caller
starts a fresh interpreter instead.
"""

from __future__ import annotations

import atexit
import ctypes
import json
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections import deque
from pathlib import Path
from typing import Any

__all__ = ["spawn", "ForkedProcess", "available", "serve"]

_PR_SET_NAME = 15
_MAX_MESSAGE = 1 << 20
_FDS = ("stdin", "reports", "stderr", "journal", "stdout")


def available() -> bool:
    """Whether workers can be forked from a server here (Linux with pidfds and descriptor passing), and it is
    not turned off with ``KPILOT_FORK_SERVER=0``."""
    return (sys.platform.startswith("linux") and hasattr(os, "pidfd_open") and hasattr(signal, "pidfd_send_signal")
            and hasattr(socket, "send_fds") and os.environ.get("KPILOT_FORK_SERVER", "1") != "0")


class ForkedProcess:
    """A supervisor forked by the server, as the harness sees it: what ``subprocess.Popen`` offers the harness
    (``stdin``, ``stdout``, ``poll``, ``wait``, ``send_signal``), through a pidfd, since the process is the
    server's child, not this one's. The pidfd arrives with the server's reply, shortly after the request: a
    signal sent before then is delivered when it arrives. ``returncode`` is 0 once the process has ended (its
    exit status goes to the server; the supervisor reports what matters on its report pipe)."""

    def __init__(self, stdin_w: int, reports_r: int) -> None:
        self.stdin = os.fdopen(stdin_w, "wb")
        self.stdout = os.fdopen(reports_r, "rb")
        self.pid: int | None = None
        self.returncode: int | None = None
        self._pidfd: int | None = None
        self._arrived = threading.Event()
        self._lock = threading.Lock()
        self._pending_signal: int | None = None

    def _arrive(self, pid: int | None, pidfd: int | None) -> None:
        """The server's reply: the child's pid and pidfd, or (None, None) if it could not fork one."""
        with self._lock:
            self.pid, self._pidfd = pid, pidfd
            if pidfd is None:
                self.returncode = 127
            elif self._pending_signal is not None:
                self._signal(self._pending_signal)
            self._arrived.set()

    def _signal(self, sig: int) -> None:
        try:
            signal.pidfd_send_signal(self._pidfd, sig)
        except (ProcessLookupError, OSError):
            pass

    def _ended(self, timeout: float) -> bool:
        if self.returncode is not None:
            return True
        if self._pidfd is None:
            return False
        waiter = select.poll()            # not select(): a pidfd may be numbered past FD_SETSIZE in a busy process
        waiter.register(self._pidfd, select.POLLIN)
        ready = waiter.poll(max(0, int(timeout * 1000)))
        if ready:
            self.returncode = 0
        return bool(ready)

    def __del__(self) -> None:
        # Closed only here: another thread may be waiting on it until then.
        if self._pidfd is not None:
            try:
                os.close(self._pidfd)
            except OSError:
                pass

    def poll(self) -> int | None:
        if not self._arrived.is_set():
            return None
        self._ended(0.0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        end = None if timeout is None else time.monotonic() + timeout
        if not self._arrived.wait(timeout):
            raise subprocess.TimeoutExpired("supervisor", timeout or 0)
        while not self._ended(1.0 if end is None else min(1.0, end - time.monotonic())):
            if end is not None and time.monotonic() >= end:
                raise subprocess.TimeoutExpired("supervisor", timeout or 0)
        return self.returncode or 0

    def send_signal(self, sig: int) -> None:
        with self._lock:
            if not self._arrived.is_set():
                self._pending_signal = sig
            elif self.returncode is None and self._pidfd is not None:
                self._signal(sig)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


class _Server:
    """This process's side of a running fork server: its socket, and the requests not yet answered (the server
    answers in order)."""

    def __init__(self, env: dict[str, str], work_dir: Path) -> None:
        self.dir = work_dir
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.sock = ours
        self.owner = os.getpid()
        self.pending: deque[ForkedProcess] = deque()
        self.lock = threading.Lock()
        self.alive = True
        with open(work_dir / "stderr.txt", "wb") as err:
            cmd = [sys.executable, "-m", "kernelpilot.evaluate.fork_server", str(theirs.fileno())]
            self.proc = subprocess.Popen(cmd,
                                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err, env=env,
                                         pass_fds=(theirs.fileno(),), start_new_session=True)
        theirs.close()
        threading.Thread(target=self._replies, name="kpilot-fork-server", daemon=True).start()

    def _replies(self) -> None:
        while True:
            try:
                msg, fds, _, _ = socket.recv_fds(self.sock, 4096, 1)
            except OSError:
                msg, fds = b"", []
            if not msg:
                break
            try:
                pid = json.loads(msg).get("pid")
            except (ValueError, AttributeError):
                pid = None
            with self.lock:
                handle = self.pending.popleft() if self.pending else None
            if handle is None:
                for fd in fds:
                    os.close(fd)
                continue
            handle._arrive(pid if fds else None, fds[0] if fds else None)
        with self.lock:
            self.alive = False
            waiting, self.pending = list(self.pending), deque()
        for handle in waiting:
            handle._arrive(None, None)

    def request(self, message: dict[str, Any], fds: list[int], handle: ForkedProcess) -> bool:
        data = json.dumps(message).encode()
        with self.lock:
            if not self.alive:
                return False
            try:
                socket.send_fds(self.sock, [data], fds)
            except OSError:
                self.alive = False
                return False
            self.pending.append(handle)
        return True

    def close(self, *, wait: bool = True) -> None:
        """End the server (it exits once its socket is closed), waiting for it unless ``wait`` is False (at this
        process's exit: it ends by itself)."""
        try:
            # shutdown, not only close: the reply thread's pending receive holds the socket open past a close.
            self.sock.shutdown(socket.SHUT_RDWR)
            self.sock.close()
        except OSError:
            pass
        if wait:
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        shutil.rmtree(self.dir, ignore_errors=True)


# One server per kind of worker ("cpu", "cuda"): what a server imports depends on the environment it starts in
# (Triton's interpreter, on for CPU workers, is decided when Triton is imported).
_servers: dict[str, _Server] = {}
_servers_lock = threading.Lock()


def _get_server(kind: str, env: dict[str, str]) -> _Server | None:
    with _servers_lock:
        server = _servers.get(kind)
        if server is not None and (server.owner != os.getpid() or not server.alive):
            if server.owner == os.getpid():
                server.close()
            server = None
        if server is None:
            work_dir = Path(tempfile.mkdtemp(prefix="kpilot-fork-server-"))
            os.chmod(work_dir, 0o700)
            server_env = {**env, "TMPDIR": str(work_dir)}
            try:
                server = _Server(server_env, work_dir)
            except OSError:
                shutil.rmtree(work_dir, ignore_errors=True)
                return None
            _servers[kind] = server
        return server


@atexit.register
def _close_servers() -> None:
    for server in _servers.values():
        if server.owner == os.getpid():
            server.close(wait=False)


def spawn(kind: str, supervise_args: list[str], worker_args: list[str], env: dict[str, str], *, stderr_fd: int,
          journal_fd: int, stdout_fd: int) -> ForkedProcess | None:
    """Start a supervisor and its worker from the fork server for ``kind`` of worker (started on first use, in
    ``env`` but for its own folder; every worker of a kind has the same environment but for its folder, its caches
    and its journal). ``supervise_args`` are the supervisor's options (without ``--stdout-fd``), ``worker_args``
    the worker's (``--stdin --dir ...``), ``env`` the worker's whole environment (``KPILOT_JOURNAL_FD`` aside: the
    journal is ``journal_fd``). None where there is no fork server (see ``available``): start ``python -m
    kernelpilot.evaluate.supervise`` instead."""
    if not available():
        return None
    env = {k: v for k, v in env.items() if k != "KPILOT_JOURNAL_FD"}
    server = _get_server(kind, env)
    if server is None:
        return None
    stdin_r, stdin_w = os.pipe()
    reports_r, reports_w = os.pipe()
    handle = ForkedProcess(stdin_w, reports_r)
    message = {"supervise": supervise_args, "worker": worker_args, "cwd": os.getcwd(), "env": env}
    sent = server.request(message, [stdin_r, reports_w, stderr_fd, journal_fd, stdout_fd], handle)
    os.close(stdin_r)
    os.close(reports_w)
    if not sent:
        handle.stdin.close()
        handle.stdout.close()
        return None
    return handle


# ----------------------------------------------------------------------------------------------------------------
# The server's side.


def _name(name: bytes) -> None:
    """This process's name as ``ps -o comm`` and ``top`` show it (its command line stays the server's)."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_NAME, ctypes.c_char_p(name[:15]), 0, 0, 0)
    except (OSError, AttributeError):
        pass


def _preimport() -> str | None:
    """Import what every worker imports, Triton among them (in the server's environment: a CPU worker's turns its
    interpreter on), and hash Triton's libraries once, before any fork; the reason not to serve forked workers,
    if any."""
    try:
        import torch

        import kernelpilot.evaluate.compare  # noqa: F401
        import kernelpilot.evaluate.formats  # noqa: F401
        import kernelpilot.evaluate.supervise  # noqa: F401
        import kernelpilot.evaluate.worker  # noqa: F401
    except ImportError:
        return None          # each worker meets the same failure and reports it, as a fresh interpreter would
    try:
        from triton.runtime.cache import triton_key

        triton_key()         # cached for every worker forked after (each would otherwise read its libraries)
    except Exception:
        pass                 # no Triton, or a broken one: the workers say so when they need it
    if torch.cuda.is_initialized():
        return "CUDA was initialised before the fork"
    return None


def _run_worker(journal: int, args: list[str]) -> int:
    """The worker, in the process the supervisor forked: what ``python -m kernelpilot.evaluate.worker ARGS``
    runs, with the journal bound to ``journal``."""
    from kernelpilot.evaluate import worker, worker_base

    _name(b"kpilot-worker")
    os.set_inheritable(journal, False)
    worker_base._JOURNAL_FD = journal
    sys.argv = [worker.__file__, *args]
    return worker.main(args)


def _child(sock: socket.socket, request: dict[str, Any], fds: list[int], *, fresh: bool) -> None:
    """In the forked child: become the supervisor the request asks for; with ``fresh``, by executing a new
    interpreter for it and its worker (the server found it unsafe to fork workers). Never returns."""
    code = 127
    try:
        from kernelpilot.evaluate.supervise import close_fds_except, main, set_dumpable

        sock.close()
        os.setsid()
        named = dict(zip(_FDS, fds))
        os.dup2(named["stdin"], 0)
        os.dup2(named["reports"], 1)
        os.dup2(named["stderr"], 2)
        journal, stdout = named["journal"], named["stdout"]
        close_fds_except({journal, stdout})
        set_dumpable(True)                # as a freshly executed supervisor is
        _name(b"kpilot-superv")
        for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(s, signal.SIG_DFL)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        tempfile.tempdir = None           # found again from the worker's TMPDIR
        if sys.path and sys.path[0] != request["cwd"]:
            sys.path[0] = request["cwd"]  # as ``python -m`` would have set it
        args = [*request["supervise"], "--stdout-fd", str(stdout), "--"]
        if fresh:
            os.set_inheritable(journal, True)
            os.set_inheritable(stdout, True)
            os.environ["KPILOT_JOURNAL_FD"] = str(journal)
            python = sys.executable
            os.execv(python, [python, "-m", "kernelpilot.evaluate.supervise", *args,
                              python, "-m", "kernelpilot.evaluate.worker", *request["worker"]])
        args += request["worker"]
        code = main(args, run_worker=lambda worker_args: _run_worker(journal, worker_args), keep_fds=(journal,))
    except BaseException:   # noqa: BLE001 - the child must never return into the server's loop
        try:
            os.write(2, traceback.format_exc().encode()[-3000:])
        except OSError:
            pass
    finally:
        os._exit(code)


def _reap() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def serve(fd: int) -> int:
    """The server's loop on socket ``fd``: a fork per request, until the harness closes its end."""
    from kernelpilot.evaluate.supervise import set_dumpable

    sock = socket.socket(fileno=fd)
    set_dumpable(False)
    _name(b"kpilot-server")
    refusal = _preimport()
    while True:
        ready, _, _ = select.select([sock], [], [], 0.5)
        _reap()
        if not ready:
            continue
        try:
            msg, fds, _, _ = socket.recv_fds(sock, _MAX_MESSAGE, len(_FDS))
        except OSError:
            break
        if not msg:
            break
        try:
            request = json.loads(msg)
            ok = len(fds) == len(_FDS) and isinstance(request, dict)
        except ValueError:
            ok = False
        pid = os.fork() if ok else -1
        if pid == 0:
            _child(sock, request, fds, fresh=refusal is not None)
        for f in fds:
            os.close(f)
        reply, pidfd = {"pid": pid}, None
        if pid > 0:
            try:
                pidfd = os.pidfd_open(pid)
            except OSError:
                os.kill(pid, signal.SIGKILL)
        try:
            socket.send_fds(sock, [json.dumps(reply).encode()], [pidfd] if pidfd is not None else [])
        except OSError:
            break
        finally:
            if pidfd is not None:
                os.close(pidfd)
    return 0


if __name__ == "__main__":
    sys.exit(serve(int(sys.argv[1])))
