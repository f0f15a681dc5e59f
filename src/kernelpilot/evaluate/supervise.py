"""The supervisor: a small process between the harness and each worker, which ends the worker and everything
it started, whatever happens.

    python -m kernelpilot.evaluate.supervise [--memory-bytes N] [--writable DIR ...] [--stdout-fd FD]
                                             [--no-sandbox] -- CMD ...

It starts CMD (the worker) sandboxed (``landlock.py``: writes only beneath ``--writable``; no capabilities;
killed if the supervisor dies), forwards the harness's messages (JSON lines on its standard input) to the
worker's standard input, and watches it. A message with a ``job`` key arms the worker's deadline, the job's
``timeout`` seconds; ``{"idle": true}`` (a serving worker finished its job) disarms it. The worker and every process it started, daemons that left its session included, are
killed when:

- the worker exits (what it left running is not wanted),
- the deadline passes (``deadline``),
- the processes under it together hold more than ``--memory-bytes`` of host memory (``memory``),
- the harness asks (SIGTERM, ``stopped``), or the harness's process is gone (``parent``).

The supervisor is a child subreaper (``PR_SET_CHILD_SUBREAPER``): a process that double-forks out of the
worker's session is re-parented to it rather than to init, so it stays among its descendants and is found
and killed. From Landlock ABI 6 on the worker cannot signal the supervisor; before that, a worker that kills
its supervisor escapes this sweep, and the harness reports the supervisor's death.

It reports on its standard output, one JSON line each: ``{"sandbox": {...}}`` once the worker is started,
and ``{"exit": {"status", "reason", "rss_peak", "strays"}}`` at the end (``strays``: the command lines of processes
other than the worker that were still running and had to be killed). Stdlib only: it starts in tens of
milliseconds.
"""

from __future__ import annotations

import ctypes
import json
import os
import select
import signal
import sys
import time
from collections.abc import Callable

__all__ = ["main", "descendants", "tree_rss", "prctl", "set_dumpable", "close_fds_except"]

_PR_SET_PDEATHSIG = 1
_PR_SET_DUMPABLE = 4
_PR_SET_CHILD_SUBREAPER = 36
_PR_SET_NO_NEW_PRIVS = 38
_POLL_S = 0.02
_MEMORY_EVERY_S = 0.1
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def prctl(option: int, arg: int) -> int:
    try:
        return ctypes.CDLL(None, use_errno=True).prctl(option, arg, 0, 0, 0)
    except (OSError, AttributeError):
        return -1


def set_dumpable(on: bool) -> None:
    """Whether this process is dumpable. Not dumpable, its memory and ``/proc/PID/environ`` can be read, and the
    process traced, only by a process with CAP_SYS_PTRACE, which workers never have; it leaves no core dump."""
    prctl(_PR_SET_DUMPABLE, 1 if on else 0)


def _processes() -> dict[int, tuple[int, str]]:
    """``{pid: (ppid, state)}`` of every process this one can see."""
    out = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return out          # no procfs (not Linux): only the worker itself is ended
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                data = f.read()
        except OSError:
            continue
        # "pid (comm) state ppid ...": comm may hold spaces and parentheses; the last ")" ends it.
        rest = data[data.rfind(b")") + 2:].split()
        if len(rest) >= 2:
            out[int(name)] = (int(rest[1]), rest[0].decode())
    return out


def descendants(root: int) -> list[tuple[int, str]]:
    """``(pid, state)`` of every process below ``root``, children first."""
    children: dict[int, list[int]] = {}
    procs = _processes()
    for pid, (ppid, _) in procs.items():
        children.setdefault(ppid, []).append(pid)
    out, todo = [], list(children.get(root, []))
    while todo:
        pid = todo.pop(0)
        out.append((pid, procs[pid][1]))
        todo.extend(children.get(pid, []))
    return out


def _children(pid: int) -> list[int] | None:
    """The children of ``pid`` from its threads' ``children`` files, or None where the kernel has none."""
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []
    out: list[int] = []
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/children", "rb") as f:
                out.extend(int(x) for x in f.read().split())
        except FileNotFoundError:
            if not os.path.exists(f"/proc/{pid}/task/{tid}"):
                continue        # the thread ended meanwhile
            return None
        except (OSError, ValueError):
            continue
    return out


