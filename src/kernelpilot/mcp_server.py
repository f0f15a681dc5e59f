"""`kpilot mcp`: the tool registry (tools.py) as a Model Context Protocol server, on the official ``mcp`` SDK,
over stdio or the streamable HTTP transport (bound to 127.0.0.1 unless told otherwise).

Over HTTP every request needs ``Authorization: Bearer TOKEN`` (``HTTPGate``): the token is ``KPILOT_MCP_TOKEN``
or one made at start and printed once. Any local process can reach a loopback port, and the tools compile and
run code; the token keeps them to the client it was given to. An address other than a loopback one is refused
unless asked for (``allow_remote``). A body that is not JSON, or not a JSON-RPC message, gets the JSON-RPC
error (-32700, -32600) and HTTP 400 before it reaches the SDK; over stdio such a line gets the same answer
(``AnsweringReadStream``), where the SDK would drop it unanswered.

Every tool call runs in a worker thread while the server keeps serving; a long one (check, bench, eval,
profile) reports progress every few seconds. Bad arguments and a failing tool come back as a tool error
with the message (``isError``); the server itself never stops on them.
"""

from __future__ import annotations

import dataclasses
import hmac
import ipaddress
import json
import os
import secrets
import time
from pathlib import Path
from typing import Any

from kernelpilot import __version__
from kernelpilot.errors import KernelpilotError, UsageError, error_json

__all__ = ["build_server", "serve_stdio", "serve_http", "http_token", "check_host", "HTTPGate", "is_loopback",
           "INSTRUCTIONS", "TOKEN_ENV"]

TOKEN_ENV = "KPILOT_MCP_TOKEN"
_MIN_TOKEN = 16
# A JSON-RPC body larger than this is refused whole (the SDK's own limit is of the same order).
_MAX_BODY = 4 << 20

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

    from kernelpilot.evaluate.progress import describe
    from kernelpilot.tools import REGISTRY, ToolContext, call

    ctx_tools = ToolContext(workspace=(workspace or Path.cwd()).resolve(), pool=pool, confined=True)

    async def list_tools(ctx, params) -> types.ListToolsResult:
        return types.ListToolsResult(tools=[types.Tool(name=t.name, description=t.description,
                                                       inputSchema=t.parameters, outputSchema=t.output)
                                            for t in REGISTRY.values() if t.agents])

    async def call_tool(ctx, params) -> types.CallToolResult:
        name, args = params.name, dict(params.arguments or {})
        outcome: dict[str, Any] = {}
        stage: dict[str, str] = {}

        def on_event(event: dict[str, Any]) -> None:
            line = describe(event)
            if line:
                stage["now"] = line.strip().removesuffix(" ...")

        def work() -> None:
            try:
                outcome["result"] = call(name, args, dataclasses.replace(ctx_tools, on_event=on_event))
            except KernelpilotError as e:
                outcome["error"] = error_json(e)
            except Exception as e:            # a tool's bug is the caller's error message, not a dead server
                outcome["error"] = {"type": "InternalError", "message": f"internal error in {name}: "
                                    f"{type(e).__name__}: {e}", "hint": None, "details": None}

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
                        now = stage.get("now")
                        await ctx.session.report_progress(elapsed, None, f"{name}: running for {elapsed:.0f} s"
                                                          + (f"; {now}" if now else ""))
                    except Exception:
                        pass            # progress is a courtesy: a client that cannot take it loses nothing
        if "error" in outcome:
            e = outcome["error"]
            text = f"{e['type']}: {e['message']}" + (f" {e['hint']}" if e.get("hint") else "")
            if e.get("details"):
                text += "\n" + e["details"]
            return types.CallToolResult(content=[types.TextContent(text=text)], structuredContent={"error": e},
                                        isError=True)
        text = json.dumps(outcome["result"], default=str)
        return types.CallToolResult(content=[types.TextContent(text=text)], structuredContent=outcome["result"])

    return Server("kernelpilot", version=__version__, instructions=INSTRUCTIONS, on_list_tools=list_tools,
                  on_call_tool=call_tool)


def _pool():
    """The server's worker pool: workers start with the first evaluation, not before; two problems served at once."""
    from kernelpilot.evaluate.isolation import WorkerPool

    return WorkerPool(spares=1, problems=2)


class AnsweringReadStream:
    """The SDK's stdio read stream without the lines it could not read: the SDK passes each on as an exception and
    the server drops it unanswered; here each is answered at once with JSON-RPC's error, -32700 for a line that
    is not JSON and -32600 for one that is not a JSON-RPC message (with its id where it has one)."""

    def __init__(self, inner, write) -> None:
        self.inner, self.write = inner, write

    @property
    def last_context(self):
        return getattr(self.inner, "last_context", None)      # the sender's context, as the SDK's stream has it

    async def receive(self):
        import mcp_types as types
        from mcp.shared.message import SessionMessage

        while True:
            item = await self.inner.receive()
            if not isinstance(item, Exception):
                return item
            code, ident, what = _stdio_error(item)
            await self.write.send(SessionMessage(types.JSONRPCError(
                jsonrpc="2.0", id=ident, error=types.ErrorData(code=code, message=what))))

    async def aclose(self) -> None:
        await self.inner.aclose()

    def __aiter__(self):
        return self

    async def __anext__(self):
        import anyio

        try:
            return await self.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            raise StopAsyncIteration from None

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc) -> None:
        await self.aclose()


