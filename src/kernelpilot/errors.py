"""Errors a user can cause, each with a message that says what to do.

Every exception kernelpilot raises on purpose derives from ``KernelpilotError``; the CLI prints its
message (one line, plus the compiler's diagnostics where there are some) and exits non-zero.
Anything else reaching the CLI is a bug and shows a traceback only with ``KPILOT_DEBUG=1``.

    KernelpilotError                 message, hint
    ├── UsageError                   bad arguments: a missing option, a malformed -D, an unknown kernel
    ├── UnknownArchError             an arch name not in the data file (lists the known ones)
    ├── ToolNotFoundError            a compiler or disassembler is missing (names the package)
    ├── ToolError                    an external tool failed: command, exit code, stderr
    │   └── CompileError             the kernel did not compile: the compiler's diagnostics
    └── InputFormatError             a file that is not what it claims (corrupted binary, bad report)

All of them pickle with their fields intact, so they cross the process boundary of an isolated run.
"""

from __future__ import annotations

import shlex

__all__ = [
    "error_json",
    "shorten",
    "KernelpilotError",
    "UsageError",
    "UnknownArchError",
    "ToolNotFoundError",
    "ToolError",
    "CompileError",
    "InputFormatError",
]


class KernelpilotError(Exception):
    """Base of kernelpilot's own errors: ``message`` is one sentence, ``hint`` the next step."""

    exit_code = 1

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __reduce__(self):
        return (_rebuild, (type(self), self.__dict__.copy()))

    def __str__(self) -> str:
        return self.message if not self.hint else f"{self.message} {self.hint}"

    def details(self) -> str | None:
        """Longer text to print after the one-line message (compiler diagnostics), or None."""
        return None


def shorten(text: str, limit: int) -> str:
    """``text`` in at most about ``limit`` characters: its start and its end, with how much was left out between.
    An error's end matters as much as its start: an exception raised in a subprocess (torch.compile's compile
    workers) carries the subprocess's traceback in its message, and the cause is that traceback's last line."""
    if len(text) <= limit:
        return text
    head = limit // 2
    tail = limit - head
    return f"{text[:head]}\n... ({len(text) - limit} characters left out) ...\n{text[-tail:]}"


def error_json(e: KernelpilotError) -> dict:
    """An error as data: what ``--json`` prints on stdout and an MCP tool error carries, the same fields for both
    (``details``: the compiler's diagnostics, where there are some)."""
    return {"type": type(e).__name__, "message": e.message, "hint": e.hint, "details": e.details(),
            "exit_code": e.exit_code}


def _rebuild(cls, state):
    obj = cls.__new__(cls)
    Exception.__init__(obj, state.get("message", ""))
    obj.__dict__.update(state)
    return obj


class UsageError(KernelpilotError):
    """The arguments are wrong: a missing option, a malformed value, a kernel name not in the file."""

    exit_code = 2


class UnknownArchError(KernelpilotError):
    def __init__(self, name: str, known: list[str]) -> None:
        super().__init__(
            f"unknown arch {name!r}; known: {', '.join(known)}.",
            hint="Run `kpilot arch list` for the GPUs behind each name.",
        )
        self.name = name
        self.known = list(known)


class ToolNotFoundError(KernelpilotError):
    """A compiler or disassembler is not installed; ``package`` says what provides it."""

    def __init__(self, tool: str, package: str, *, searched: list[str] | None = None,
                 rejected: list[str] | None = None) -> None:
        found = f" Found, but not usable: {'; '.join(rejected)}." if rejected else ""
        super().__init__(f"{tool} not found; install {package}.{found}")
        self.tool = tool
        self.package = package
        self.searched = list(searched or [])
        self.rejected = list(rejected or [])


class ToolError(KernelpilotError):
    """An external tool exited non-zero. Carries the command to reproduce it."""

    def __init__(
        self,
        tool: str,
        command: list[str],
        returncode: int,
        stderr: str,
        *,
        message: str | None = None,
        hint: str | None = None,
    ) -> None:
        msg = message or f"{tool} failed with exit code {returncode}."
        super().__init__(msg, hint=hint)
        self.tool = tool
        self.command = list(command)
        self.returncode = returncode
        self.stderr = stderr

    @property
    def command_line(self) -> str:
        return shlex.join(self.command)

    def details(self) -> str | None:
        text = self.stderr.strip()
        lines = [text] if text else []
        lines.append(f"command: {self.command_line}")
        return "\n".join(lines)


class CompileError(ToolError):
    """The kernel source did not compile; ``stderr`` holds the compiler's diagnostics."""

    def __init__(self, tool: str, command: list[str], returncode: int, stderr: str, *, source: str = "") -> None:
        where = f" {source}" if source else ""
        super().__init__(
            tool,
            command,
            returncode,
            stderr,
            message=f"{tool} could not compile{where} (exit code {returncode}); its diagnostics follow.",
        )
        self.source = source


class InputFormatError(KernelpilotError):
    """A file is not what its name or the command says it is (corrupted binary, malformed report)."""

    def __init__(self, path: str, what: str, *, hint: str | None = None) -> None:
        super().__init__(f"{path}: {what}", hint=hint)
        self.path = path
        self.what = what
