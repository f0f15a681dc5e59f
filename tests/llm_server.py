"""A local HTTP server on 127.0.0.1 that speaks Anthropic's Messages API (POST /v1/messages) and OpenAI's Chat
Completions (POST /v1/chat/completions) wire formats, answering with scripted replies in order and keeping
every request it received, and lists models (GET .../models: refused while the next scripted reply is a
rejected key). The official SDKs talk to it through their base URL.

A scripted reply is {"text": str, "tool_calls": [(name, arguments), ...]} or {"status": 401|429|500,
"retry_after": seconds} for an error response.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class ScriptedLLM:
    def __init__(self, script: list[dict[str, Any]]) -> None:
        self.script = list(script)
        self.requests: list[dict[str, Any]] = []
        self.gets: list[str] = []
        self.lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):   # quiet
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))) or b"{}")
                with outer.lock:
                    outer.requests.append({"path": self.path, "body": body,
                                           "headers": {k.lower(): v for k, v in self.headers.items()}})
                    reply = outer.script.pop(0) if outer.script else {"text": "script exhausted", "tool_calls": []}
                if "status" in reply:
                    return self._send(reply["status"], {"type": "error", "error": {
                        "type": "rate_limit_error" if reply["status"] == 429 else "authentication_error",
                        "message": f"scripted {reply['status']}"}}, {"retry-after": str(reply.get("retry_after", 0)),
                                                                      "retry-after-ms": str(int(1000 * reply.get("retry_after", 0)))})
                n = len(outer.requests)
                if self.path.endswith("/messages"):
                    content = ([{"type": "text", "text": reply["text"]}] if reply.get("text") else []) + [
                        {"type": "tool_use", "id": f"toolu_{n}_{i}", "name": name, "input": args}
                        for i, (name, args) in enumerate(reply.get("tool_calls", []))]
                    return self._send(200, {"id": f"msg_{n}", "type": "message", "role": "assistant",
                                            "model": body.get("model"), "content": content,
                                            "stop_reason": "tool_use" if reply.get("tool_calls") else "end_turn",
                                            "stop_sequence": None,
                                            "usage": {"input_tokens": 1000 + n, "output_tokens": 100 + n}})
                if self.path.endswith("/chat/completions"):
                    calls = [{"id": f"call_{n}_{i}", "type": "function",
                              "function": {"name": name, "arguments": json.dumps(args)}}
                             for i, (name, args) in enumerate(reply.get("tool_calls", []))]
                    msg = {"role": "assistant", "content": reply.get("text") or None}
                    if calls:
                        msg["tool_calls"] = calls
                    return self._send(200, {"id": f"chatcmpl-{n}", "object": "chat.completion", "created": 0,
                                            "model": body.get("model"),
                                            "choices": [{"index": 0, "message": msg,
                                                         "finish_reason": "tool_calls" if calls else "stop"}],
                                            "usage": {"prompt_tokens": 1000 + n, "completion_tokens": 100 + n,
                                                      "total_tokens": 1100 + 2 * n}})
                return self._send(404, {"error": {"message": f"no route {self.path}"}})

            def do_GET(self):
                # The list of models (a client's first, cheap request): refused as the next scripted answer
                # would be when that is a rejected key, else an empty list; not an answer taken from the script.
                with outer.lock:
                    outer.gets.append(self.path)
                    refused = bool(outer.script) and outer.script[0].get("status") in (401, 403)
                if not self.path.split("?")[0].endswith("/models"):
                    return self._send(404, {"error": {"message": f"no route {self.path}"}})
                if refused:
                    return self._send(outer.script[0]["status"], {"type": "error", "error": {
                        "type": "authentication_error", "message": "scripted rejected key"}})
                return self._send(200, {"data": [], "has_more": False, "first_id": None, "last_id": None,
                                        "object": "list"})

            def _send(self, status: int, payload: dict[str, Any], headers: dict[str, str] | None = None):
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def url(self, provider: str) -> str:
        return f"http://127.0.0.1:{self.port}" + ("/v1" if provider == "openai" else "")

    def __enter__(self) -> ScriptedLLM:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()
