"""Click commands made from an operation's declaration (``options.py``, ``tools/``): its arguments and options
with their help, defaults and choices, its help text from the tool's description, and ``--json`` / ``--quiet``.
The command's body gets the options instance (checked by its class) and an ``Output``."""

from __future__ import annotations

import textwrap
from typing import Any, Callable

import click

from kernelpilot.cli.output import Output
from kernelpilot.errors import UsageError
from kernelpilot.options import OptionError, Param, offered

__all__ = ["command", "click_params", "options_from_cli"]

_PY = {"integer": click.INT, "number": click.FLOAT}


def _flag(p: Param) -> str:
    return p.flag or "--" + p.name.replace("_", "-")


def _default_text(p: Param) -> str:
    if p.required or p.default in (None, (), {}, False) or p.py is bool:
        return ""
    return f" [default: {p.default}]"


def click_params(cls: type, operation: str | None = None) -> list[click.Parameter]:
    """The click arguments and options of ``cls`` for ``operation``: every default stays the class's own (click
    passes None for what was not given), so the class alone decides."""
    out: list[click.Parameter] = []
    # A subclass's own options (the candidate, the problem) come first in the help, then those it inherits.
    depth: dict[str, int] = {}
    for i, klass in enumerate(cls.__mro__):
        for name in getattr(klass, "__annotations__", {}):
            depth.setdefault(name, i)
    # Arguments keep their declared order (base class first), as they are positional.
    for p in sorted(offered(cls, "cli", operation), key=lambda p: 99 if p.argument else depth.get(p.name, 0)):
        if p.argument:
            many = p.kind == "array"
            many = many or p.words
            out.append(click.Argument([p.name], nargs=-1 if many else 1, required=p.required,
                                      type=click.UNPROCESSED if many and not p.path else _PY.get(p.kind),
                                      metavar=p.name.upper() + ("..." if many else "")))
            continue
        decls = [_flag(p)] + ([p.short] if p.short else [])
        kw: dict[str, Any] = {"help": p.help + (" Repeatable." if p.kind in ("array", "object") else "")
                              + _default_text(p), "required": p.required}
        if p.py is bool:
            if p.default is True or p.optional:
                decls = [f"{_flag(p)}/--no-{_flag(p)[2:]}"] + ([p.short] if p.short else [])
                kw["default"] = None     # click's own default for an on/off pair is False, which would win
            else:
                kw["is_flag"] = True
                kw["default"] = False
        elif p.kind in ("array", "object"):
            kw["multiple"] = True
        if p.choices:
            kw["type"] = click.Choice(list(p.choices))
        elif p.py in (int, float):
            kw["type"] = p.py
        if p.metavar or p.path:
            kw["metavar"] = p.metavar or "PATH"
        out.append(click.Option([*decls, p.name], **kw))
    return out


def options_from_cli(cls: type, operation: str | None, values: dict[str, Any]):
    """An instance of ``cls`` from click's values; a bad value is a usage error naming the flag."""
    args: dict[str, Any] = {}
    by_name = {p.name: p for p in offered(cls, "cli", operation)}
    for name, value in values.items():
        p = by_name[name]
        if value is None or (value == () and p.kind in ("array", "object")):
            continue                 # not given: the class's own default stands
        if p.kind == "object":
            value = _pairs(value, _flag(p))
        elif p.words:
            value = " ".join(value)
        args[name] = value
    try:
        return cls(**args)
    except OptionError as e:
        p = by_name.get(e.field.split("[")[0].split(".")[0])
        where = (p.name.upper() if p.argument else _flag(p)) if p is not None else None
        raise UsageError(f"{where} {e.problem}" if where else e.problem) from None


def _pairs(values: tuple[str, ...], flag: str) -> dict[str, str]:
    out = {}
    for v in values:
        name, eq, val = v.partition("=")
        if not name or not name.replace("_", "a").isalnum() or name[0].isdigit():
            raise UsageError(f"{flag} {v!r}: expected NAME=VALUE or NAME.")
        out[name] = val if eq else "1"
    return out


def _help(description: str, cls: type, operation: str, examples: str) -> str:
    args = [p for p in offered(cls, "cli", operation) if p.argument]
    text = description
    if args:
        width = max(len(p.name) for p in args) + 5
        rows = []
        for p in args:
            lines = textwrap.wrap(p.help, 76 - width)
            rows.append(f"  {(p.name.upper() + ('...' if p.kind == 'array' else '')):<{width}}{lines[0]}")
            rows += [" " * (width + 2) + line for line in lines[1:]]
        text += "\n\n\b\nArguments:\n" + "\n".join(rows)
    if examples:
        text += "\n\n\b\nExamples:\n" + "\n".join("  " + line.strip() for line in examples.strip().splitlines())
    return text


def command(tool: str, *, name: str | None = None, examples: str = "", extra: tuple[click.Parameter, ...] = (),
            context_settings: dict[str, Any] | None = None, help: str | None = None,
            options: type | None = None, omit: tuple[str, ...] = ()) -> Callable:
    """A click command for the registered tool ``tool``: ``fn(opts, out, **extra)`` is its body, ``extra`` the
    command's own rendering options (not part of the operation). With ``options`` (and ``help``), a command of
    the CLI's own that is no tool (a server), made from that options class the same way. ``omit``: the tool's
    options this command does not take (a list command beside its show command: given, they are usage errors,
    not silently ignored)."""
    from types import SimpleNamespace

    from kernelpilot.tools import REGISTRY

    spec = REGISTRY[tool] if options is None else SimpleNamespace(options=options, description=help or "")

    def deco(fn: Callable) -> click.Command:
        def callback(**kw: Any) -> Any:
            out = Output.from_flags(as_json=kw.pop("as_json"), quiet=kw.pop("quiet"))
            own = {p.name: kw.pop(p.name) for p in extra}
            return fn(options_from_cli(spec.options, tool, kw), out, **own)

        params = [*(c for c in click_params(spec.options, tool) if c.name not in omit), *extra,
                  click.Option(["--json", "as_json"], is_flag=True, help="Machine-readable output on stdout; "
                               "progress as JSON lines on stderr."),
                  click.Option(["--quiet", "-q"], is_flag=True, help="Print nothing but errors; the exit status "
                               "says how it went.")]
        about = " ".join((help or spec.description).split())
        return click.Command(name or tool, callback=callback, params=params,
                             help=_help(about, spec.options, tool, examples),
                             short_help=textwrap.shorten(about.split(". ")[0].split(": ")[0].split(" (")[0], 60,
                                                         placeholder="..."),
                             context_settings=context_settings)

    return deco
