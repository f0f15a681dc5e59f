"""`kpilot mcp`: the tool registry (tools.py) as a Model Context Protocol server, on the official ``mcp`` SDK,
over stdio or the streamable HTTP transport (bound to 127.0.0.1 unless told otherwise).

Every tool call runs in a worker thread while the server keeps serving; a long one (check, bench, eval,
profile) reports progress every few seconds. Bad arguments and a failing tool come back as a tool error
with the message (``isError``); the server itself never stops on them.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from kernelpilot import __version__
from kernelpilot.errors import KernelpilotError

__all__ = ["build_server", "serve_stdio", "serve_http", "INSTRUCTIONS"]

INSTRUCTIONS = (
    "kernelpilot: GPU kernel optimization tools. Typical loop: arch_info for the GPU's limits; isa_analyze on the "
    "kernel (no GPU needed) for registers, occupancy and findings; profile on a GPU for the bottleneck; change the "
    "kernel (write_candidate); eval to check correctness with secret seeds and time it against baselines; "
    "isa_diff to confirm the change at the ISA level. optimize_start runs a whole search or LLM loop in the "
    "background; optimize_status and runs show its steps. Every result is JSON.")
PROGRESS_EVERY_S = 2.0


def build_server(workspace: Path | None = None, pool: Any = None):
    """The low-level MCP server over the registry; candidate files are confined to ``workspace``. With ``pool``
    (an ``evaluate.isolation.WorkerPool``), check, bench and eval take their workers from it, so an agent's
    second candidate on a problem finds the workers started, the reference's outputs kept and the baselines
    timed."""
    import anyio
    import mcp_types as types
    from mcp.server.lowlevel import Server

    from kernelpilot.tools import REGISTRY, ToolContext, call

    ctx_tools = ToolContext(workspace=(workspace or Path.cwd()).resolve(), pool=pool)

    async def list_tools(ctx, params) -> types.ListToolsResult:
        return types.ListToolsResult(tools=[types.Tool(name=t.name, description=t.description,
                                                       inputSchema=t.parameters) for t in REGISTRY.values()])

    async def call_tool(ctx, params) -> types.CallToolResult:
        name, args = params.name, dict(params.arguments or {})
        outcome: dict[str, Any] = {}

        def work() -> None:
            try:
                outcome["result"] = call(name, args, ctx_tools)
            except KernelpilotError as e:
                outcome["error"] = f"{type(e).__name__}: {e}"
            except Exception as e:            # a tool's bug is the caller's error message, not a dead server
                outcome["error"] = f"internal error in {name}: {type(e).__name__}: {e}"

        t0 = time.monotonic()
        async with anyio.create_task_group() as tg:
            done = anyio.Event()

            async def run() -> None:
                await anyio.to_thread.run_sync(work)
                done.set()

            tg.start_soon(run)
            while not done.is_set():
                with anyio.move_on_after(PROGRESS_EVERY_S):
                    await done.wait()
                if not done.is_set():
                    elapsed = time.monotonic() - t0
                    try:
                        await ctx.session.report_progress(elapsed, None, f"{name}: running for {elapsed:.0f} s")
                    except Exception:
                        pass            # progress is a courtesy: a client that cannot take it loses nothing
        if "error" in outcome:
            return types.CallToolResult(content=[types.TextContent(text=outcome["error"])], isError=True)
        text = json.dumps(outcome["result"], default=str)
        return types.CallToolResult(content=[types.TextContent(text=text)], structuredContent=outcome["result"])

    return Server("kernelpilot", version=__version__, instructions=INSTRUCTIONS, on_list_tools=list_tools,
                  on_call_tool=call_tool)


def _pool():
    """The server's worker pool: workers start with the first evaluation, not before; two problems served at once."""
    from kernelpilot.evaluate.isolation import WorkerPool

    return WorkerPool(spares=1, problems=2)


def serve_stdio(workspace: Path | None = None) -> None:
    import anyio
    from mcp.server.stdio import stdio_server

    pool = _pool()
    server = build_server(workspace, pool)

    async def main() -> None:
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())

    try:
        anyio.run(main)
    finally:
        pool.close()


def serve_http(port: int, host: str = "127.0.0.1", workspace: Path | None = None) -> None:
    import uvicorn

    pool = _pool()
    app = build_server(workspace, pool).streamable_http_app(host=host)
    try:
        uvicorn.run(app, host=host, port=port, log_level="warning")
    finally:
        pool.close()
