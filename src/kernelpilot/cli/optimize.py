"""`kpilot optimize`: run the optimization loop on a problem and record every step; `kpilot runs`: what was
tried, what worked and why.

Exit status of optimize: 0 the run ended (done, or stopped by Ctrl-C: resume it); 1 an error (the start does
not pass, a malformed problem); 2 a usage error.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from kernelpilot.cli.output import Output, table, warn
from kernelpilot.cli.spec import command
from kernelpilot.errors import UsageError
from kernelpilot.options import Options, param
from kernelpilot.runs.store import store_option
from kernelpilot.tools import run as run_tool

__all__ = ["optimize_cmd", "runs"]


@command("optimize_start", name="optimize", help="""Optimize a candidate for PROBLEM, recording every step in
    the run store: `search` explores the candidate's declared tuning space (KPILOT_TUNE) with static pruning and
    successive halving; `llm` runs an agent loop. Runs in the foreground; Ctrl-C stops it, and --resume ID carries
    it on.""", examples="""
    kpilot optimize examples/problems/row_softmax -c candidates/triton_softmax_tunable.py --budget 20 --arch sm_90
    kpilot optimize problem/ -c start.py --strategy llm --provider openai --base-url http://localhost:8000/v1 --model qwen
    kpilot optimize --resume 3
    kpilot runs show 3""")
def optimize_cmd(opts, out: Output) -> None:
    from kernelpilot.tools.runs import optimize_run

    # progress as every command gives it (JSON lines on stderr with --json); the run's outcome is the result
    run = optimize_run(opts, out.progress if out.mode == "json" else _print_event if out.mode == "human" else None)
    out.result({"run": run.id, "status": run.status, "stop_reason": run.stop_reason, "best_step": run.best_step,
                "best_speedup": run.best_speedup, "store": str(Path(opts.store).resolve())},
               lambda d, paint: f"run {d['run']}: {d['status']} ({d['stop_reason']}); best step {d['best_step']}, "
                                f"{d['best_speedup']}x over the start. `kpilot runs show {d['run']}` for the timeline.")


def _print_event(e: dict[str, Any]) -> None:
    if e["event"] == "step":
        what = ", ".join(f"{k}={v}" for k, v in (e.get("params") or {}).items())
        if e["kind"] == "pruned":
            warn(f"  step {e['n']:3d}  pruned   {what}: {e.get('error')}")
            return
        ok = "ok" if e.get("passed") else "FAILED"
        t = f"{e['median_us']:.2f} us" if e.get("median_us") else "-"
        sp = f"{e['speedup']:.3f}x" if e.get("speedup") else "-"
        if e["kind"] == "proposal":
            what = (e.get("hypothesis") or "")[:100] + (f"  [{e['tokens_in']}+{e['tokens_out']} tokens]"
                                                        if e.get("tokens_in") is not None else "")
        done = f"[{e['evaluations']}/{e['budget']}]" if e.get("budget") else ""
        warn(f"  step {e['n']:3d} {done:>9s}  {e['kind']:8s} {ok:6s} {t:>14s} {sp:>9s}  "
             f"best {e.get('best_speedup') or '-'}x  {what}"
             + (f"  ({e['error'][:120]})" if e.get("error") else ""))
    elif e["event"] == "run":
        warn(f"run {e['run']} ({e['strategy']}), recorded in {e['store']}")
    elif e["event"] == "end":
        warn(f"  {e['status']}: {e['reason']}")


@click.group("runs")
def runs() -> None:
    """Recorded optimization runs: list, show, export."""




@command("runs", name="list", help="Every run in the store.", examples="kpilot runs list --json",
         omit=("run", "code", "trace"))
def list_cmd(opts, out: Output) -> None:
    out.result(run_tool("runs", opts), _list_text)


def _list_text(d: dict[str, Any], paint) -> str:
    return table([[r["id"], time.strftime("%Y-%m-%d %H:%M", time.localtime(r["created"])), Path(r["problem"]).name,
                   r["strategy"], r["status"], r["steps"], r["best_speedup"] or "-", r["stop_reason"] or ""]
                  for r in d["runs"]],
                 ["id", "started", "problem", "strategy", "status", "steps", "best x", "why it ended"])


@command("runs", name="show", help="The timeline of one run: step, hypothesis, correct, time, speedup.",
         examples="kpilot runs show 3 --json --code")
def show_cmd(opts, out: Output) -> None:
    if opts.run is None:
        raise UsageError("kpilot runs show RUN: the run's id (`kpilot runs list` lists them).")
    out.result(run_tool("runs", opts), _show_text)


def _show_text(d: dict[str, Any], paint) -> str:
    run = d["run"]
    lines = [f"run {run['id']}  {run['strategy']} on {run['problem']}\n  start: {run['start_candidate']}\n"
             f"  status: {run['status']} ({run['stop_reason']}); baseline {run['baseline_us']} us; best step "
             f"{run['best_step']} at {run['best_speedup']}x"]
    rows = []
    for st in d["steps"]:
        rows.append([st["n"], st["kind"], ", ".join(f"{k}={v}" for k, v in (st["params"] or {}).items()),
                     "-" if st["correct"] is None else ("yes" if st["correct"] else "no"),
                     f"{st['median_us']:.2f}" if st["median_us"] else "-",
                     f"{st['speedup']:g}x" if st["speedup"] else "-",
                     (st["error"] or "; ".join((st["check_summary"] or {}).get("failed_cases", [])[:1]) or "")[:80]])
    lines.append(table(rows, ["step", "kind", "params", "correct", "us", "speedup", "note"]))
    for st in d["steps"]:
        if st.get("trace"):
            lines.append(f"\nstep {st['n']} ({st['kind']}):")
            lines.extend(_trace_lines(st["trace"]))
    return "\n".join(lines)


def _trace_lines(trace: list[dict[str, Any]]) -> list[str]:
    """A step's trace for a person: one line (or a short block) per message, call, result or evaluation."""
    out = []
    for t in trace:
        role = t.get("role")
        if role == "user":
            out.append(f"  user: {_short(t.get('text'))}")
        elif role == "assistant":
            calls = ", ".join(f"{c['name']}({_short(json.dumps(c.get('arguments')), 80)})" for c in t.get("tool_calls", []))
            out.append(f"  model ({t.get('tokens_in')}+{t.get('tokens_out')} tokens, {t.get('duration_s')} s): "
                       f"{_short(t.get('text'))}" + (f" -> {calls}" if calls else ""))
        elif role == "tool":
            mark = "error" if t.get("is_error") else "ok"
            out.append(f"  {t.get('name')} [{mark}, {t.get('bytes')} B, {t.get('duration_s')} s]: {_short(t.get('content'))}")
        elif role == "evaluation":
            stages = [e.get("stage") for e in t.get("events", [])]
            total = (t.get("elapsed_s") or {}).get("total")
            out.append(f"  evaluation: {len(stages)} events ({', '.join(dict.fromkeys(s for s in stages if s))})"
                       + (f", {total} s" if total is not None else ""))
    return out


