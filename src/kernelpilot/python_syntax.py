"""Parsing Python source into a syntax tree, safely from several threads at once.

CPython 3.11 keeps the syntax-tree builder's recursion counter in state shared by the whole interpreter, so two
threads that call ``ast.parse`` at the same moment (candidates scanned while other evaluations run, problem
files read by concurrent workers) can corrupt it and fail with ``SystemError: AST constructor recursion depth
mismatch`` on source that parses fine. Every parse in kernelpilot goes through `parse`, which holds one lock for
the duration: parses are short, and the lock makes the result independent of what other threads do. A process
forked while another thread parses starts with the lock free.
"""

from __future__ import annotations

import ast
import os
import threading

__all__ = ["parse"]

_LOCK = threading.Lock()


def _new_lock_in_child() -> None:
    """A forked child gets a lock of its own: one held by another thread at the fork would never be released there."""
    global _LOCK
    _LOCK = threading.Lock()


os.register_at_fork(after_in_child=_new_lock_in_child)


def parse(source: str, filename: str = "<unknown>", mode: str = "exec") -> ast.AST:
    """``ast.parse(source, filename, mode)``, one thread at a time; raises what ``ast.parse`` raises."""
    with _LOCK:
        return ast.parse(source, filename=filename, mode=mode)
