"""Options of an operation, declared once.

An operation's options are a frozen data class whose fields are made with ``param``: its help text, default,
bounds, choices, whether it is a path, and how it is spelled on the command line. From that one declaration
come the JSON schema of the tool registry (hence MCP and the LLM's tools), the click options of the CLI
(``cli/spec.py``) and the Python API: constructing the class checks every value, so the three cannot disagree.

    >>> @dataclass(frozen=True, kw_only=True)
    ... class Opts(Options):
    ...     n: int | None = param("How many.", minimum=1)
    >>> Opts(n=0)
    Traceback (most recent call last):
    OptionError: n must be at least 1, not 0.

Supported field types: ``str``, ``int``, ``float``, ``bool``, ``Path`` (a string in JSON), ``tuple[str, ...]``
and ``tuple[Path, ...]`` (arrays; a list is accepted and stored as a tuple), ``dict[str, str]`` (an object of
strings; ``NAME=VALUE`` on the command line), each optionally ``| None``. A field declared without ``param`` is
runtime state (a worker pool, a callback): it is neither in the schema nor on the command line.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import types
import typing
from dataclasses import MISSING, dataclass, field
from pathlib import Path
from typing import Any

from kernelpilot.errors import UsageError

__all__ = ["Options", "Param", "OptionError", "param", "params", "json_schema", "from_json", "to_json"]

_META = "kernelpilot.param"
_JSON = {str: "string", Path: "string", int: "integer", float: "number", bool: "boolean"}


class OptionError(UsageError):
    """An option's value is not allowed. ``field`` names it (its JSON name), ``problem`` says why; the CLI names
    the flag instead, the tool registry the tool and argument."""

    def __init__(self, field_name: str, problem: str) -> None:
        super().__init__(f"{field_name} {problem}")
        self.field = field_name
        self.problem = problem


@dataclass(frozen=True)
class Param:
    """One option as declared: what the schema, the CLI and the checks need of it."""

    name: str
    help: str
    kind: str                       # JSON type: string, integer, number, boolean, array, object
    py: type                        # the element type: str, Path, int, float, bool
    optional: bool                  # None allowed
    default: Any                    # MISSING: required
    flag: str | None                # the long flag (default: --name-with-dashes); None for an argument
    short: str | None
    argument: bool                  # a positional argument on the command line
    choices: tuple[str, ...] | None
    minimum: float | None
    exclusive_minimum: float | None
    path: bool
    metavar: str | None
    surfaces: frozenset[str]        # "cli", "tool": where the option is offered
    only: frozenset[str] | None     # the operations (of those sharing the class) that take it; None: all
    words: bool                     # a string argument given as several words on the command line

    @property
    def required(self) -> bool:
        return self.default is MISSING


def param(help: str, default: Any = None, *, flag: str | None = None, short: str | None = None,
          argument: bool = False, choices: tuple[str, ...] | None = None, minimum: float | None = None,
          exclusive_minimum: float | None = None, path: bool = False, metavar: str | None = None,
          cli: bool = True, tool: bool = True, only: tuple[str, ...] | None = None, required: bool = False,
          words: bool = False) -> Any:
    """A declared option: a dataclass field carrying its metadata. Containers default to empty; ``required``
    makes the field have no default."""
    meta = {"help": " ".join(help.split()), "flag": flag, "short": short, "argument": argument, "choices": choices,
            "minimum": minimum, "exclusive_minimum": exclusive_minimum, "path": path, "metavar": metavar,
            "surfaces": frozenset(s for s, on in (("cli", cli), ("tool", tool)) if on),
            "only": frozenset(only) if only else None, "words": words}
    if required:
        return field(metadata={_META: meta})
    if isinstance(default, (list, tuple)):
        return field(default=tuple(default), metadata={_META: meta})
    if isinstance(default, dict):
        frozen = dict(default)
        return field(default_factory=lambda: dict(frozen), metadata={_META: meta})
    return field(default=default, metadata={_META: meta})


@functools.cache
def params(cls: type) -> tuple[Param, ...]:
    """The declared options of ``cls``, in declaration order."""
    hints = typing.get_type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        meta = f.metadata.get(_META)
        if meta is None:
            continue
        kind, py, optional = _kind(hints[f.name], f"{cls.__name__}.{f.name}")
        default = f.default if f.default is not MISSING else (
            f.default_factory() if f.default_factory is not MISSING else MISSING)
        if default is None and kind in ("array", "object") and not optional:
            default = () if kind == "array" else {}       # a container option is empty when not given
        out.append(Param(name=f.name, kind=kind, py=py, optional=optional, default=default, **meta))
    return tuple(out)


def _kind(hint: Any, where: str) -> tuple[str, type, bool]:
    optional = False
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        optional = len(args) < len(typing.get_args(hint))
        if len(args) != 1:
            raise TypeError(f"{where}: one type (or it and None) per option, not {hint}")
        hint = args[0]
    origin = typing.get_origin(hint)
    if origin is tuple:
        item = typing.get_args(hint)[0]
        if item not in (str, Path):
            raise TypeError(f"{where}: arrays of str or Path only, not {hint}")
        return "array", item, optional
    if origin is dict:
        if typing.get_args(hint) != (str, str):
            raise TypeError(f"{where}: dict[str, str] only, not {hint}")
        return "object", str, optional
    if hint not in _JSON:
        raise TypeError(f"{where}: unsupported option type {hint}")
    return _JSON[hint], hint, optional


def offered(cls: type, surface: str, operation: str | None = None) -> tuple[Param, ...]:
    """The options ``cls`` offers on ``surface`` ("cli" or "tool") for ``operation``."""
    return tuple(p for p in params(cls) if surface in p.surfaces
                 and (p.only is None or operation is None or operation in p.only))


def json_schema(cls: type, operation: str | None = None) -> dict[str, Any]:
    """The JSON schema (type object) of the options ``cls`` offers to tools for ``operation``."""
    props: dict[str, Any] = {}
    required = []
    for p in offered(cls, "tool", operation):
        spec: dict[str, Any]
        if p.kind == "array":
            item: dict[str, Any] = {"type": "string"}
            if p.path:
                item["format"] = "path"
            spec = {"type": "array", "items": item}
            if p.required:
                spec["minItems"] = 1
        elif p.kind == "object":
            spec = {"type": "object", "additionalProperties": {"type": "string"}}
        else:
            spec = {"type": p.kind}
            if p.path:
                spec["format"] = "path"
        if p.choices:
            spec["enum"] = list(p.choices)
        if p.minimum is not None:
            spec["minimum"] = p.minimum
        if p.exclusive_minimum is not None:
            spec["exclusiveMinimum"] = p.exclusive_minimum
        if not p.required and p.default not in (None, (), {}, False):
            spec["default"] = str(p.default) if isinstance(p.default, Path) else p.default
        spec["description"] = p.help
        props[p.name] = spec
        if p.required:
            required.append(p.name)
    return {"type": "object", "properties": props, "required": required, "additionalProperties": False}


def from_json(cls: type, args: Any, operation: str | None = None) -> Any:
    """An instance of ``cls`` from a tool's JSON arguments: unknown or missing arguments and values of the wrong
    type are an ``OptionError`` naming the argument."""
    if not isinstance(args, dict):
        raise OptionError("arguments", f"must be a JSON object, not {type(args).__name__}.")
    allowed = {p.name: p for p in offered(cls, "tool", operation)}
    extra = sorted(set(args) - set(allowed))
    if extra:
        raise OptionError("arguments", f"unknown argument(s) {', '.join(extra)}; it takes {', '.join(allowed)}.")
    missing = [n for n, p in allowed.items() if p.required and args.get(n) is None]
    if missing:
        raise OptionError("arguments", f"missing required argument(s) {', '.join(missing)}.")
    return cls(**{k: v for k, v in args.items() if v is not None})


def to_json(opts: Any) -> dict[str, Any]:
    """The declared options of an instance as JSON values (paths as strings, tuples as lists)."""
    out = {}
    for p in params(type(opts)):
        v = getattr(opts, p.name)
        out[p.name] = (str(v) if isinstance(v, Path) else [str(x) for x in v] if isinstance(v, tuple)
                       else dict(v) if isinstance(v, dict) else v)
    return out


def _article(kind: str) -> str:
    return ("an " if kind[0] in "aeiou" else "a ") + kind


def _coerce(p: Param, value: Any) -> Any:
    """``value`` checked against ``p`` and in its stored form (tuples for arrays, Path for paths)."""
    if value is None and p.kind in ("array", "object") and not p.optional:
        return () if p.kind == "array" else {}
    if value is None:
        if p.optional or not p.required and p.default is None:
            return None
        raise OptionError(p.name, "is required.")
    if p.kind == "array":
        if not isinstance(value, (list, tuple)):
            raise OptionError(p.name, f"must be an array, not {value!r}.")
        return tuple(_scalar(p, v, f"[{i}]") for i, v in enumerate(value))
    if p.kind == "object":
        if not isinstance(value, dict):
            raise OptionError(p.name, f"must be an object, not {value!r}.")
        for k, v in value.items():
            if not isinstance(k, str) or not isinstance(v, str):
                raise OptionError(f"{p.name}.{k}", f"must be a string, not {v!r}.")
        return dict(value)
    return _scalar(p, value, "")


def _scalar(p: Param, value: Any, index: str) -> Any:
    name = p.name + index
    if p.py is bool:
        ok = isinstance(value, bool)
    elif p.py is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif p.py is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    elif p.py is Path:
        ok = isinstance(value, (str, Path))
    else:
        ok = isinstance(value, str)
    if not ok:
        raise OptionError(name, f"must be {_article(p.kind if p.kind != 'array' else _JSON[p.py])}, not {value!r}.")
    if p.py is float:
        value = float(value)
        if not math.isfinite(value):
            raise OptionError(name, f"must be a finite number, not {value!r}.")
    if p.choices and value not in p.choices:
        raise OptionError(name, f"must be one of {', '.join(p.choices)}, not {value!r}.")
    if p.minimum is not None and value < p.minimum:
        raise OptionError(name, f"must be at least {p.minimum:g}, not {value!r}.")
    if p.exclusive_minimum is not None and value <= p.exclusive_minimum:
        raise OptionError(name, f"must be more than {p.exclusive_minimum:g}, not {value!r}.")
    if p.py is str and ("\x00" in value):
        raise OptionError(name, "must not contain a NUL character.")
    return Path(value) if p.py is Path else value


@dataclass(frozen=True, kw_only=True)
class Options:
    """Base of every operation's options: constructing one checks each declared field (type, bounds, choices),
    stores arrays as tuples and paths as ``Path``, then runs ``check`` for rules across fields."""

    def __post_init__(self) -> None:
        for p in params(type(self)):
            object.__setattr__(self, p.name, _coerce(p, getattr(self, p.name)))
        self.check()

    def check(self) -> None:
        """Rules across fields (one of two given, ...); raise ``OptionError``."""

    def replace(self, **changes: Any):
        return dataclasses.replace(self, **changes)