def _short(text: object, n: int = 160) -> str:
    s = " ".join(str(text or "").split())
    return s if len(s) <= n else s[:n - 3] + "..."


@command("runs_export", name="export", examples="kpilot runs export 3 --out report/")
def export_cmd(opts, out: Output) -> None:
    out.result(run_tool("runs_export", opts), lambda d, paint: f"wrote {d['report']}"
               + (f", {d['html']}" if d.get("html") else "")
               + (f" and {d['trace']} (open it in ui.perfetto.dev)" if d.get("trace") else ""))


runs.add_command(list_cmd)
runs.add_command(show_cmd)
runs.add_command(export_cmd)


@dataclass(frozen=True, kw_only=True)
class ServeOptions(Options):
    store: Path = store_option()
    port: int = param("The port on 127.0.0.1 (0: any free one).", 0, minimum=0)


@command("runs_serve", name="serve", options=ServeOptions, help="""Serve the run store as a local web app on
    127.0.0.1, behind a token printed at start (or KPILOT_RUNS_TOKEN): the list of runs, and each run's page,
    which follows a running run: new steps and the run's end appear in place.""", examples="kpilot runs serve --port 8770")
def serve_cmd(opts, out: Output) -> None:
    from kernelpilot.runs.serve import make_server

    server, token = make_server(opts.store, port=opts.port, token=None)
    host, port = server.server_address[:2]
    warn(f"kpilot runs serve: http://{host}:{port}/?token={token}  (Ctrl-C stops it)")
    try:
        server.serve_forever()
    finally:
        server.server_close()


runs.add_command(serve_cmd)
