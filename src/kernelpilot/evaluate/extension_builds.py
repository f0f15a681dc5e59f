"""Where a candidate's PyTorch extensions are built, and builds that a killed build does not hold up.

``torch.utils.cpp_extension`` (``load``, ``load_inline``) builds an extension in a folder named for it under the
extensions folder (TORCH_EXTENSIONS_DIR), which workers share between runs. ``load_inline`` writes its sources
there before it takes the folder's lock, so two candidates that name their extensions alike (as the candidates of
one optimization run do) and build at once write over each other's sources, and one of them can be built from, and
run, the other's code; one after the other, each rebuilds over the other's build. ``use_folder_for`` gives each
candidate a folder of its own under the extensions folder, named by a hash of the candidate's file: the same
candidate finds its build again, two candidates never share one.

A build holds a lock file in its folder (``FileBaton``: made with O_EXCL, removed when the build ends), and a
process that finds the file waits until it is gone. A worker killed while its candidate builds (a timeout, a crash)
leaves the file behind, and every later build of that extension in that folder would wait on it until its own
timeout. ``guard_locks`` makes each baton also hold an flock on its file, which the kernel drops with the process
that held it. A lock file that no process holds so, and that is older than a few seconds (the moment between making
the file and locking it), was left by a build that died: it is removed, and the build that found it goes on (or,
waiting, stops waiting). A process that builds with an unpatched PyTorch in the same folder at the same time holds
no flock, so its file would be taken for a leftover after those seconds; workers build under folders of their own
(above), which a process outside kpilot shares only where it is pointed there.

Runs in worker processes, before any candidate code.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import time
from pathlib import Path

__all__ = ["candidate_folder", "guard_locks", "left_behind", "use_folder_for"]

# How old an unlocked lock file must be to be a leftover: a live build locks its file right after making it.
GRACE_S = 5.0


def candidate_folder(base: Path, candidate: Path) -> Path:
    """The candidate's own extensions folder under ``base``: named by a hash of the candidate's file (OSError where
    it cannot be read)."""
    return Path(base) / f"candidate_{hashlib.sha256(Path(candidate).read_bytes()).hexdigest()[:16]}"


# The extensions folder this process started with: a worker that runs job after job points TORCH_EXTENSIONS_DIR at
# each one's folder under it, never under the last one's.
_base: str | None = None


def use_folder_for(candidate: Path) -> Path | None:
    """Point TORCH_EXTENSIONS_DIR, for this process, at the candidate's own folder under the extensions folder the
    process started with (candidate_folder) and return that folder; None where the variable is not set or the file
    cannot be read."""
    global _base
    if _base is None:
        _base = os.environ.get("TORCH_EXTENSIONS_DIR") or None
    base = _base
    if not base:
        return None
    try:
        folder = candidate_folder(Path(base), candidate)
    except OSError:
        return None
    os.environ["TORCH_EXTENSIONS_DIR"] = str(folder)
    return folder


def guard_locks() -> bool:
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
