"""The candidate-file tools: read and write files in the workspace (and nowhere else)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kernelpilot.errors import KernelpilotError
from kernelpilot.options import Options, param
from kernelpilot.tools.registry import ToolContext, register, within
from kernelpilot.tools.shapes import shape

__all__ = ["ReadRequest", "WriteRequest"]


@dataclass(frozen=True, kw_only=True)
class ReadRequest(Options):
    path: str = param("The file, relative to the workspace.", required=True)


@dataclass(frozen=True, kw_only=True)
class WriteRequest(ReadRequest):
    text: str = param("The whole new content.", required=True)


def _inside(ctx: ToolContext, path: str) -> Path:
    return within(ctx.workspace, path, "path")      # candidate files: the workspace only, for every caller


@register("read_candidate", """Read a candidate (or any text) file in the workspace: the kernel to improve,
    or a previous version.""", ReadRequest, shape(path="string", text="string", lines="integer"))
def read_candidate(opts: ReadRequest, ctx: ToolContext) -> dict[str, Any]:
    p = _inside(ctx, opts.path)
    if not p.is_file():
        raise KernelpilotError(f"{opts.path}: no such file in the workspace.")
    text = p.read_text(errors="replace")
    return {"path": str(p.relative_to(ctx.workspace.resolve())), "text": text, "lines": text.count("\n") + 1}


@register("write_candidate", """Write a new version of a candidate file in the workspace (the whole text).
    Check it afterwards with `check` or `eval`.""", WriteRequest, shape(path="string", bytes="integer"))
def write_candidate(opts: WriteRequest, ctx: ToolContext) -> dict[str, Any]:
    p = _inside(ctx, opts.path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(opts.text)
    return {"path": str(p.relative_to(ctx.workspace.resolve())), "bytes": len(opts.text.encode())}
