"""One place for output: results to stdout (human text or JSON), progress, messages and hints to stderr.

``Output`` is what a command renders through: ``human`` (text; progress lines and colour only on a terminal),
``json`` (the result as JSON on stdout, progress as JSON lines on stderr) or ``quiet`` (nothing but errors)."""

from __future__ import annotations

import json
import os
import sys
from typing import Any, Callable

import click

from kernelpilot.evaluate.progress import describe

__all__ = ["Output", "emit_json", "echo", "warn", "table"]

_STYLES = {"bad": {"fg": "red", "bold": True}, "good": {"fg": "green"}, "warn": {"fg": "yellow"},
           "info": {"fg": "cyan"}, "dim": {"dim": True}}


class Output:
    """How a command shows its result and its progress."""

    def __init__(self, mode: str = "human") -> None:
        self.mode = mode
        self.colour = mode == "human" and _colour(sys.stdout)
        self.live = mode == "json" or (mode == "human" and sys.stderr.isatty())

    @classmethod
    def from_flags(cls, *, as_json: bool = False, quiet: bool = False) -> Output:
        return cls("json" if as_json else "quiet" if quiet else "human")

    def result(self, result: Any, render: Callable[..., str]) -> None:
        """The result: JSON (its ``to_json``), or ``render(result, paint)`` as text, or nothing when quiet."""
        if self.mode == "json":
            emit_json(result.to_json() if hasattr(result, "to_json") else result)
        elif self.mode == "human":
            echo(render(result, self.paint))

    def paint(self, text: str, kind: str) -> str:
        """``text`` in the colour of ``kind`` (bad, good, warn, info, dim) on a terminal; as it is elsewhere."""
        return click.style(text, **_STYLES[kind]) if self.colour and kind in _STYLES else text

    def progress(self, event: dict[str, Any]) -> None:
        """A progress event: a JSON line on stderr (``--json``), a short line on a terminal, else nothing."""
        if not self.live:
            return
        if self.mode == "json":
            click.echo(json.dumps(event, default=str), err=True)
            return
        line = describe(event)
        if line:
            click.echo(click.style(line, dim=True) if _colour(sys.stderr) else line, err=True)


def _colour(stream) -> bool:
    return stream.isatty() and not os.environ.get("NO_COLOR") and os.environ.get("TERM") != "dumb"


def emit_json(obj: Any) -> None:
    """Print ``obj`` as JSON on stdout: the only thing printed to stdout in --json mode."""
    click.echo(json.dumps(obj, indent=2, sort_keys=False, default=_default))


def _default(o: Any):
    if hasattr(o, "to_json"):
        return o.to_json()
    if isinstance(o, (set, frozenset)):
        return sorted(o)
    raise TypeError(f"not JSON serializable: {type(o).__name__}")


def echo(text: str = "") -> None:
    click.echo(text)


def warn(text: str) -> None:
    click.echo(text, err=True)


def table(rows: list[list[Any]], headers: list[str] | None = None, *, indent: int = 0) -> str:
    """A plain aligned text table (no colours, so it pipes and tests cleanly)."""
    cells = [[("" if c is None else str(c)) for c in r] for r in rows]
    if headers:
        cells.insert(0, list(headers))
    if not cells:
        return ""
    widths = [max(len(r[i]) if i < len(r) else 0 for r in cells) for i in range(max(len(r) for r in cells))]
    lines = []
    pad = " " * indent
    for n, r in enumerate(cells):
        parts = []
        for i, c in enumerate(r):
            # right-align numbers, left-align text
            parts.append(c.rjust(widths[i]) if _is_num(c) and not (headers and n == 0) else c.ljust(widths[i]))
        lines.append(pad + "  ".join(parts).rstrip())
        if headers and n == 0:
            lines.append(pad + "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _is_num(s: str) -> bool:
    try:
        float(s.replace(",", "").rstrip("%x"))
        return True
    except ValueError:
        return False
