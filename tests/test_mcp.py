"""`kpilot mcp` as a subprocess, spoken to with the official MCP SDK's own client: over stdio and over the
streamable HTTP transport on loopback. Tools listed; isa_analyze on a HIP kernel finds the cross-lane
reduction through LDS; bad arguments, a path outside the workspace and a host compiler in the flags give a tool
error and the server goes on serving. Over HTTP: no request without the token, JSON-RPC errors for a body that is
not JSON or not JSON-RPC, no address but loopback unless asked."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import time

import pytest
from conftest import EXAMPLES, ROOT, free_port, require_module, require_tool

require_module("mcp")
anyio = require_module("anyio")
jsonschema = require_module("jsonschema")

ENV = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
HIP = "wave_argmax_bpermute.hip"             # in the workspace (``_workspace``)


def _workspace(tmp_path):
    """The files the tools are asked about, copied into the server's workspace (tools reach nothing else)."""
    shutil.copy(EXAMPLES / "kernels" / HIP, tmp_path / HIP)
    shutil.copytree(EXAMPLES / "problems" / "row_softmax", tmp_path / "row_softmax")
    return tmp_path


async def _exercise(session) -> dict:
    out = {}
    await session.initialize()
    tools = (await session.list_tools()).tools
    out["names"] = {t.name for t in tools}
    tool = next(t for t in tools if t.name == "isa_analyze")
    out["schema"] = tool.input_schema
    out["outputs"] = {t.name: t.output_schema for t in tools}
    r = await session.call_tool("isa_analyze", {"sources": [HIP], "arch": "gfx942"})
    out["analyze"] = (r.is_error, json.loads(r.content[0].text))
    r = await session.call_tool("isa_analyze", {"sources": [42]})
    out["bad"] = (r.is_error, r.content[0].text, r.structured_content)
    r = await session.call_tool("isa_analyze", {"sources": ["/etc/passwd"], "arch": "gfx942"})
    out["outside"] = (r.is_error, r.content[0].text)
    r = await session.call_tool("isa_analyze", {"sources": [HIP], "arch": "gfx942", "flags": ["-ccbin", "/bin/sh"]})
    out["ccbin"] = (r.is_error, r.content[0].text)
    r = await session.call_tool("no_such_tool", {})
    out["unknown"] = (r.is_error, r.content[0].text)
    r = await session.call_tool("arch_info", {"name": "mi300x"})
    out["after"] = (r.is_error, json.loads(r.content[0].text)["gpu"]["name"])
    return out


async def _long_call_reports_progress(session) -> tuple[list, dict, dict]:
    seen = []

    async def progress(value, total, message):
        seen.append((value, message))

    r = await session.call_tool("check", {"problem": "row_softmax", "candidate": "row_softmax/candidates/triton_softmax.py",
                                          "device": "cpu", "seeds": 1}, progress_callback=progress)
    first = json.loads(r.content[0].text)
    # a second candidate on the problem: the server's pool kept the reference's outputs for the secret seeds
    r = await session.call_tool("check", {"problem": "row_softmax",
                                          "candidate": "row_softmax/candidates/triton_softmax_tunable.py",
                                          "device": "cpu", "seeds": 1})
    return seen, first, json.loads(r.content[0].text)


def _check(out: dict) -> None:
    assert out["names"] >= {"isa_analyze", "isa_diff", "arch_info", "profile", "check", "bench", "eval",
                            "optimize_start", "optimize_status", "runs"}
    assert out["schema"]["required"] == ["sources"] and "arch" in out["schema"]["properties"]
    is_error, report = out["analyze"]
    assert not is_error and report["schema"] == "kernelpilot.isa/1"
    assert "amd.lds-crosslane" in {f["id"] for f in report["kernels"][0]["findings"]}
    assert out["bad"][0] and "isa_analyze.sources[0] must be a string" in out["bad"][1]
    assert out["bad"][2]["error"]["type"] == "ToolArgumentError" and out["bad"][2]["error"]["exit_code"] == 2
    assert all(out["outputs"][n] and out["outputs"][n]["type"] == "object" for n in out["names"])
    jsonschema.validate(report, out["outputs"]["isa_analyze"])        # the result is what the tool declares
    assert out["unknown"][0] and "no tool named 'no_such_tool'" in out["unknown"][1]
    assert out["outside"][0] and "outside the workspace" in out["outside"][1]
    assert out["ccbin"][0] and "'-ccbin' is not allowed through a tool" in out["ccbin"][1]
    assert out["after"] == (False, "AMD Instinct MI300X")       # still serving after the errors


def test_stdio(tmp_path):
    require_tool("clang++")
    from mcp.client.session import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    params = StdioServerParameters(command=sys.executable, args=["-m", "kernelpilot", "mcp", "--workspace",
                                                                 str(_workspace(tmp_path))], env=ENV)

    async def main():
        async with stdio_client(params) as (read, write):
            async with ClientSession(read, write) as session:
                return await _exercise(session), await _long_call_reports_progress(session)

    out, (progress, checked, second) = anyio.run(main)
    _check(out)
    assert checked["correct"] is True and checked["schema"] == "kernelpilot.eval/1"
    assert progress and "check: running for" in progress[0][1]
    assert second["correct"] is True and any("kept from an earlier candidate" in n for n in second["notes"]), second


def _post(port: int, body: bytes, token: str | None) -> tuple[int, dict]:
    import urllib.error
    import urllib.request

    headers = {"content-type": "application/json", "accept": "application/json, text/event-stream"}
    if token is not None:
        headers["authorization"] = f"Bearer {token}"
    req = urllib.request.Request(f"http://127.0.0.1:{port}/mcp", data=body, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, {}
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}")