def _stdio_error(exc: Exception) -> tuple[int, str | int | None, str]:
    """JSON-RPC's error for a line the SDK could not read: (code, the message's id where it has one, text)."""
    errors = exc.errors() if hasattr(exc, "errors") else []
    if any(e.get("type") == "json_invalid" for e in errors) or not errors:
        return -32700, None, "parse error: the line is not JSON"
    # the message itself is the input of some error (a union's errors are each about one of its members)
    data = next((e["input"] for e in errors if isinstance(e.get("input"), dict)), errors[0].get("input"))
    ident = data.get("id") if isinstance(data, dict) and isinstance(data.get("id"), (str, int)) else None
    bad = _not_jsonrpc(data) or "not a JSON-RPC request, notification or response that MCP defines"
    return -32600, ident, f"invalid request: {bad}"


def serve_stdio(workspace: Path | None = None) -> None:
    import anyio
    from mcp.server.stdio import stdio_server

    pool = _pool()
    server = build_server(workspace, pool)

    async def main() -> None:
        async with stdio_server() as (read, write):
            await server.run(AnsweringReadStream(read, write), write, server.create_initialization_options())

    try:
        anyio.run(main)
    finally:
        pool.close()


def is_loopback(host: str) -> bool:
    """Whether ``host`` is a loopback address (127.0.0.0/8, ::1) or ``localhost``."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_host(host: str, allow_remote: bool) -> None:
    """Refuse a ``host`` that other machines could reach unless ``allow_remote``."""
    if not is_loopback(host) and not allow_remote:
        raise UsageError(f"refusing to serve on {host}: not a loopback address, so other machines could reach the "
                         "tools. Pass --allow-remote to serve them (requests still need the token).")


def http_token() -> tuple[str, bool]:
    """The token HTTP clients must send: ``KPILOT_MCP_TOKEN``, else a new random one; and whether it is new."""
    given = os.environ.get(TOKEN_ENV)
    if given is not None:
        if len(given) < _MIN_TOKEN:
            raise UsageError(f"{TOKEN_ENV} is too short ({len(given)} characters): use at least {_MIN_TOKEN}, "
                             "or unset it to have one made.")
        return given, False
    return secrets.token_urlsafe(32), True


class HTTPGate:
    """ASGI middleware in front of the MCP app: a request without ``Authorization: Bearer TOKEN`` gets 401; a POST
    whose body is not JSON gets the JSON-RPC parse error (-32700), one that is not a JSON-RPC message (an object,
    or a non-empty list of them, with ``"jsonrpc": "2.0"`` and a method, or a result or error) the invalid-request
    error (-32600), both with HTTP 400; the rest goes on to the app with its body unchanged."""

    def __init__(self, app, token: str) -> None:
        self.app = app
        self.expected = b"Bearer " + token.encode()

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = dict(scope.get("headers") or [])
        if not hmac.compare_digest(headers.get(b"authorization", b""), self.expected):
            return await _reply(send, 401, {"jsonrpc": "2.0", "id": None, "error": {
                "code": -32001, "message": "unauthorized: send the server's token as 'Authorization: Bearer TOKEN'"}},
                [(b"www-authenticate", b'Bearer realm="kpilot"')])
        if scope.get("method") != "POST":
            return await self.app(scope, receive, send)
        body, more = b"", True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            body += message.get("body", b"")
            more = message.get("more_body", False)
            if len(body) > _MAX_BODY:
                return await _reply(send, 413, {"jsonrpc": "2.0", "id": None, "error": {
                    "code": -32600, "message": f"request body over {_MAX_BODY >> 20} MiB"}})
        try:
            parsed = json.loads(body)
        except (ValueError, UnicodeDecodeError) as e:
            return await _reply(send, 400, {"jsonrpc": "2.0", "id": None, "error": {
                "code": -32700, "message": f"parse error: {e}"}})
        bad = _not_jsonrpc(parsed)
        if bad:
            ident = parsed.get("id") if isinstance(parsed, dict) and isinstance(parsed.get("id"), (str, int)) else None
            return await _reply(send, 400, {"jsonrpc": "2.0", "id": ident, "error": {
                "code": -32600, "message": f"invalid request: {bad}"}})
        sent = False

        async def replay():
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        return await self.app(scope, replay, send)


def _not_jsonrpc(parsed: Any) -> str | None:
    """Why ``parsed`` is not a JSON-RPC 2.0 message (or batch of them); None if it is one."""
    items = parsed if isinstance(parsed, list) else [parsed]
    if not items:
        return "an empty batch"
    for item in items:
        if not isinstance(item, dict):
            return f"a message must be a JSON object, not {type(item).__name__}"
        if item.get("jsonrpc") != "2.0":
            return 'a message must have "jsonrpc": "2.0"'
        if "method" in item:
            if not isinstance(item["method"], str):
                return '"method" must be a string'
        elif "result" not in item and "error" not in item:
            return 'a message needs a "method" (or a "result" or "error")'
    return None


async def _reply(send, status: int, payload: dict[str, Any], headers: list | None = None) -> None:
    data = json.dumps(payload).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode()),
                            *(headers or [])]})
    await send({"type": "http.response.body", "body": data})


def serve_http(port: int, host: str = "127.0.0.1", workspace: Path | None = None, *, token: str,
               allow_remote: bool = False) -> None:
    """Serve on ``host``:``port`` behind ``HTTPGate`` with ``token``; a non-loopback ``host`` only with
    ``allow_remote``."""
    import uvicorn

    check_host(host, allow_remote)
    pool = _pool()
    app = HTTPGate(build_server(workspace, pool).streamable_http_app(host=host), token)
    try:
        uvicorn.run(app, host=host, port=port, log_level="warning")
    finally:
        pool.close()
