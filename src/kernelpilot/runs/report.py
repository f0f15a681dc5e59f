"""A Markdown report of one run: what it set out to do, the timeline (step, hypothesis, correct, time,
speedup), what failed and why, the plot of speedup over steps, and the best kernel's code and diff."""

from __future__ import annotations

import time
from pathlib import Path

from kernelpilot.runs.plot import available, speedup_png
from kernelpilot.runs.store import RunStore, StepRecord

__all__ = ["export_run", "report_markdown"]


def _params(st: StepRecord) -> str:
    return ", ".join(f"{k}={v}" for k, v in (st.params or {}).items()) or "-"


def _note(st: StepRecord) -> str:
    summary = st.check_summary or {}
    text = st.error or "; ".join(summary.get("failed_cases", [])[:1] + summary.get("flags", [])[:1])
    return " ".join(text.split())[:160].replace("|", "\\|")


def report_markdown(store: RunStore, run_id: int, plot_name: str | None = "speedup.png") -> str:
    run, steps = store.run(run_id), store.steps(run_id)
    best = next((s for s in steps if s.n == run.best_step), None)
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(run.created))
    lines = [
        f"# Run {run.id}: {run.strategy} on {Path(run.problem).name}",
        "",
        f"- Started {when} on {run.gpu or run.device or 'an unknown device'}; status **{run.status}** "
        f"({run.stop_reason or '-'}).",
        f"- Problem: `{run.problem}`; start: `{run.start_candidate}`.",
        f"- Budget {run.budget} evaluations" + (f", target {run.target:g}x" if run.target else "") + "; "
        f"{sum(1 for s in steps if s.kind in ('start', 'variant', 'proposal'))} evaluated, "
        f"{sum(1 for s in steps if s.kind == 'pruned')} pruned before running.",
        f"- Start: {run.baseline_us} us (geometric mean of the benchmark cases' medians)."
        if run.baseline_us else "- The start has no time: it did not pass.",
        f"- **Best: step {run.best_step}, {run.best_speedup}x over the start** ({_params(best)})." if best else
        "- No step passed.",
        "",
    ]
    if plot_name:
        lines += [f"![speedup over steps]({plot_name})", ""]
    lines += ["## Timeline", "", "| step | kind | hypothesis | correct | median us | speedup | note |",
              "| --- | --- | --- | --- | --- | --- | --- |"]
    for st in steps:
        correct = "-" if st.correct is None else ("yes" if st.correct else "no")
        lines.append(f"| {st.n} | {st.kind} | {(st.hypothesis or _params(st)).replace('|', '/')} | {correct} | "
                     f"{st.median_us if st.median_us else '-'} | {f'{st.speedup:g}x' if st.speedup else '-'} | "
                     f"{_note(st)} |")
    if best is not None and best.code:
        lines += ["", f"## Best kernel (step {best.n})", ""]
        if best.diff:
            lines += ["Changes from the start:", "", "```diff", best.diff.rstrip(), "```", ""]
        lines += ["```python", best.code.rstrip(), "```"]
    return "\n".join(lines) + "\n"


def export_run(store: RunStore, run_id: int, out: Path) -> Path:
    """Write ``out/report.md`` and its chart (``speedup.png`` with matplotlib, else ``speedup.svg``); returns the
    report's path."""
    from kernelpilot.runs.html import speedup_svg

    out.mkdir(parents=True, exist_ok=True)
    run, steps = store.run(run_id), store.steps(run_id)
    if available():
        points = [(s.n or 0, s.speedup if s.passed else None) for s in steps if s.kind != "pruned"]
        chart = speedup_png(points, out / "speedup.png", target=run.target).name
    else:
        chart = "speedup.svg"
        (out / chart).write_text(speedup_svg(run, steps))
    path = out / "report.md"
    path.write_text(report_markdown(store, run_id, plot_name=chart))
    return path
