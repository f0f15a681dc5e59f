"""Parsing Python source into a syntax tree, safely from several threads at once.

CPython 3.11 keeps the syntax-tree builder's recursion counter in state shared by the whole interpreter, so two
threads that call ``ast.parse`` at the same moment (candidates scanned while other evaluations run, problem
files read by concurrent workers) can corrupt it and fail with ``SystemError: AST constructor recursion depth
mismatch`` on source that parses fine. Every parse in kernelpilot goes through `parse`, which holds one lock for
the duration: parses are short, and the lock makes the result independent of what other threads do.
"""

from __future__ import annotations

import ast
import threading

__all__ = ["parse"]

_LOCK = threading.Lock()


def parse(source: str, filename: str = "<unknown>", mode: str = "exec") -> ast.AST:
    """``ast.parse(source, filename, mode)``, one thread at a time; raises what ``ast.parse`` raises."""
    with _LOCK:
        return ast.parse(source, filename=filename, mode=mode)
