"""Landlock (Linux 5.13+): a process takes away its own right to write outside a few folders.

A worker that runs candidate code is started under a Landlock ruleset that handles every kind of write
(writing, truncating, creating, removing, renaming or linking files and folders) and allows them only beneath
the folders it is given: its own work folder, the compilers' caches, ``/dev``. The problem's files, the
user's project, ``.kpilot/`` and everything else stay readable and cannot be changed. From ABI 6 on, the
ruleset also scopes signals and abstract Unix sockets: the candidate cannot signal (kill) its supervisor or
any other process outside its own sandbox, nor reach such processes' sockets. Landlock also keeps a sandboxed
process from tracing or reading the memory or environment (``/proc/PID/environ``) of processes outside it.

The rules apply to the calling thread and everything it starts afterwards, and cannot be lifted: applied in a
freshly forked child just before it executes the worker, they cover the whole worker. Needs no privilege.
Reading is not restricted (the interpreter, libraries and drivers are read from all over the system).

Stdlib only (the supervisor imports it before any heavy import).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys
from pathlib import Path

__all__ = ["abi_version", "restrict_writes", "LandlockError", "write_access"]

_SYS_CREATE_RULESET = 444      # the same number on every architecture Linux assigns it (asm-generic)
_SYS_ADD_RULE = 445
_SYS_RESTRICT_SELF = 446
_CREATE_RULESET_VERSION = 1
_RULE_PATH_BENEATH = 1
_PR_SET_NO_NEW_PRIVS = 38

# Filesystem access rights, by the ABI version that introduced them.
_WRITE_FILE = 1 << 1
_REMOVE_DIR = 1 << 4
_REMOVE_FILE = 1 << 5
_MAKE_CHAR = 1 << 6
_MAKE_DIR = 1 << 7
_MAKE_REG = 1 << 8
_MAKE_SOCK = 1 << 9
_MAKE_FIFO = 1 << 10
_MAKE_BLOCK = 1 << 11
_MAKE_SYM = 1 << 12
_REFER = 1 << 13          # ABI 2: linking or renaming a file into another folder
_TRUNCATE = 1 << 14       # ABI 3
_SCOPE_ABSTRACT_UNIX_SOCKET = 1 << 0   # ABI 6
_SCOPE_SIGNAL = 1 << 1                  # ABI 6


class LandlockError(OSError):
    """The ruleset could not be made or applied (the kernel lacks Landlock, or a system call failed)."""


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64), ("handled_access_net", ctypes.c_uint64),
                ("scoped", ctypes.c_uint64)]


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def _libc():
    return ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)


def abi_version() -> int:
    """The Landlock ABI this kernel offers, 0 where it has none (or is not Linux, or forbids the call)."""
    if not sys.platform.startswith("linux"):
        return 0
    try:
        libc = _libc()
        libc.syscall.restype = ctypes.c_long
        v = libc.syscall(_SYS_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(_CREATE_RULESET_VERSION))
    except (OSError, AttributeError):
        return 0
    return max(int(v), 0)


def write_access(abi: int) -> int:
    """Every write-like access right the ABI knows."""
    rights = (_WRITE_FILE | _REMOVE_DIR | _REMOVE_FILE | _MAKE_CHAR | _MAKE_DIR | _MAKE_REG | _MAKE_SOCK
              | _MAKE_FIFO | _MAKE_BLOCK | _MAKE_SYM)
    if abi >= 2:
        rights |= _REFER
    if abi >= 3:
        rights |= _TRUNCATE
    return rights


def restrict_writes(writable: list[str | Path], *, abi: int | None = None) -> int:
    """Allow this thread (and what it starts from now on) to write only beneath ``writable``; with ABI 6 or
    later, also confine its signals and abstract sockets to its own sandbox. Returns the ABI used. Paths that
    do not exist are skipped. Raises LandlockError where the kernel cannot do it."""
    abi = abi_version() if abi is None else abi
    if abi < 1:
        raise LandlockError("this kernel has no Landlock (Linux 5.13 or later, with Landlock enabled)")
    libc = _libc()
    libc.syscall.restype = ctypes.c_long
    handled = write_access(abi)
    attr = _RulesetAttr(handled_access_fs=handled, handled_access_net=0,
                        scoped=(_SCOPE_SIGNAL | _SCOPE_ABSTRACT_UNIX_SOCKET) if abi >= 6 else 0)
    size = ctypes.sizeof(_RulesetAttr) if abi >= 6 else 16 if abi >= 4 else 8
    fd = libc.syscall(_SYS_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(size), ctypes.c_uint32(0))
    if fd < 0:
        err = ctypes.get_errno()
        raise LandlockError(err, f"landlock_create_ruleset: {os.strerror(err)}")
    try:
        for path in writable:
            try:
                pfd = os.open(str(path), os.O_PATH | os.O_CLOEXEC)
            except OSError:
                continue
            try:
                # A file (not a folder) may only be given the rights that apply to a file.
                rights = handled if os.path.isdir(path) else handled & (_WRITE_FILE | _TRUNCATE)
                rule = _PathBeneathAttr(allowed_access=rights, parent_fd=pfd)
                if libc.syscall(_SYS_ADD_RULE, ctypes.c_int(fd), ctypes.c_int(_RULE_PATH_BENEATH),
                                ctypes.byref(rule), ctypes.c_uint32(0)) != 0:
                    err = ctypes.get_errno()
                    raise LandlockError(err, f"landlock_add_rule({path}): {os.strerror(err)}")
            finally:
                os.close(pfd)
        if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            err = ctypes.get_errno()
            raise LandlockError(err, f"prctl(PR_SET_NO_NEW_PRIVS): {os.strerror(err)}")
        if libc.syscall(_SYS_RESTRICT_SELF, ctypes.c_int(fd), ctypes.c_uint32(0)) != 0:
            err = ctypes.get_errno()
            raise LandlockError(err, f"landlock_restrict_self: {os.strerror(err)}")
    finally:
        os.close(fd)
    return abi
