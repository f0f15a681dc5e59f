"""`kernelpilot.python_syntax.parse` from several threads at once.

On CPython 3.11 the syntax-tree builder's recursion counter is shared by the interpreter: a garbage collection
inside one thread's ``ast.parse`` that runs Python code (a finaliser) lets another thread's parse move the counter,
and the first fails with ``SystemError: AST constructor recursion depth mismatch``. This test provokes exactly
that (cyclic garbage with finalisers, frequent collections, a tiny thread switch interval): plain ``ast.parse``
fails here within a second on 3.11; `parse` must never fail. The lock that serialises the parses must not hang a
process forked while it is held.
"""

from __future__ import annotations

import gc
import os
import sys
import threading
import time
from pathlib import Path

from kernelpilot import python_syntax
from kernelpilot.evaluate import guards
from kernelpilot.python_syntax import parse


class _Finalised:
    def __del__(self) -> None:
        total = 0
        for i in range(200):
            total += i


def test_parses_running_at_once_with_collections_between_them_all_succeed():
    source = Path(guards.__file__).read_text()
    errors: list[str] = []

    def work() -> None:
        for _ in range(100):
            for _ in range(20):
                garbage = _Finalised()
                garbage.me = garbage  # a cycle: only the collector frees it, running __del__ mid-parse
            del garbage
            try:
                parse(source)
            except SystemError as e:
                errors.append(str(e))
                return

    interval, thresholds = sys.getswitchinterval(), gc.get_threshold()
    sys.setswitchinterval(1e-6)
    gc.set_threshold(50, 1, 1)
    try:
        threads = [threading.Thread(target=work) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(interval)
        gc.set_threshold(*thresholds)
    assert errors == []


def test_parse_keeps_ast_parse_errors_and_modes():
    assert parse("1 + 2", mode="eval").body.op.__class__.__name__ == "Add"
    try:
        parse("def f(:\n", filename="bad.py")
    except SyntaxError as e:
        assert e.filename == "bad.py" and e.lineno == 1
    else:
        raise AssertionError("a syntax error must be raised")


def test_a_child_forked_while_a_parse_holds_the_lock_can_parse():
    """The lock held (as by another thread's parse) when the process forks: the child's own parse must not wait for
    it forever."""
    with python_syntax._LOCK:
        pid = os.fork()
        if pid == 0:   # the child: parse, and say by the exit code whether it could
            try:
                parse("x = 1")
                os._exit(0)
            finally:
                os._exit(1)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            assert os.waitstatus_to_exitcode(status) == 0
            return
        time.sleep(0.05)
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    raise AssertionError("the forked child's parse waited on the lock held at the fork")

