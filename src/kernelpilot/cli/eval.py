"""`kpilot check`, `kpilot bench`, `kpilot eval`: correctness and timing of a candidate against a problem.

Exit status: 0 passed; 3 the candidate ran but failed (wrong, rejected by a guard, crashed, hung);
1 an error in the problem or the setup; 2 a usage error.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from kernelpilot.cli.output import echo, emit_json, table
from kernelpilot.tools import eval_options

__all__ = ["check_cmd", "bench_cmd", "eval_cmd"]

FAILED_EXIT = 3


def _options(f, *, bench: bool, check: bool):
    opts = [
        click.argument("problem", type=click.Path(exists=False)),
        click.option("--candidate", "-c", required=True, type=click.Path(), help="The candidate file (native: defines the entry function; KernelBench: ModelNew; GPU MODE: custom_kernel)."),
        click.option("--device", type=click.Choice(["cuda", "cpu"]), help="Where to run (default: cuda when a GPU is present, else cpu for check)."),
        click.option("--case", "cases", multiple=True, help="Only this case (repeatable)."),
        click.option("--timeout", type=float, default=600.0, show_default=True, help="Seconds each worker process may take."),
        click.option("--writable", "writable", multiple=True, type=click.Path(file_okay=False), help="A folder the candidate may write besides its own and the compilers' caches (repeatable)."),
        click.option("--no-sandbox", "no_sandbox", is_flag=True, help="Let the candidate's process write anywhere (debugging only; the result says so)."),
        click.option("--memory-limit", "memory_limit_gb", type=float, help="GiB of host memory a worker (with what it starts) may hold before it is killed (default: 80% of this machine's)."),
        click.option("--keep", type=click.Path(file_okay=False, path_type=Path), help="Keep the workers' jobs, logs and tensors in this folder."),
        click.option("--json", "as_json", is_flag=True, help="Machine-readable output (kernelpilot.eval/1)."),
    ]
    if check:
        opts.append(click.option("--seeds", type=int, default=3, show_default=True, help="Secret random seeds per case."))
    if bench:
        opts += [
            click.option("--baseline", "baselines", multiple=True, help="eager, compile, or a candidate file to compare with (repeatable)."),
            click.option("--graphs", is_flag=True, help="Also time CUDA-graph replays (removes launch overhead)."),
            click.option("--budget", type=float, default=3.0, show_default=True, help="Seconds of timed samples per case at most."),
            click.option("--verify", type=int, default=3, show_default=True, help="Timed outputs re-checked per case."),
        ]
    for o in reversed(opts):
        f = o(f)
    return f


def _tool_args(problem, candidate, kw: dict) -> dict:
    """The CLI's options as the check/bench/eval tools' arguments (tools.py)."""
    args = {"problem": str(problem), "candidate": str(candidate), "device": kw.get("device"),
            "cases": list(kw["cases"]) or None, "timeout": kw["timeout"], "seeds": kw.get("seeds"),
            "baselines": list(kw.get("baselines", ())) or None, "budget": kw.get("budget"),
            "graphs": kw.get("graphs") or None, "verify": kw.get("verify"),
            "keep": str(kw["keep"]) if kw.get("keep") else None, "memory_limit_gb": kw.get("memory_limit_gb"),
            "writable": [str(w) for w in kw.get("writable") or ()] or None,
            "sandbox": False if kw.get("no_sandbox") else None}
    return {k: v for k, v in args.items() if v is not None}


def _json(tool: str, problem, candidate, kw: dict) -> None:
    from kernelpilot.tools import call

    d = call(tool, _tool_args(problem, candidate, kw))
    emit_json(d)
    if not d["passed"]:
        sys.exit(FAILED_EXIT)


def _finish(result) -> None:
    echo(render(result))
    if not result.passed:
        sys.exit(FAILED_EXIT)


@click.command("check")
@(lambda f: _options(f, bench=False, check=True))
def check_cmd(problem, candidate, **kw) -> None:
    """Check a candidate's correctness on every case and several secret seeds.

    \b
    Examples:
      kpilot check examples/problems/row_softmax --candidate my_softmax.py
      kpilot check 19_ReLU.py --candidate relu_new.py --device cpu --json
    """
    from kernelpilot.evaluate.runner import check

    if kw["as_json"]:
        return _json("check", problem, candidate, kw)
    _finish(check(problem, candidate, eval_options(_tool_args(problem, candidate, kw))))


@click.command("bench")
@(lambda f: _options(f, bench=True, check=False))
def bench_cmd(problem, candidate, **kw) -> None:
    """Time a candidate (CUDA events, L2 flushed, fresh inputs every call) against baselines.

    \b
    Examples:
      kpilot bench examples/problems/row_softmax -c my_softmax.py --baseline eager --baseline compile
      kpilot bench problem/ -c cand.py --graphs --json
    """
    from kernelpilot.evaluate.runner import bench

    if kw["as_json"]:
        return _json("bench", problem, candidate, kw)
    _finish(bench(problem, candidate, eval_options(_tool_args(problem, candidate, kw))))


@click.command("eval")
@(lambda f: _options(f, bench=True, check=True))
def eval_cmd(problem, candidate, **kw) -> None:
    """Check, then benchmark when correct.

    \b
    Example:
      kpilot eval examples/problems/row_softmax -c my_softmax.py --baseline eager --json
    """
    from kernelpilot.evaluate.runner import evaluate

    if kw["as_json"]:
        return _json("eval", problem, candidate, kw)
    _finish(evaluate(problem, candidate, eval_options(_tool_args(problem, candidate, kw))))


# ------------------------------------------------------------------ rendering


def _num(x, fmt="{:.3g}") -> str:
    return "-" if x is None else fmt.format(x)


def render(r) -> str:
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
                out.append(f"speedup over {n}: {v['speedup']:.3g}x ({v['aggregate']})")
    for f in r.flags:
        out.append(f"[{f.level}] {f.id}: {f.message}")
    for n in r.notes:
        out.append(f"note: {n}")
    out.append("PASSED" if r.passed else "FAILED")
    return "\n".join(out)