def test_streamable_http_on_loopback(tmp_path):
    require_tool("clang++")
    import httpx2
    from mcp.client.session import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    port = free_port()
    token = secrets.token_urlsafe(24)
    proc = subprocess.Popen([sys.executable, "-m", "kernelpilot", "mcp", "--http", str(port), "--workspace",
                             str(_workspace(tmp_path))], env={**ENV, "KPILOT_MCP_TOKEN": token},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.time() + 60
        while time.time() < deadline:
            with socket.socket() as c:
                if c.connect_ex(("127.0.0.1", port)) == 0:
                    break
            assert proc.poll() is None, proc.stderr.read().decode()
            time.sleep(0.2)
        hello = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "ping"}).encode()
        assert _post(port, hello, None)[0] == 401                      # no token
        assert _post(port, hello, token + "x")[0] == 401               # a wrong one
        status, err = _post(port, b'{"jsonrpc": "2.0", "id": 1, "method": ', token)
        assert status == 400 and err["error"]["code"] == -32700 and err["id"] is None
        status, err = _post(port, b'{"id": 7, "params": {}}', token)
        assert status == 400 and err["error"]["code"] == -32600 and err["id"] == 7
        assert _post(port, b"[]", token)[1]["error"]["code"] == -32600

        async def main():
            client = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=120)
            async with client, streamable_http_client(f"http://127.0.0.1:{port}/mcp", http_client=client) as streams:
                read, write = streams[0], streams[1]
                async with ClientSession(read, write) as session:
                    return await _exercise(session)

        _check(anyio.run(main))
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_http_token_made_at_start_and_no_remote_address_unless_asked(tmp_path):
    env = {k: v for k, v in ENV.items() if k != "KPILOT_MCP_TOKEN"}
    r = subprocess.run([sys.executable, "-m", "kernelpilot", "mcp", "--http", "8765", "--host", "0.0.0.0"],
                       capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 2 and r.stderr.strip().splitlines() == [
        "error: refusing to serve on 0.0.0.0: not a loopback address, so other machines could reach the tools. "
        "Pass --allow-remote to serve them (requests still need the token)."]
    r = subprocess.run([sys.executable, "-m", "kernelpilot", "mcp", "--http", "8765"], capture_output=True,
                       text=True, env={**env, "KPILOT_MCP_TOKEN": "short"}, timeout=60)
    assert r.returncode == 2 and "KPILOT_MCP_TOKEN is too short" in r.stderr
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "kernelpilot", "mcp", "--http", str(port), "--workspace",
                             str(tmp_path)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stderr.readline()
        token = line.split("Bearer ", 1)[1].split("'", 1)[0]
        assert line.startswith(f"kpilot mcp: serving http://127.0.0.1:{port}/mcp") and len(token) >= 32
        deadline = time.time() + 60
        while time.time() < deadline:
            with socket.socket() as c:
                if c.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.2)
        hello = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "ping"}).encode()
        assert _post(port, hello, None)[0] == 401
        assert _post(port, b"not json", token)[1]["error"]["code"] == -32700      # past the gate with the token
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_skill_install(tmp_path):
    def kp(*args):
        return subprocess.run([sys.executable, "-m", "kernelpilot", *args], capture_output=True, text=True, env=ENV,
                              timeout=60)

    r = kp("skill", "install", "--for", "claude", "--dir", str(tmp_path))
    text = (tmp_path / ".claude" / "skills" / "kernelpilot" / "SKILL.md").read_text()
    assert r.returncode == 0 and text.startswith("---\nname: kernelpilot\n") and "kpilot eval" in text
    (tmp_path / "AGENTS.md").write_text("# Project rules\n\nBe nice.\n")
    kp("skill", "install", "--for", "codex", "--dir", str(tmp_path))
    kp("skill", "install", "--for", "codex", "--dir", str(tmp_path))          # twice: written once
    agents = (tmp_path / "AGENTS.md").read_text()
    assert agents.startswith("# Project rules") and agents.count("Optimizing GPU kernels with kernelpilot") == 1
    latin1 = tmp_path / "latin1"
    (latin1).mkdir()
    (latin1 / "AGENTS.md").write_bytes("# Règles\n".encode("latin-1"))
    r = kp("skill", "install", "--for", "codex", "--dir", str(latin1))
    assert r.returncode == 1 and r.stderr.startswith("error: ") and "is not UTF-8 text" in r.stderr
    assert (latin1 / "AGENTS.md").read_bytes() == "# Règles\n".encode("latin-1")      # left as it was
    r = kp("skill", "install", "--for", "cursor", "--print")
    assert r.stdout.startswith("---\ndescription:") and not (tmp_path / ".cursor").exists()


def test_stdio_answers_every_line_it_cannot_read(tmp_path):
    lines = ['not json', '{"jsonrpc": "2.0", "id": 1}', '{"jsonrpc": "2.0", "id": "x", "method": 5}', '[1, 2]',
             '{"jsonrpc": "2.0", "id": 2, "method": "ping"}']
    p = subprocess.Popen([sys.executable, "-m", "kernelpilot", "mcp", "--workspace", str(tmp_path)], env=ENV,
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        p.stdin.write("\n".join(lines) + "\n")
        p.stdin.flush()
        answers = [json.loads(p.stdout.readline()) for _ in lines]
    finally:
        p.stdin.close()
        p.wait(timeout=30)
    assert [(a.get("id"), (a.get("error") or {}).get("code")) for a in answers] == [
        (None, -32700), (1, -32600), ("x", -32600), (None, -32600), (2, None)]
    assert answers[-1]["result"] == {}                      # still serving after them
