"""`kpilot check`, `kpilot bench`, `kpilot eval`: correctness and timing of a candidate against a problem.

Exit status: 0 passed; 3 the candidate ran but failed (wrong, rejected by a guard, crashed, hung);
1 an error in the problem or the setup; 2 a usage error.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from kernelpilot.cli.output import Output, table, warn
from kernelpilot.cli.spec import command
from kernelpilot.tools import run

__all__ = ["check_cmd", "bench_cmd", "eval_cmd"]

FAILED_EXIT = 3


def _evaluate(tool: str, opts, out: Output, plot: Path | None = None) -> None:
    from kernelpilot.tools import ToolContext

    result = run(tool, opts, ToolContext(on_event=out.progress))
    out.result(result, render)
    if plot is not None and result.bench:
        from kernelpilot.runs.plot import roofline_png

        plot.mkdir(parents=True, exist_ok=True)
        cases = [{"case": b.case, "median_us": b.timing.median_us if b.timing else None, "roofline": b.roofline}
                 for b in result.bench]
        warn(f"wrote {roofline_png(cases, plot / 'roofline.png', title=f'{result.problem} on {result.gpu}')}")
    if not result.passed:
        sys.exit(FAILED_EXIT)


_PLOT = click.Option(["--plot"], type=click.Path(file_okay=False, path_type=Path), metavar="DIR",
                     help="Write the roofline chart of the timed cases (FLOPs per byte against FLOP/s, under the "
                          "GPU's roofs) into DIR as roofline.png (needs matplotlib and a problem that declares its "
                          "cost).")


@command("check", examples="""
    kpilot check examples/problems/row_softmax --candidate my_softmax.py
    kpilot check 19_ReLU.py -c relu_new.py --device cpu --json""")
def check_cmd(opts, out: Output) -> None:
    _evaluate("check", opts, out)


@command("bench", examples="""
    kpilot bench examples/problems/row_softmax -c my_softmax.py --baseline eager --baseline compile
    kpilot bench problem/ -c cand.py --graphs --json
    kpilot bench problem/ -c cand.py --plot charts/""", extra=(_PLOT,))
def bench_cmd(opts, out: Output, plot: Path | None) -> None:
    _evaluate("bench", opts, out, plot)


@command("eval", examples="""
    kpilot eval examples/problems/row_softmax -c my_softmax.py --baseline eager --json""", extra=(_PLOT,))
def eval_cmd(opts, out: Output, plot: Path | None) -> None:
    _evaluate("eval", opts, out, plot)


# ------------------------------------------------------------------ rendering


def _num(x, fmt="{:.3g}") -> str:
    return "-" if x is None else fmt.format(x)


def render(r, paint=lambda t, k: t) -> str:
    out = [f"problem {r.problem}  candidate {r.candidate}  device {r.device}" + (f" ({r.gpu})" if r.gpu else "")]
    if r.error:
        out.append(f"ERROR  {r.error}")
    if r.cases:
        rows = []
        for c in r.cases:
            status = "ok" if c.ok else "FAIL"
            note = c.message or (f"low signal: {c.low_signal}" if c.low_signal else "")
            rows.append([status, c.case + (" (hidden)" if c.hidden else ""), c.seed, _num(c.max_abs_err),
                         _num(c.rel_err), note[:120]])
        out.append(table(rows, ["", "case", "seed", "max abs err", "rel err", "message"]))
        bad = sum(not c.ok for c in r.cases)
        out.append(f"correct: {'yes' if r.correct else 'no'} ({len(r.cases) - bad}/{len(r.cases)} case runs passed)")
    if r.bench:
        names = sorted({n for b in r.bench for n in b.baselines})
        rows = []
        for b in r.bench:
            t = b.timing
            roof = b.roofline or {}
            row = [b.case, _num(t and t.median_us, "{:.2f}"), _num(t and t.iqr_us, "{:.2f}"),
                   _num(t and t.min_us, "{:.2f}"), t.n if t else "-",
                   _num(roof.get("floor_us"), "{:.2f}"), _num(roof.get("fraction"), "{:.0%}"),
                   "ok" if b.check_ok else "WRONG"]
            if any(x.graph_timing or x.graph_error for x in r.bench):
                row.append(_num(b.graph_timing.median_us, "{:.2f}") if b.graph_timing else
                           ("not captured" if b.graph_error else "-"))
            for n in names:
                bl = b.baselines.get(n)
                row.append("-" if bl is None else f"{bl.timing.median_us:.2f}"
                           + (f" ({bl.speedup:.3g}x)" if bl.speedup else ""))
            rows.append(row)
        headers = ["case", "median us", "IQR", "min", "n", "floor us", "of floor", "timed outputs"]
        if any(b.graph_timing or b.graph_error for b in r.bench):
            headers.append("graph us")
        headers += [f"{n} us (speedup)" for n in names]
        out.append(table(rows, headers))
        method = r.bench[0].timing.method if r.bench[0].timing else None
        if method == "cpu-wall-clock":
            out.append("timing: CPU wall-clock per call, new inputs before every call, median of n samples")
        elif method:
            out.append(f"timing: {method}, L2 flushed and new inputs before every call, median of n samples")
        for n, v in r.baselines().items():
            if v.get("speedup"):
                graphs = f"; {v['graph_speedup']:.3g}x replayed as CUDA graphs" if v.get("graph_speedup") else ""
                out.append(f"speedup over {n}: {v['speedup']:.3g}x ({v['aggregate']}{graphs})")
    for f in r.flags:
        out.append(paint(f"[{f.level}]", "bad" if f.level == "error" else "warn") + f" {f.id}: {f.message}")
    for n in r.notes:
        out.append(f"note: {n}")
    out.append(paint("PASSED", "good") if r.passed else paint("FAILED", "bad"))
    return "\n".join(out)
