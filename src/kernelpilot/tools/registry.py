"""The registry of operations an agent or a person can call: each with a description written for a model, its
options class (``options.py``: the JSON schema of its arguments and the CLI's flags both come from it), and a
result that is plain JSON. The CLI (both modes), the LLM proposer and the MCP server all go through ``run`` or
``call``.

    >>> from kernelpilot.tools import call, REGISTRY
    >>> call("isa_analyze", {"sources": ["examples/kernels/wave_argmax_dpp.hip"], "arch": "gfx942"})
    >>> [t.to_anthropic() for t in REGISTRY.values()]       # or t.to_openai()

Bad arguments raise ``ToolArgumentError`` (a UsageError: one line saying which argument and why); an operation's
own failure raises the KernelpilotError it met. Neither is ever a crash of the caller.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from kernelpilot.errors import UsageError
from kernelpilot.loop.llm_client import ToolSpec
from kernelpilot.options import OptionError, from_json, json_schema, params

__all__ = ["Tool", "ToolContext", "ToolArgumentError", "REGISTRY", "register", "call", "run", "jsonable", "within"]


class ToolArgumentError(UsageError):
    """A tool was called with arguments its schema does not allow."""


@dataclass
class ToolContext:
    """What a tool may touch: candidate files are read and written only under ``workspace``; with ``confined`` (a
    client of the MCP server, a model in the optimization loop; not the CLI, whose user can run anything) every
    path argument too, and compiler flags only of the allowed forms (``tools/isa.py``). ``evaluating`` is held by
    every check, bench and eval: they run one at a time (timings on a shared GPU would disturb each other, and a
    pool's reference worker serves one job at a time). ``on_event`` receives progress events of long work."""

    workspace: Path = field(default_factory=Path.cwd)
    pool: Any = None                      # an evaluate.isolation.WorkerPool to take workers from
    confined: bool = False
    also: tuple[Path, ...] = ()           # with confined: what outside the workspace may be named (a run's problem)
    evaluating: Any = field(default_factory=threading.Lock)
    on_event: Callable[[dict[str, Any]], None] | None = None


@dataclass(frozen=True)
class Tool(ToolSpec):
    """An operation: ``fn(options, ctx)`` returns its result (an object with ``to_json`` or plain JSON).
    ``options`` is its options class, from which ``parameters`` is made; ``output`` is the JSON schema of its
    result."""

    fn: Callable[[Any, ToolContext], Any] = None      # type: ignore[assignment]
    options: type = None                              # type: ignore[assignment]
    output: dict[str, Any] | None = None
    agents: bool = True                               # offered to MCP clients and models (else the CLI's only)


REGISTRY: dict[str, Tool] = {}


def register(name: str, description: str, options: type, output: dict[str, Any], *, agents: bool = True):
    """Register ``fn(options, ctx)`` as the tool ``name``: its schema from ``options`` (the fields offered to
    tools for this operation), its result described by ``output``. ``agents=False``: an operation that reaches
    beyond the workspace with the user's own rights (adding a host to run on): the CLI's, never a confined
    caller's."""

    def wrap(fn: Callable[[Any, ToolContext], Any]):
        REGISTRY[name] = Tool(name, " ".join(description.split()), json_schema(options, name), fn=fn,
                              options=options, output=output, agents=agents)
        return fn

    return wrap


def run(name: str, opts: Any, ctx: ToolContext | None = None) -> Any:
    """Run the tool ``name`` with an options instance (or JSON arguments); its result as the tool returns it."""
    ctx = ctx or ToolContext()
    tool = REGISTRY.get(name)
    if tool is None or (ctx.confined and not tool.agents):
        offered = sorted(n for n, t in REGISTRY.items() if t.agents or not ctx.confined)
        raise ToolArgumentError(f"no tool named {name!r}; tools: {', '.join(offered)}.")
    if not isinstance(opts, tool.options):
        try:
            opts = from_json(tool.options, opts, name)
        except OptionError as e:
            raise ToolArgumentError(f"{name}: {e.problem}" if e.field == "arguments" else
                                    f"{name}.{e.field} {e.problem}") from None
    if ctx.confined:
        opts = confine(opts, ctx, name)
    return tool.fn(opts, ctx)


def call(name: str, args: dict[str, Any] | None = None, ctx: ToolContext | None = None) -> dict[str, Any]:
    """Validate JSON ``args`` against the tool's schema, run it, and return its result as JSON."""
    return jsonable(run(name, dict(args or {}), ctx))


def jsonable(result: Any) -> Any:
    return result.to_json() if hasattr(result, "to_json") else result


def confine(opts: Any, ctx: ToolContext, where: str) -> Any:
    """``opts`` with every path option made absolute against the workspace; one outside it (``..``, an absolute
    path elsewhere, a symbolic link leading out), and outside what ``ctx.also`` names, is refused. A tool's caller
    (an MCP client, a model) reaches its workspace's files only."""
    changes = {}
    for p in params(type(opts)):
        value = getattr(opts, p.name)
        if not p.path or value is None:
            continue
        if isinstance(value, tuple):
            changes[p.name] = tuple(within(ctx.workspace, v, f"{where}.{p.name}[{i}]", ctx.also)
                                    for i, v in enumerate(value))
        else:
            changes[p.name] = within(ctx.workspace, value, f"{where}.{p.name}", ctx.also)
    return opts.replace(**changes) if changes else opts


def within(workspace: Path, path: str | Path, where: str, also: tuple[Path, ...] = ()) -> Path:
    """``path`` resolved against ``workspace``, if it lies inside it or inside one of ``also``."""
    root = workspace.resolve()
    p = (root / path).resolve()          # an absolute path stays itself; symbolic links are followed
    for allowed in (root, *(a.resolve() for a in also)):
        if p == allowed or allowed in p.parents:
            return p
    raise ToolArgumentError(f"{where}: {path} is outside the workspace {root}; tools reach only its files "
                            "(start the server with --workspace on the folder that holds them).")
