"""Run an external tool, turning failures into typed errors that carry the command to reproduce them."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

from kernelpilot.errors import CompileError, KernelpilotError, ToolError

__all__ = ["run_tool", "ToolResult", "kernelpilot_env", "compiler_warnings"]

# A compiler's warning line: clang's and gcc's "FILE:LINE:COL: warning: ...", nvcc's front end's
# "FILE(LINE): warning #NNN-D: ...", ptxas's "ptxas warning : ...".
_WARNING = re.compile(r"(?::\d+(?::\d+)?: warning: |\(\d+\): warning #?\S*: |^ptxas warning\s*: )")
_MAX_WARNINGS = 20


def kernelpilot_env() -> dict[str, str]:
    """This process's environment with this kernelpilot first on PYTHONPATH, for a child Python process
    (a worker, an offline compile, a profiled script) that must import the same package."""
    env = dict(os.environ)
    src = str(Path(__file__).resolve().parents[2])   # the folder holding the kernelpilot package
    env["PYTHONPATH"] = src + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


class ToolResult:
    __slots__ = ("command", "returncode", "stdout", "stderr")

    def __init__(self, command: list[str], returncode: int, stdout: str, stderr: str) -> None:
        self.command = command
        self.returncode = returncode
        self.stdout = stdout
        self.stderr = stderr


def run_tool(
    command: list[str | Path],
    *,
    tool: str,
    cwd: str | Path | None = None,
    timeout: float = 300.0,
    compile_of: str | None = None,
    check: bool = True,
    input: str | None = None,
    env: dict[str, str] | None = None,
) -> ToolResult:
    """Run ``command`` (in ``env``, or this process's environment); on a non-zero exit raise ``CompileError``
    (when ``compile_of`` names the source being compiled) or ``ToolError``, both carrying stderr and the command
    line."""
    cmd = [str(c) for c in command]
    try:
        proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout, input=input,
                              errors="replace", env=env)
    except FileNotFoundError as e:
        raise ToolError(tool, cmd, -1, str(e), message=f"{tool} could not be started: {e.strerror}.") from None
    except subprocess.TimeoutExpired:
        raise ToolError(tool, cmd, -1, "", message=f"{tool} did not finish within {timeout:.0f} s.") from None
    result = ToolResult(cmd, proc.returncode, proc.stdout, proc.stderr)
    if check and proc.returncode != 0:
        stderr = proc.stderr if proc.stderr.strip() else proc.stdout
        if compile_of is not None:
            raise CompileError(tool, cmd, proc.returncode, stderr, source=compile_of)
        raise ToolError(tool, cmd, proc.returncode, stderr)
    return result


def ensure_file(path: str | Path) -> Path:
    p = Path(path)
    if not p.exists():
        raise KernelpilotError(f"{p}: no such file.")
    if not p.is_file():
        raise KernelpilotError(f"{p}: not a file.")
    return p


def compiler_warnings(stderr: str) -> list[str]:
    """The warning lines a compiler wrote (at most 20, then how many more), each as "compiler warning: LINE":
    kept with the analysis, since a warning (a value converted, a comment that swallowed code) can explain ISA
    that looks wrong."""
    lines = [" ".join(line.split()) for line in stderr.splitlines() if _WARNING.search(line)]
    out = [f"compiler warning: {line}" for line in lines[:_MAX_WARNINGS]]
    if len(lines) > _MAX_WARNINGS:
        out.append(f"compiler warning: ... and {len(lines) - _MAX_WARNINGS} more")
    return out
