"""`kpilot runs serve`: the run store as a small local web app, on 127.0.0.1 only, behind a token.

    /?token=T                 every run (id, problem, strategy, status, steps, best speedup), newest first
    /run/ID?token=T           the run's page (as `runs export --html`), which follows the run while it goes on:
                              each new step, and the run's end, appear in place (the open step, the filter and
                              the scroll position stay)
    /events/run/ID?token=T    the run's state as a stream of server-sent events: `change` whenever the number of
                              steps, the status or the best step changes (the first at once), `done` when the run
                              is no longer running
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
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from kernelpilot.errors import KernelpilotError

__all__ = ["make_server", "TOKEN_ENV"]

TOKEN_ENV = "KPILOT_RUNS_TOKEN"
_RELOAD_S = 6            # the list page's reload period
_POLL_S = 0.5            # how often a stream looks at the store
_KEEPALIVE_S = 15        # a comment line this often keeps proxies and the browser from closing a quiet stream

# A served run page follows its run: it listens to /events/run/ID and, when the state it shows is older than the
# state announced, fetches the page again and swaps in its #run (keeping the filter; the open step is the address's
# #step-N and stays). body[data-updates] counts the swaps; body[data-live] is "ended" once the run has ended and
# the page shows its last state.
_FOLLOW_JS = """
(function () {
  var token = new URLSearchParams(location.search).get('token') || '';
  var id = document.body.dataset.run, live = document.getElementById('live');
  var busy = false, queued = [];
  function refresh(then) {
    queued.push(then || function () {});
    if (busy) return;
    busy = true;
    var waiting = queued; queued = [];
    fetch('/run/' + id + '?token=' + encodeURIComponent(token), {cache: 'no-store'}).then(function (r) {
      if (!r.ok) throw new Error('HTTP ' + r.status);
      return r.text();
    }).then(function (text) {
      var fresh = new DOMParser().parseFromString(text, 'text/html');
      var q = document.getElementById('filter').value, only = document.getElementById('passed-only').checked;
      document.getElementById('run').innerHTML = fresh.getElementById('run').innerHTML;
      document.getElementById('filter').value = q;
      document.getElementById('passed-only').checked = only;
      document.body.dataset.fingerprint = fresh.body.dataset.fingerprint;
      document.body.dataset.updates = String(Number(document.body.dataset.updates || 0) + 1);
      init();
    }).catch(function (e) {
      live.textContent = 'could not update the page: ' + e.message;
    }).then(function () {
      busy = false;
      waiting.forEach(function (f) { f(); });
      if (queued.length) { var next = queued; queued = []; next.forEach(function (f) { refresh(f); }); }
    });
  }
  function stale(e) { return e.data !== document.body.dataset.fingerprint; }
  var stream = new EventSource('/events/run/' + id + '?token=' + encodeURIComponent(token));
  stream.addEventListener('change', function (e) {
    var f = JSON.parse(e.data);
    live.textContent = 'following the run: ' + f.steps + ' steps, ' + f.status + ' (' +
      new Date().toLocaleTimeString() + ')';
    if (stale(e)) refresh();
  });
  stream.addEventListener('done', function (e) {
    stream.close();
    var ended = function () {
      live.textContent = 'the run has ended: ' + JSON.parse(e.data).status;
      document.body.dataset.live = 'ended';
    };
    if (stale(e)) refresh(ended); else ended();
  });
  stream.addEventListener('failed', function (e) {
    stream.close();
    live.textContent = 'stopped following: ' + JSON.parse(e.data);
  });
  stream.onerror = function () { live.textContent = 'the server is not answering; trying again'; };
})();
"""


def _state(store: Any, run_id: int) -> tuple[str, bool]:
    """What a follower compares, read from an open run store: the run's step count, status and best step, as the
    JSON text sent in events and kept on the page; and whether the run is still running."""
    run = store.run(run_id)
    state = {"steps": store.step_count(run_id), "status": run.status, "best_step": run.best_step,
             "best_speedup": run.best_speedup}
    return json.dumps(state, sort_keys=True), run.status == "running"


def _read_state(store_path: Path, run_id: int) -> tuple[str, bool]:
    from kernelpilot.runs.store import RunStore

    with RunStore(store_path, create=False) as s:
        return _state(s, run_id)


def _runs_json(store_path: Path) -> list[dict[str, Any]]:
    from kernelpilot.runs.store import RunStore

    with RunStore(store_path, create=False) as s:
        return [{**{k: r.to_json()[k] for k in ("id", "problem", "strategy", "status", "stop_reason", "best_step",
                                                   "best_speedup", "created")}, "steps": s.step_count(r.id)}
                for r in reversed(s.runs())]


def _list_page(runs: list[dict[str, Any]], token: str) -> str:
    rows = "".join(
        f'<tr><td><a href="/run/{r["id"]}?token={html.escape(token)}">{r["id"]}</a></td>'
        f'<td>{html.escape(Path(r["problem"]).name)}</td><td>{html.escape(r["strategy"])}</td>'
        f'<td>{html.escape(r["status"])}</td><td>{r["steps"]}</td><td>{r["best_speedup"] or "-"}</td></tr>'
        for r in runs)
    return ("<!doctype html><html lang='en'><head><meta charset='utf-8'><title>kernelpilot runs</title>"
            f"<meta http-equiv='refresh' content='{_RELOAD_S}'>"
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
                                                        "script-src 'unsafe-inline'; img-src data:; "
                                                        "connect-src 'self'")
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
                run_id = int(parts[1])
                with RunStore(store_path, create=False) as s:
                    state, _ = _state(s, run_id)             # read first: the page is at least this new
                    page = run_html(s, run_id)
                page = page.replace("<body>", f"<body data-run='{run_id}' data-fingerprint='{html.escape(state)}'>"
                                    "<p id='live' class='muted'></p>", 1)
                self._send(200, page.replace("</body>", f"<script>{_FOLLOW_JS}</script></body>", 1))
            elif len(parts) == 3 and parts[:2] == ["events", "run"] and parts[2].isdigit():
                self._stream(int(parts[2]))
            elif len(parts) == 3 and parts[:2] == ["api", "run"] and parts[2].isdigit():
                with RunStore(store_path, create=False) as s:
                    run = s.run(int(parts[2]))
                    steps = [st.to_json(code=False, trace=False) for st in s.steps(run.id)]
                self._send(200, json.dumps({"run": run.to_json(), "steps": steps}, default=str), "application/json")
            else:
                self._send(404, "no such page\n", "text/plain")

        def _stream(self, run_id: int) -> None:
            """Server-sent events for one run until it stops running or the browser goes away."""
            state, running = _read_state(store_path, run_id)  # an unknown run is a 404 before the stream opens
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-store")
            self.end_headers()
            sent, quiet_since = None, time.monotonic()
            try:
                while True:
                    if state != sent:
                        self.wfile.write(f"event: change\ndata: {state}\n\n".encode())
                        sent, quiet_since = state, time.monotonic()
                    if not running:
                        self.wfile.write(f"event: done\ndata: {state}\n\n".encode())
                        self.wfile.flush()
                        return
                    if time.monotonic() - quiet_since > _KEEPALIVE_S:
                        self.wfile.write(b": still running\n\n")
                        quiet_since = time.monotonic()
                    self.wfile.flush()
                    time.sleep(_POLL_S)
                    try:
                        state, running = _read_state(store_path, run_id)
                    except KernelpilotError as e:            # the store went bad or away under the stream
                        self.wfile.write(f"event: failed\ndata: {json.dumps(e.message)}\n\n".encode())
                        self.wfile.flush()
                        return
            except (BrokenPipeError, ConnectionResetError):
                return                                       # the page was closed

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    server.daemon_threads = True
    return server, token

