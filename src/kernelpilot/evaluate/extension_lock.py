"""PyTorch extension builds that a killed build does not hold up.

``torch.utils.cpp_extension`` (``load``, ``load_inline``) builds an extension under a lock file in its build folder
(``FileBaton``: made with O_EXCL, removed when the build ends), and a process that finds the file waits until it is
gone. A worker killed while its candidate builds (a timeout, a crash) leaves the file behind, and every later build
of an extension of that name in the same extensions folder, which workers share between runs, would wait on it
until its own timeout: the next candidate of an optimization run that keeps the name, the same candidate run again.

``install`` makes each baton also hold an flock on its file, which the kernel drops with the process that held it.
A lock file that no process holds so, and that is older than a few seconds (the moment between making the file
and locking it), was left by a build that died: it is removed, and the build that found it goes on (or, waiting,
stops waiting). A process that builds with an unpatched PyTorch in the same folder at the same time holds no flock,
so its file would be taken for a leftover after those seconds; workers build under the extensions folder itself
(``worker_env.cache_dirs``: TORCH_EXTENSIONS_DIR), not PyTorch's folder per version inside it, so a process
outside kpilot shares their build folders only where it is pointed there.

Runs in worker processes, before any candidate code.
"""

from __future__ import annotations

import fcntl
import os
import time

__all__ = ["install", "left_behind"]

# How old an unlocked lock file must be to be a leftover: a live build locks its file right after making it.
GRACE_S = 5.0


def install() -> bool:
    """Patch PyTorch's FileBaton as above; whether PyTorch was there to patch."""
    try:
        from torch.utils import file_baton
    except ImportError:
        return False
    baton = file_baton.FileBaton
    if getattr(baton, "_kpilot_flock", False):
        return True
    baton.try_acquire, baton.wait, baton.release = _try_acquire, _wait, _release
    baton._kpilot_flock = True
    return True


def left_behind(path: str, grace_s: float = GRACE_S) -> bool:
    """Whether the lock file ``path`` was left by a build that died (no process holds its flock, and it is older
    than ``grace_s``), in which case it is removed; also True where it is gone."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return True
    try:
        made = os.fstat(fd)
        if time.time() - made.st_mtime < grace_s:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False            # a live build holds it
        try:
            if os.stat(path).st_ino == made.st_ino:
                os.unlink(path)
        except FileNotFoundError:
            pass
        return True
    finally:
        os.close(fd)


def _try_acquire(self) -> bool:
    for _ in range(2):
        try:
            fd = os.open(self.lock_file_path, os.O_CREAT | os.O_EXCL | os.O_RDWR)
        except FileExistsError:
            if left_behind(self.lock_file_path):
                continue            # removed: make it anew
            return False
        fcntl.flock(fd, fcntl.LOCK_EX)
        self.fd = fd
        return True
    return False


def _wait(self) -> None:
    while os.path.exists(self.lock_file_path) and not left_behind(self.lock_file_path):
        time.sleep(self.wait_seconds)


def _release(self) -> None:
    # The file goes before the flock does, so that no process finds it unheld and takes it for a leftover.
    try:
        os.remove(self.lock_file_path)
    except FileNotFoundError:
        pass
    if self.fd is not None:
        os.close(self.fd)
        self.fd = None
