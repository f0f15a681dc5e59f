"""One place for output: results to stdout (human text or JSON), messages and hints to stderr."""

from __future__ import annotations

import json
from typing import Any

import click

__all__ = ["emit_json", "echo", "warn", "table"]


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
