"""`kpilot optimize`: run the optimization loop on a problem and record every step; `kpilot runs`: what was
tried, what worked and why.

Exit status of optimize: 0 the run ended (done, or stopped by Ctrl-C: resume it); 1 an error (the start does
not pass, a malformed problem); 2 a usage error.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import click

from kernelpilot.cli.output import echo, emit_json, table, warn
from kernelpilot.errors import UsageError
from kernelpilot.runs.store import DEFAULT_PATH

__all__ = ["optimize_cmd", "runs"]

_STORE = click.option("--store", type=click.Path(dir_okay=False, path_type=Path), default=DEFAULT_PATH,
                      show_default=True, help="The run store (SQLite).")


@click.command("optimize")
@click.argument("problem", required=False)
@click.option("--candidate", "-c", type=click.Path(), help="The starting candidate (search: it declares KPILOT_TUNE).")
@click.option("--strategy", type=click.Choice(["search", "llm"]), default="search", show_default=True)
@click.option("--budget", type=int, help="Candidate evaluations at most (default 20; with --resume, the run's own).")
@click.option("--target", type=float, help="Stop once a candidate is this many times faster than the start.")
@click.option("--device", type=click.Choice(["cuda", "cpu"]), help="Where candidates run (default: cuda when present).")
@click.option("--arch", help="Compile each variant for this arch first and drop those that spill or starve occupancy.")
@click.option("--case", "cases", multiple=True, help="Time only this case (repeatable).")
@click.option("--bench-budget", type=float, default=0.5, show_default=True, help="Seconds of timing per case in the first round.")
@click.option("--provider", type=click.Choice(["anthropic", "openai"]), help="llm: Anthropic's Messages API, or any OpenAI-compatible endpoint (default: KPILOT_LLM_PROVIDER, .kpilot/config.toml, anthropic).")
@click.option("--model", help="llm: the model name.")
@click.option("--base-url", help="llm: the endpoint (vLLM, Ollama, OpenRouter, a proxy).")
@click.option("--api-key", help="llm: the key (default: KPILOT_LLM_API_KEY, ANTHROPIC_API_KEY or OPENAI_API_KEY); never stored.")
@click.option("--llm-retries", type=int, default=4, show_default=True, help="llm: retries with backoff on rate limits and network errors.")
@click.option("--price-in", type=float, help="llm: USD per million input tokens, for the cost per step.")
@click.option("--price-out", type=float, help="llm: USD per million output tokens.")
@click.option("--max-turns", type=int, default=12, show_default=True, help="llm: model turns per step.")
@click.option("--resume", "resume_id", type=int, help="Carry on this stopped run.")
@_STORE
@click.option("--json", "as_json", is_flag=True, help="One JSON event per line on stdout (step, end).")
def optimize_cmd(problem, candidate, strategy, budget, target, device, arch, cases, bench_budget, provider, model,
                 base_url, api_key, llm_retries, price_in, price_out, max_turns, resume_id, store, as_json) -> None:
    """Optimize a candidate for PROBLEM, recording every step in the run store.

    \b
    Examples:
      kpilot optimize examples/problems/row_softmax -c candidates/triton_softmax_tunable.py --budget 20 --arch sm_90
      kpilot optimize problem/ -c start.py --strategy llm --provider openai --base-url http://localhost:8000/v1 --model qwen
      kpilot optimize --resume 3
      kpilot runs show 3
    """
    from kernelpilot.loop.engine import OptimizeOptions, optimize, resume

    on_event = _json_event if as_json else _print_event
    if resume_id is not None:
        if problem or candidate:
            raise UsageError("--resume ID carries on a recorded run: give no PROBLEM or --candidate with it.")
        run = resume(resume_id, store, budget=budget, target=target, api_key=api_key, on_event=on_event)
    else:
        if not problem or not candidate:
            raise UsageError("give a PROBLEM and a starting --candidate (or --resume ID).")
        opts = OptimizeOptions(strategy=strategy, budget=budget if budget is not None else 20, target=target,
                               device=device, arch=arch, cases=list(cases) or None, bench_budget_s=bench_budget,
                               store=store, provider=provider, model=model, base_url=base_url, llm_retries=llm_retries,
                               price_in=price_in, price_out=price_out, max_turns=max_turns)
        run = optimize(problem, candidate, opts, api_key=api_key, on_event=on_event)
    if not as_json:
        echo(f"run {run.id}: {run.status} ({run.stop_reason}); best step {run.best_step}, "
             f"{run.best_speedup}x over the start. `kpilot runs show {run.id}` for the timeline.")


def _json_event(event: dict[str, Any]) -> None:
    click.echo(json.dumps(event), nl=True)


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


@runs.command("list")
@_STORE
@click.option("--json", "as_json", is_flag=True)
def list_cmd(store: Path, as_json: bool) -> None:
    """Every run in the store."""
    from kernelpilot.runs.store import RunStore

    with RunStore(store, create=False) as s:
        rs = s.runs()
        if as_json:
            emit_json([r.to_json() for r in rs])
            return
        echo(table([[r.id, time.strftime("%Y-%m-%d %H:%M", time.localtime(r.created)), Path(r.problem).name,
                     r.strategy, r.status, len(s.steps(r.id)), r.best_speedup or "-", r.stop_reason or ""] for r in rs],
                   ["id", "started", "problem", "strategy", "status", "steps", "best x", "why it ended"]))


@runs.command("show")
@click.argument("run_id", type=int)
@_STORE
@click.option("--json", "as_json", is_flag=True)
@click.option("--code", is_flag=True, help="With --json: each step's code and diff too.")
def show_cmd(run_id: int, store: Path, as_json: bool, code: bool) -> None:
    """The timeline of one run: step, hypothesis, correct, time, speedup."""
    from kernelpilot.runs.store import RunStore

    with RunStore(store, create=False) as s:
        run, steps = s.run(run_id), s.steps(run_id)
    if as_json:
        emit_json({"run": run.to_json(), "steps": [st.to_json(code=code) for st in steps]})
        return
    echo(f"run {run.id}  {run.strategy} on {run.problem}\n  start: {run.start_candidate}\n"
         f"  status: {run.status} ({run.stop_reason}); baseline {run.baseline_us} us; best step {run.best_step} "
         f"at {run.best_speedup}x")
    rows = []
    for st in steps:
        rows.append([st.n, st.kind, ", ".join(f"{k}={v}" for k, v in (st.params or {}).items()),
                     "-" if st.correct is None else ("yes" if st.correct else "no"),
                     f"{st.median_us:.2f}" if st.median_us else "-", f"{st.speedup:g}x" if st.speedup else "-",
                     (st.error or "; ".join((st.check_summary or {}).get("failed_cases", [])[:1]) or "")[:80]])
    echo(table(rows, ["step", "kind", "params", "correct", "us", "speedup", "note"]))


@runs.command("export")
@click.argument("run_id", type=int)
@_STORE
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), help="Folder for report.md and speedup.png (default: run-ID-report).")
def export_cmd(run_id: int, store: Path, out: Path | None) -> None:
    """A Markdown report of one run, with a plot of speedup over steps and the best code."""
    from kernelpilot.runs.report import export_run
    from kernelpilot.runs.store import RunStore

    with RunStore(store, create=False) as s:
        path = export_run(s, run_id, out or Path(f"run-{run_id}-report"))
    echo(f"wrote {path}")
