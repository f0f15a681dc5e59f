"""The optimization-run tools: start a run in the background (``optimize_start``), follow it
(``optimize_status``), and read the run store (``runs``). ``OptimizeRequest`` is also what ``kpilot optimize``
takes; ``agent_toolbox`` gives the llm strategy its tools."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from kernelpilot.errors import KernelpilotError
from kernelpilot.loop.engine import OptimizeOptions
from kernelpilot.loop.llm_client import WithKey
from kernelpilot.options import OptionError, Options, param
from kernelpilot.runs.store import store_option
from kernelpilot.tools.fields import problem_option, run_id_option
from kernelpilot.tools.registry import REGISTRY, ToolContext, call, register
from kernelpilot.tools.shapes import array_of, shape

__all__ = ["OptimizeRequest", "RunsRequest", "StatusRequest", "ExportRequest", "optimize_run", "agent_toolbox",
           "AGENT_TOOLS"]

# The tools the llm strategy's model may call besides submitting and stopping: reading, never running a candidate.
AGENT_TOOLS = ("arch_info", "isa_analyze", "isa_diff", "profile", "read_candidate", "docs_search", "docs_show")


@dataclass(frozen=True, kw_only=True)
class OptimizeRequest(OptimizeOptions, WithKey):
    problem: Path | None = problem_option()
    candidate: Path | None = param("The starting candidate (search: it declares KPILOT_TUNE).", short="-c",
                                   path=True)
    resume: int | None = param("Carry on this stopped run, with the options it was started with (budget and "
                               "goal, when given, replace its own).", minimum=1)

    def check(self) -> None:
        if self.resume is not None and (self.problem or self.candidate):
            raise OptionError("arguments", "resume carries on a recorded run: give no problem or candidate with it.")
        if self.resume is None and (not self.problem or not self.candidate):
            raise OptionError("arguments", "give a problem and a starting candidate, or resume a run.")


@dataclass
class AgentToolbox:
    """What the llm strategy's model may call, confined to the run's folder and its problem."""

    tools: list[Any]
    call: Callable[[str, dict[str, Any]], dict[str, Any]]


def agent_toolbox(workspace: Path, pool: Any, problem: Path) -> AgentToolbox:
    ctx = ToolContext(workspace=workspace, pool=pool, confined=True, also=(problem,))
    return AgentToolbox([REGISTRY[n] for n in AGENT_TOOLS], lambda name, args: call(name, args, ctx))


def optimize_run(opts: OptimizeRequest, on_event: Callable[[dict[str, Any]], None] | None = None):
    """Start the run ``opts`` describes (or resume one) and drive it to its end; its record."""
    from kernelpilot.loop.engine import optimize, resume

    base = OptimizeOptions(**{k: getattr(opts, k) for k in OptimizeOptions.__dataclass_fields__})
    if opts.resume is not None:
        return resume(opts.resume, opts.store, budget=opts.budget, goal=opts.goal, api_key=opts.api_key, on_event=on_event, toolbox=agent_toolbox)
    return optimize(opts.problem, opts.candidate, base, api_key=opts.api_key, on_event=on_event,
                    toolbox=agent_toolbox)


_RUN = {"type": "object"}


@register("optimize_start", """Start an optimization run in the background: `search` explores the candidate's
    declared tuning space (KPILOT_TUNE) with static pruning and successive halving; `llm` runs an agent loop
    (needs an API key in the server's environment). Returns the run id once it is recorded; follow it with
    optimize_status. A run stops when the server stops; resume it then.""", OptimizeRequest,
          shape(run="integer", store="string"))
def optimize_start(opts: OptimizeRequest, ctx: ToolContext) -> dict[str, Any]:
    started = threading.Event()
    seen: dict[str, Any] = {}

    def on_event(event: dict[str, Any]) -> None:
        if event.get("event") == "run":
            seen.update(event)
            started.set()

    def work() -> None:
        try:
            optimize_run(opts, on_event)
        except BaseException as e:           # noqa: BLE001 - said to the caller if the run never started
            seen["error"] = e
            started.set()

    threading.Thread(target=work, name="kpilot-optimize", daemon=True).start()
    started.wait()
    if "run" not in seen:
        err = seen.get("error")
        raise err if isinstance(err, KernelpilotError) else KernelpilotError(f"the run did not start: {err}")
    return {"run": seen["run"], "store": seen["store"]}


@dataclass(frozen=True, kw_only=True)
class RunsRequest(Options):
    run: int | None = param("A run id: its whole timeline (without: the list of runs).", argument=True, minimum=1)
    code: bool = param("With a run: each step's code and diff too.", False)
    trace: bool = param("With a run: each step's trace too (the model's messages, tool calls and results with "
                        "their tokens and times; each evaluation's progress events).", False)
    store: Path = store_option()


@dataclass(frozen=True, kw_only=True)
class StatusRequest(Options):
    run: int = run_id_option()
    last: int = param("How many of the latest steps.", 10, minimum=1)
    store: Path = store_option()


@register("optimize_status", """The state of an optimization run: status, why it ended, the best step and its
    speedup, and the last steps (kind, parameters or hypothesis, correct, time, speedup, error).""",
          StatusRequest, shape(run="object", steps="integer", last=array_of()))
def optimize_status(opts: StatusRequest, ctx: ToolContext) -> dict[str, Any]:
    from kernelpilot.runs.store import RunStore

    with RunStore(opts.store, create=False) as s:
        run, steps = s.run(opts.run), s.steps(opts.run)
    keep = ("n", "kind", "params", "hypothesis", "correct", "passed", "median_us", "speedup", "error")
    return {"run": run.to_json(), "steps": len(steps),
            "last": [{k: v for k, v in st.to_json(code=False, trace=False).items() if k in keep}
                     for st in steps[-opts.last:]]}


@register("runs", """The optimization runs recorded in the workspace: id, problem, strategy, status, best
    speedup; with a run id, its whole timeline and the best step's code.""", RunsRequest,
          shape(optional=("runs", "run", "steps", "best_code"), runs=array_of(), run="object", steps=array_of(),
                best_code={"type": ["string", "null"]}))