def tree_rss(root: int) -> int:
    """Resident host memory, in bytes, of every process below ``root``. Polled several times a second, so it
    follows the tree through each process's list of children (a few small reads) rather than reading every
    process's entry in /proc; without those lists (an old kernel), through every entry."""
    pids: list[int] = []
    todo = [root]
    while todo:
        kids = _children(todo.pop())
        if kids is None:
            pids = [pid for pid, state in descendants(root) if state != "Z"]
            break
        pids.extend(kids)
        todo.extend(kids)
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/statm", "rb") as f:
                total += int(f.read().split()[1]) * _PAGE
        except (OSError, IndexError, ValueError):
            pass
    return total


class _Caps(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


def _drop_capabilities() -> None:
    """No capabilities from here on, across exec too (no_new_privs): a worker started as root cannot read
    other processes' memory or environment, override file permissions, or trace anything."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
        header = _CapHeader(0x20080522, 0)   # _LINUX_CAPABILITY_VERSION_3
        data = (_Caps * 2)()
        libc.capset(ctypes.byref(header), data)
    except (OSError, AttributeError):
        pass                                 # not Linux: no capabilities to drop


def _start(cmd: list[str], stdin_r: int, stdout_fd: int | None, writable: list[str], sandbox: bool,
           err_w: int, run_worker: Callable[[list[str]], int] | None = None, keep_fds: tuple[int, ...] = ()) -> int:
    """Fork and start the worker: its standard input from ``stdin_r``, its standard output to ``stdout_fd`` (never
    this process's: that carries the supervisor's reports), killed when this process dies, under Landlock
    where ``sandbox``. It executes ``cmd``, or, with ``run_worker`` (a supervisor forked by the fork server,
    torch already imported), runs ``run_worker(cmd)`` in the forked process, which then holds only its standard
    streams and ``keep_fds``. A failure before that is written to ``err_w`` and exits 127."""
    pid = os.fork()
    if pid:
        return pid
    try:
        os.dup2(stdin_r, 0)
        os.dup2(stdout_fd if stdout_fd is not None else os.open(os.devnull, os.O_WRONLY), 1)
        prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        import resource

        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        if sandbox:
            from kernelpilot.evaluate.landlock import restrict_writes

            restrict_writes(writable)
        _drop_capabilities()
        for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGPIPE):
            signal.signal(s, signal.SIG_DFL)
        if run_worker is None:
            os.execvp(cmd[0], cmd)
        close_fds_except(set(keep_fds))   # err_w among them: its close tells the supervisor the start went well
    except BaseException as e:   # noqa: BLE001 - the child must never return into the supervisor's code
        try:
            os.write(err_w, f"{type(e).__name__}: {e}".encode()[:1000])
        finally:
            os._exit(127)
    code = 1
    try:
        code = run_worker(cmd)
    except BaseException:   # noqa: BLE001
        import traceback

        traceback.print_exc()
    finally:
        os._exit(code if isinstance(code, int) else 1)


def close_fds_except(keep: set[int]) -> None:
    """Close every descriptor above the standard streams but ``keep``."""
    try:
        open_fds = [int(x) for x in os.listdir("/proc/self/fd")]
    except OSError:
        open_fds = list(range(3, 1024))
    for fd in open_fds:
        if fd > 2 and fd not in keep:
            try:
                os.close(fd)
            except OSError:
                pass


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace").strip()[:200]
    except OSError:
        return ""


def _sweep(root: int, worker: int, status: dict[str, int | None]) -> dict[int, str]:
    """SIGKILL every process below ``root`` until none is left; reap them. Returns the pids killed, with their
    command lines."""
    killed: dict[int, str] = {}
    for attempt in range(200):
        _reap(worker, status)
        live = [pid for pid, state in descendants(root) if state != "Z"]
        if not live:
            break
        for pid in live:
            cmd = _cmdline(pid) if pid not in killed else killed[pid]
            try:
                os.kill(pid, signal.SIGKILL)
                killed[pid] = cmd
            except ProcessLookupError:
                pass
        time.sleep(min(0.005 * (attempt + 1), 0.05))
    _reap(worker, status)
    return killed


def _reap(worker: int, status: dict[str, int | None]) -> None:
    """Collect every exited child (orphans adopted as subreaper among them); note the worker's status."""
    while True:
        try:
            pid, wstatus = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        if pid == worker and status["status"] is None:
            status["status"] = os.waitstatus_to_exitcode(wstatus)


def _emit(record: dict) -> None:
    try:
        os.write(1, (json.dumps(record) + "\n").encode())
    except OSError:
        pass


def main(argv: list[str] | None = None, *, run_worker: Callable[[list[str]], int] | None = None,
         keep_fds: tuple[int, ...] = ()) -> int:
    """Supervise the worker ``argv`` names; ``run_worker`` and ``keep_fds`` as in ``_start`` (the fork server's
    way in)."""
    args = list(sys.argv[1:] if argv is None else argv)
    if "--" not in args:
        print("usage: python -m kernelpilot.evaluate.supervise [options] -- CMD ...", file=sys.stderr)
        return 2
    cut = args.index("--")
    opts, cmd = args[:cut], args[cut + 1:]
    memory, writable, sandbox, stdout_fd = 0, [], True, None
    i = 0
    while i < len(opts):
        if opts[i] == "--memory-bytes":
            memory = int(opts[i + 1])
            i += 2
        elif opts[i] == "--writable":
            writable.append(opts[i + 1])
            i += 2
        elif opts[i] == "--stdout-fd":
            stdout_fd = int(opts[i + 1])
            i += 2
        elif opts[i] == "--no-sandbox":
            sandbox = False
            i += 1
        else:
            print(f"supervise: unknown option {opts[i]}", file=sys.stderr)
            return 2
    parent = os.getppid()
    prctl(_PR_SET_CHILD_SUBREAPER, 1)
    stop = {"flag": False}

    def on_signal(signum, frame) -> None:
        stop["flag"] = True

    for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(s, on_signal)

    from kernelpilot.evaluate.landlock import abi_version

    abi = abi_version() if sandbox else 0
    stdin_r, stdin_w = os.pipe()
    err_r, err_w = os.pipe()
    os.set_inheritable(stdin_r, True)
    worker = _start(cmd, stdin_r, stdout_fd, writable, sandbox and abi > 0, err_w, run_worker, keep_fds)
    os.close(stdin_r)
    if stdout_fd is not None:
        os.close(stdout_fd)
    os.close(err_w)
    failure = os.read(err_r, 1000).decode(errors="replace")   # empty once exec succeeded (close-on-exec)
    os.close(err_r)
    _emit({"sandbox": {"landlock": abi if sandbox and abi > 0 and not failure else 0,
                       "error": failure or (None if abi > 0 or not sandbox else "this kernel has no Landlock"),
                       "pid": worker}})
    os.set_blocking(stdin_w, False)
    status: dict[str, int | None] = {"status": None}
    pending = b""          # messages for the worker not yet written
    line = b""             # a message from the harness not yet complete
    stdin_open = True
    deadline: float | None = None
    reason = None
    rss_peak = 0
    next_memory = 0.0
    while True:
        _reap(worker, status)
        if status["status"] is not None:
            break
        if stop["flag"]:
            reason = "stopped"
            break
        if os.getppid() != parent:
            reason = "parent"
            break
        now = time.monotonic()
        if deadline is not None and now > deadline:
            reason = "deadline"
            break
        if memory and now >= next_memory:
            next_memory = now + _MEMORY_EVERY_S
            rss = tree_rss(os.getpid())
            rss_peak = max(rss_peak, rss)
            if rss > memory:
                reason = "memory"
                break
        if stdin_open:
            try:
                ready, _, _ = select.select([0], [], [], _POLL_S)
            except InterruptedError:
                ready = []
            if ready:
                data = os.read(0, 1 << 16)
                if not data:
                    stdin_open = False
                line += data
                *complete, line = line.split(b"\n")
                for msg in complete:
                    try:
                        parsed = json.loads(msg)
                    except ValueError:
                        parsed = None
                    if isinstance(parsed, dict) and isinstance(parsed.get("job"), dict):
                        timeout = parsed["job"].get("timeout")
                        if isinstance(timeout, (int, float)) and timeout > 0:
                            deadline = time.monotonic() + float(timeout)
                    elif isinstance(parsed, dict) and parsed.get("idle"):
                        deadline = None       # a serving worker's job is done: it waits for the next
                    pending += msg + b"\n"
        else:
            time.sleep(_POLL_S)
        if pending:
            try:
                n = os.write(stdin_w, pending)
                pending = pending[n:]
            except BlockingIOError:
                pass
            except OSError:
                pending = b""      # the worker closed its input (or died): nothing more to say to it
        if not stdin_open and not pending and stdin_w >= 0:
            os.close(stdin_w)
            stdin_w = -1
    killed = _sweep(os.getpid(), worker, status)
    strays = [cmd for pid, cmd in killed.items() if pid != worker]
    _emit({"exit": {"status": status["status"], "reason": reason, "rss_peak": rss_peak, "strays": strays[:20]}})
    return 0


if __name__ == "__main__":
    sys.exit(main())
