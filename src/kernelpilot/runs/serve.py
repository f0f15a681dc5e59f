"""`kpilot runs serve`: the run store as a small local web app, on 127.0.0.1 only, behind a token.

    /?token=T                 every run (id, problem, strategy, status, steps, best speedup), newest first
    /run/ID?token=T           the run's page (as `runs export --html`), reloading itself every few seconds
                              while the run is still going, so a running run can be followed live
    /api/runs?token=T         the list as JSON; /api/run/ID?token=T the run and its steps as JSON

The token is made at start and printed once (or taken from KPILOT_RUNS_TOKEN); a request without it gets 401.
Every page is read from the store when asked for: nothing is cached, nothing is written.
"""

from __future__ import annotations

import hmac
import html
import json
import os
import secrets
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from kernelpilot.errors import KernelpilotError

__all__ = ["make_server", "TOKEN_ENV"]

TOKEN_ENV = "KPILOT_RUNS_TOKEN"
_RELOAD_S = 3


def _runs_json(store_path: Path) -> list[dict[str, Any]]:
    from kernelpilot.runs.store import RunStore

    with RunStore(store_path, create=False) as s:
        return [{**{k: r.to_json()[k] for k in ("id", "problem", "strategy", "status", "stop_reason", "best_step",
                                                   "best_speedup", "created")}, "steps": len(s.steps(r.id))}
                for r in reversed(s.runs())]


def _list_page(runs: list[dict[str, Any]], token: str) -> str:
    rows = "".join(
        f'<tr><td><a href="/run/{r["id"]}?token={html.escape(token)}">{r["id"]}</a></td>'
        f'<td>{html.escape(Path(r["problem"]).name)}</td><td>{html.escape(r["strategy"])}</td>'
        f'<td>{html.escape(r["status"])}</td><td>{r["steps"]}</td><td>{r["best_speedup"] or "-"}</td></tr>'
        for r in runs)
    return ("<!doctype html><html lang='en'><head><meta charset='utf-8'><title>kernelpilot runs</title>"
            f"<meta http-equiv='refresh' content='{_RELOAD_S * 2}'>"
            "<style>body{font:14px system-ui,sans-serif;margin:24px}td,th{padding:4px 10px;text-align:left}"
            "th{background:#f4f4f4}</style></head><body><h1>Runs</h1><table id='runs'><thead><tr><th>run</th>"
            "<th>problem</th><th>strategy</th><th>status</th><th>steps</th><th>best</th></tr></thead><tbody>"
            + rows + "</tbody></table></body></html>\n")


def make_server(store_path: Path, *, port: int = 0, token: str | None = None) -> tuple[ThreadingHTTPServer, str]:
    """The server (bound to 127.0.0.1, not yet serving) and its token."""
    token = token or os.environ.get(TOKEN_ENV) or secrets.token_urlsafe(24)
    store_path = Path(store_path)
    if not store_path.exists():
        raise KernelpilotError(f"{store_path}: no run store here (pass --store PATH).")

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:     # quiet
            pass

        def _send(self, status: int, body: str, kind: str = "text/html; charset=utf-8") -> None:
            data = body.encode()
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(data)))
            self.send_header("Cache-Control", "no-store")
            self.send_header("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; "
                                                        "script-src 'unsafe-inline'; img-src data:")
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:  # noqa: N802 - the http.server interface
            url = urlsplit(self.path)
            given = (parse_qs(url.query).get("token") or [""])[0]
            if not hmac.compare_digest(given.encode(), token.encode()):
                self._send(401, "a token is needed: open the address `kpilot runs serve` printed\n", "text/plain")
                return
            try:
                self._route(url.path)
            except KernelpilotError as e:
                self._send(404, f"{e.message}\n", "text/plain")

        def _route(self, path: str) -> None:
            from kernelpilot.runs.html import run_html
            from kernelpilot.runs.store import RunStore

            parts = [p for p in path.split("/") if p]
            if not parts:
                self._send(200, _list_page(_runs_json(store_path), token))
            elif parts == ["api", "runs"]:
                self._send(200, json.dumps(_runs_json(store_path)), "application/json")
            elif len(parts) == 2 and parts[0] == "run" and parts[1].isdigit():
                with RunStore(store_path, create=False) as s:
                    page, running = run_html(s, int(parts[1])), s.run(int(parts[1])).status == "running"
                if running:      # follow it: the page reloads itself while the run goes on
                    page = page.replace("<head>", f"<head><meta http-equiv='refresh' content='{_RELOAD_S}'>", 1)
                self._send(200, page)
            elif len(parts) == 3 and parts[:2] == ["api", "run"] and parts[2].isdigit():
                with RunStore(store_path, create=False) as s:
                    run = s.run(int(parts[2]))
                    steps = [st.to_json(code=False, trace=False) for st in s.steps(run.id)]
                self._send(200, json.dumps({"run": run.to_json(), "steps": steps}, default=str), "application/json")
            else:
                self._send(404, "no such page\n", "text/plain")

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    server.daemon_threads = True
    return server, token