def runs(opts: RunsRequest, ctx: ToolContext) -> dict[str, Any]:
    from kernelpilot.runs.store import RunStore

    with RunStore(opts.store, create=False) as s:
        if opts.run is None:
            return {"runs": [{**r.to_json(), "steps": len(s.steps(r.id))} for r in s.runs()]}
        run, steps = s.run(opts.run), s.steps(opts.run)
    best = next((st for st in steps if st.n == run.best_step), None)
    return {"run": run.to_json(), "steps": [st.to_json(code=opts.code, trace=opts.trace) for st in steps],
            "best_code": best.code if best else None}


@dataclass(frozen=True, kw_only=True)
class ExportRequest(Options):
    run: int = run_id_option()
    out: Path | None = param("The folder for report.md and its chart (default: run-ID-report).", path=True)
    html: bool = param("Also run.html: the run in one self-contained page (a speedup chart, a step table that "
                       "sorts and filters, each step's diff, ISA, profile and trace), for a browser.", False)
    compare: int | None = param("With html: put this run beside it in the page (headers, charts, what each "
                                "reached, each one's steps).", minimum=1)
    chrome_trace: bool = param("Also trace.json: the run's timeline (steps, model turns, tool calls, evaluations) in "
                               "Chrome's trace format, for Perfetto (ui.perfetto.dev) or chrome://tracing.", False)
    store: Path = store_option()


@register("runs_export", """Write a Markdown report of one run (its options, every step with its hypothesis,
    correctness, time and speedup, and the best code) with a plot of speedup over steps.""", ExportRequest,
          shape(report="string", html="string", trace="string", optional=("html", "trace")))
def runs_export(opts: ExportRequest, ctx: ToolContext) -> dict[str, Any]:
    from kernelpilot.runs.report import export_run
    from kernelpilot.runs.store import RunStore

    out = opts.out or Path(f"run-{opts.run}-report")
    written: dict[str, Any] = {}
    with RunStore(opts.store, create=False) as s:
        written["report"] = str(export_run(s, opts.run, out))
        if opts.html:
            from kernelpilot.runs.html import run_html

            (out / "run.html").write_text(run_html(s, opts.run, compare=opts.compare))
            written["html"] = str(out / "run.html")
        if opts.chrome_trace:
            import json

            from kernelpilot.runs.chrome_trace import chrome_trace

            (out / "trace.json").write_text(json.dumps(chrome_trace(s, opts.run)))
            written["trace"] = str(out / "trace.json")
    return written
