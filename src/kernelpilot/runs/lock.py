"""An exclusive lock on one optimization run, held by the process that drives it, so that two processes never
drive the same run (two ``kpilot optimize --resume`` of one run would evaluate configurations twice and overwrite
each other's best step). An advisory ``flock`` on ``run-ID.lock`` beside the store: the kernel releases it when
that process ends, however it ends, so a killed run can be resumed at once."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from kernelpilot.errors import KernelpilotError

__all__ = ["RunLock", "RunBusyError"]


class RunBusyError(KernelpilotError):
    """Another process is driving the run."""


class RunLock:
    """``with RunLock(store_path, run_id):`` holds the run's lock, or raises ``RunBusyError`` at once."""

    def __init__(self, store_path: Path, run_id: int) -> None:
        self.path = Path(store_path).resolve().parent / f"run-{run_id}.lock"
        self.run_id = run_id
        self.fd: int | None = None

    def acquire(self) -> RunLock:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 32).decode(errors="replace").strip() or "?"
            os.close(fd)
            raise RunBusyError(f"run {self.run_id} is being driven by another process (pid {holder}); wait for it to "
                               "end, or stop it, then resume.") from None
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode())
        self.fd = fd
        return self

    def release(self) -> None:
        if self.fd is not None:
            os.ftruncate(self.fd, 0)
            fcntl.flock(self.fd, fcntl.LOCK_UN)
            os.close(self.fd)
            self.fd = None

    def __enter__(self) -> RunLock:
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()
