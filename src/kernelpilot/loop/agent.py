"""The ``llm`` strategy: an agent with tools proposes candidate after candidate.

Each step is a fresh conversation. The model sees the problem (its reference and cases), the current best
kernel with its time and speedup, the GPU, and the history of the run (every hypothesis, whether it passed,
its speedup or why it failed). It may call the analysis tools (arch_info, isa_analyze, isa_diff, profile,
read_candidate, docs_search; tools.py) and ends the step with ``submit_candidate`` (a written hypothesis and the whole
new file). The loop checks and times the submission and records it as a step; a submission that does not
compile, is wrong or is rejected by a guard goes back to the model as the tool's error, for a bounded
number of retries. ``stop_optimizing`` ends the run. Tokens and cost are recorded on each step.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from kernelpilot.errors import KernelpilotError
from kernelpilot.evaluate.result import ratio
from kernelpilot.loop.llm_client import ChatModel, Reply, ToolSpec, Turn
from kernelpilot.loop.step_record import (case_times, check_summary, diff, evaluation_trace, median_us,
                                          write_variant)
from kernelpilot.loop.trace import Trace
from kernelpilot.runs.store import StepRecord

__all__ = ["run_agent", "SYSTEM_PROMPT"]

RESULT_LIMIT = 20_000          # characters of a tool result shown to the model

SYSTEM_PROMPT = """You are a GPU kernel engineer optimizing one kernel for speed without changing its results.
Work as an expert does: read the current kernel, analyze its machine code (isa_analyze) and, where a GPU is
present, its profile; form one concrete hypothesis about what limits it; change the code to test it.
End every step by calling submit_candidate with your hypothesis (one or two sentences: what limits the
kernel, the change, and the evidence) and the complete new file. The file must keep the same entry point and
signature. It is checked against the reference on every case with secret seeds, inputs it must not modify,
and guards against timing tricks (side streams, caching, patched timers, lazy outputs): only genuine speedups
count. If the check fails you get the error and may fix it. Call stop_optimizing when you have nothing
better to try."""

_SUBMIT = ToolSpec("submit_candidate", "Submit a new version of the kernel: it is checked for correctness, then "
               "timed against the start. Give the whole file, not a diff.",
               {"type": "object", "additionalProperties": False, "required": ["hypothesis", "code"],
                "properties": {"hypothesis": {"type": "string", "description": "What limits the kernel, what you "
                                                                               "changed, and the evidence."},
                               "code": {"type": "string", "description": "The complete new candidate file."}}})
_STOP = ToolSpec("stop_optimizing", "End the run: nothing better to try.",
             {"type": "object", "additionalProperties": False, "required": ["reason"],
              "properties": {"reason": {"type": "string", "description": "Why."}}})


def _history_table(steps: list[StepRecord]) -> str:
    lines = []
    for s in steps:
        if s.kind == "start":
            lines.append(f"- step {s.n}: the start, {s.median_us} us")
        elif s.kind == "proposal":
            result = (f"passed, {s.median_us} us, {s.speedup}x over the start" if s.passed
                      else f"FAILED: {_failure(s)[:300]}")
            lines.append(f"- step {s.n}: {s.hypothesis or '-'} -> {result}")
    return "\n".join(lines)


def _failure(s: StepRecord) -> str:
    c = s.check_summary or {}
    parts = [s.error or ""] + c.get("failed_cases", [])[:3] + [f for f in c.get("flags", []) if f.startswith("error")][:3]
    return " | ".join(p for p in parts if p) or "not correct"


def _problem_text(problem: str) -> str:
    p = Path(problem)
    texts = []
    files = ([p / "problem.toml", p / "reference.py", p / "task.yml"] if p.is_dir() else [p])
    for f in files:
        if f.is_file():
            texts.append(f"### {f.name}\n```\n{f.read_text()[:8000]}\n```")
    return "\n\n".join(texts)


def target_arch(r) -> str | None:
    """The arch to analyze candidates for: ``--arch``, else the GPU's."""
    if r.opts.arch:
        return r.opts.arch
    from kernelpilot.evaluate.roofline import gpu_from_device_name

    g = gpu_from_device_name(r.gpu)
    return g.arch if g is not None else None


def candidate_isa(r, path: Path, code: str) -> dict[str, Any] | None:
    """The ISA summary of each Triton kernel the candidate names in KPILOT_SPECS, compiled for the target arch
    (None without an arch or such a declaration)."""
    from kernelpilot.loop.prune import analyze_file, isa_summary, spec_kernels

    arch = target_arch(r)
    kernels = spec_kernels(code)
    if not arch or not kernels:
        return None
    return {"arch": arch, "kernels": {k: isa_summary(analyze_file(path, arch, k)) for k in kernels}}


def candidate_profile(r, box, path: Path, n: int) -> dict[str, Any] | None:
    """Each kernel of the candidate on the problem's first benchmark case, profiled (ncu, else the PyTorch
    profiler): time, bound and the first diagnoses. None when profiling is off (default: on a GPU only)."""
    on = r.opts.profile if r.opts.profile is not None else r.device.startswith("cuda")
    if not on or box is None:
        return None
    args = {"problem": r.run.problem, "candidate": str(path), "launch_count": 20, "out": str(r.dir),
            "name": f"profile-{n}"}
    try:
        prof = box.call("profile", args)
    except KernelpilotError as e:
        try:
            prof = box.call("profile", {**args, "tool": "torch"})
            prof.setdefault("notes", []).insert(0, f"ncu: {e}")
        except KernelpilotError as e2:
            return {"error": str(e2)[:500]}
    return step_profile(prof)


def step_profile(prof: dict[str, Any]) -> dict[str, Any]:
    """What a step keeps of a profile (``kpilot profile``'s JSON): per kernel (the first 8) its time, grid, waves,
    bound, occupancy, throughput, three largest stalls and three first diagnoses; the first three notes."""
    return {"tool": prof.get("tool"), "notes": prof.get("notes", [])[:3],
            "kernels": [{"name": k["name"], "duration_us": k.get("duration_us"), "grid": k.get("grid"),
                         "waves_per_sm": k.get("waves_per_sm"), "bound": k.get("bound"),
                         "occupancy": k.get("occupancy"), "throughput": k.get("throughput"),
                         "top_stalls": (k.get("stalls") or [])[:3],
                         "diagnoses": [f"{d['id']}: {d['title']} -> {d['suggestion']}" for d in k.get("diagnoses", [])[:3]]}
                        for k in prof.get("kernels", [])[:8]]}


def _context(run, best: StepRecord, steps: list[StepRecord], gpu: str | None) -> str:
    isa = ("## Its machine code (isa_analyze)\n```json\n" + json.dumps(best.isa, indent=1)[:6000] + "\n```\n\n"
           if best.isa else "")
    if best.profile:
        isa += "## Its profile\n```json\n" + json.dumps(best.profile, indent=1)[:6000] + "\n```\n\n"
    return (f"## Problem\n{_problem_text(run.problem)}\n\n"
            f"## Current best kernel (step {best.n}, {best.median_us} us, {best.speedup}x over the start; "
            f"also in the workspace as best.py)\n```python\n{best.code}\n```\n\n{isa}"
            f"## Where it runs\n{gpu or run.device or 'unknown device'} (arch_info for the facts)\n\n"
            f"## History of this run\n{_history_table(steps)}\n\n"
            "Analyze, form a hypothesis, and call submit_candidate with the whole new file.")


def run_agent(r, model: ChatModel, toolbox=None, *, max_turns: int = 12, max_failures: int = 3) -> tuple[str, str]:
    """Steps until the budget, the target, or the model stops. ``r`` is the engine's run in progress;
    ``toolbox(workspace, pool, problem)`` the tools the model may call (confined to the run's folder and its
    problem) besides submitting and stopping."""
    opts, run = r.opts, r.run
    first = r.start_step()
    box = toolbox(r.dir, r.pool, Path(run.problem)) if toolbox is not None else None
    tools = [*(box.tools if box is not None else ()), _SUBMIT, _STOP]
    names = [t.name for t in tools]
    while True:
        if r.evaluations() >= opts.budget:
            return "done", f"budget of {opts.budget} evaluations spent"
        best = r.best() or first
        best_file = write_variant(r.dir, "best", best.code or "", run.start_candidate)
        if best.isa is None and best.code:
            best.isa = candidate_isa(r, best_file, best.code)
        if best.profile is None and best.code:
            best.profile = candidate_profile(r, box, best_file, best.n or 0)
        if opts.parallel > 1:
            status = _parallel_step(r, model, box, tools, names, best, max_turns)
            if status is not None:
                return status
            if opts.goal and r.run.best_speedup and r.run.best_speedup >= opts.goal:
                return "done", f"goal of {opts.goal:g}x reached"
            continue
        history, trace, tokens = _conversation(r, best)
        failures, passed = 0, False
        for _ in range(max_turns):
            reply = _turn(model, history, tools, tokens, trace)
            if reply is None:
                continue
            results: list[tuple[str, str, bool]] = []
            for c in reply.tool_calls:
                if c.name == "stop_optimizing":
                    return "done", f"the model stopped: {str(c.arguments.get('reason', ''))[:200]}"
                if c.name == "submit_candidate":
                    if r.evaluations() >= opts.budget:
                        return "done", f"budget of {opts.budget} evaluations spent"
                    step = _submit(r, c.arguments, best, tokens, trace)
                    tokens = [0, 0]
                    if step.passed:
                        passed = True
                        results.append((c.id, f"passed: {step.median_us} us, {step.speedup}x over the start "
                                              f"(best so far {r.run.best_speedup}x). Step {step.n} recorded.", False))
                    else:
                        failures += 1
                        results.append((c.id, f"the candidate failed (step {step.n} recorded): {_failure(step)}", True))
                    trace.tool(c.id, c.name, results[-1][1], results[-1][2], 0.0)
                    if opts.goal and r.run.best_speedup and r.run.best_speedup >= opts.goal:
                        return "done", f"goal of {opts.goal:g}x reached"
                    continue
                results.append(_tool(trace, c.id, c.name, c.arguments, box, names))
            history.append(Turn("tool", results=results))
            if passed or failures >= max_failures or r.evaluations() >= opts.budget:
                break


def _turn(model: ChatModel, history: list[Turn], tools, tokens: list[int], trace: Trace) -> Reply | None:
    """The model's next turn, added to ``history`` (and the trace) with its tokens counted; None (and a nudge
    added) when it called no tool."""
    t0 = time.perf_counter()
    reply: Reply = model.reply(SYSTEM_PROMPT, history, tools)
    trace.assistant(reply, time.perf_counter() - t0)
    tokens[0] += reply.tokens_in
    tokens[1] += reply.tokens_out
    history.append(Turn("assistant", reply.text, reply.tool_calls))
    if reply.tool_calls:
        return reply
    nudge = "Call submit_candidate with your hypothesis and the whole new file, or stop_optimizing."
    history.append(Turn("user", nudge))
    trace.user(nudge)
    return None


def _tool(trace: Trace, cid: str, name: str, args: dict[str, Any], box, names: list[str]) -> tuple[str, str, bool]:
    """A tool call, run and traced."""
    t0 = time.perf_counter()
    result = _run_tool(cid, name, args, box, names)
    trace.tool(cid, name, result[1], result[2], time.perf_counter() - t0)
    return result


def _conversation(r, best: StepRecord) -> tuple[list[Turn], Trace, list[int]]:
    """A new conversation from the run's context: its history, its trace (scrubbed of the key in use) and its
    token counts."""
    context = _context(r.run, best, r.steps, r.gpu)
    cfg = r.llm_config
    trace = Trace({cfg.api_key: "api key"} if cfg is not None and getattr(cfg, "api_key", None) else {})
    trace.user(context)
    return [Turn("user", context)], trace, [0, 0]


def _parallel_step(r, model: ChatModel, box, tools, names: list[str], best: StepRecord,
                   max_turns: int) -> tuple[str, str] | None:
    """One step of ``--parallel N``: N conversations from the same context, each ending at its submission (or
    its turns), then the N submissions evaluated at once on the run's workers and recorded. A failure is not fed
    back within the step: the next step's history shows it. Returns the run's end, or None to go on."""
    opts = r.opts
    prepared: list[tuple[StepRecord, Path | None]] = []
    room = opts.budget - r.evaluations()
    for _ in range(min(opts.parallel, room)):
        history, trace, tokens = _conversation(r, best)
        submitted = False
        for _ in range(max_turns):
            reply = _turn(model, history, tools, tokens, trace)
            if reply is None:
                continue
            results: list[tuple[str, str, bool]] = []
            for c in reply.tool_calls:
                if c.name == "stop_optimizing":
                    _evaluated(r, prepared)
                    return "done", f"the model stopped: {str(c.arguments.get('reason', ''))[:200]}"
                if c.name == "submit_candidate" and not submitted:
                    prepared.append(_prepare(r, c.arguments, best, tokens, trace, slot=len(prepared)))
                    submitted = True
                    continue
                results.append(_tool(trace, c.id, c.name, c.arguments, box, names))
            if submitted:
                break
            history.append(Turn("tool", results=results))
    _evaluated(r, prepared)
    if not prepared:
        return "done", "the model submitted nothing"
    if r.evaluations() >= opts.budget:
        return "done", f"budget of {opts.budget} evaluations spent"
    return None


def _run_tool(cid: str, name: str, args: dict[str, Any], box, names: list[str]) -> tuple[str, str, bool]:
    if box is None or name not in names or name in (_SUBMIT.name, _STOP.name):
        return cid, f"no tool named {name!r} here; use {', '.join(names)}.", True
    try:
        out = json.dumps(box.call(name, args), default=str)
    except KernelpilotError as e:
        return cid, f"{type(e).__name__}: {e}", True
    except Exception as e:   # a tool's bug must not end the run: the model hears of it
        return cid, f"the tool failed: {type(e).__name__}: {e}", True
    if len(out) > RESULT_LIMIT:
        out = out[:RESULT_LIMIT] + f"... [{len(out) - RESULT_LIMIT} more characters]"
    return cid, out, False


def _prepare(r, args: dict[str, Any], parent: StepRecord, tokens: list[int], trace: Trace | None = None,
             slot: int = 0) -> tuple[StepRecord, Path | None]:
    """A submission as a step to record, and the file its code was written to (None: nothing to evaluate)."""
    code = args.get("code")
    hypothesis = str(args.get("hypothesis") or "")[:2000]
    cfg = r.llm_config
    cost = None
    if cfg is not None and cfg.price_in is not None and cfg.price_out is not None:
        cost = round((tokens[0] * cfg.price_in + tokens[1] * cfg.price_out) / 1e6, 6)
    step = StepRecord(kind="proposal", parent=parent.n, hypothesis=hypothesis, tokens_in=tokens[0],
                      tokens_out=tokens[1], cost_usd=cost, started=time.time(),
                      trace=trace.take() if trace is not None else None)
    if not isinstance(code, str) or not code.strip():
        step.correct, step.passed, step.error = False, False, "submit_candidate needs the whole file in `code`"
        return step, None
    path = write_variant(r.dir, f"step-{len(r.steps) + slot}", code, r.run.start_candidate)
    step.code, step.isa = code, candidate_isa(r, path, code)
    step.diff = diff(parent.code or "", code, Path(r.run.start_candidate or "candidate.py").name)
    return step, path


def _evaluated(r, prepared: list[tuple[StepRecord, Path | None]]) -> list[StepRecord]:
    """Evaluate the prepared submissions (at once, where the run has several workers) and record each."""
    runnable = [(step, path) for step, path in prepared if path is not None]
    events: list[list[dict[str, Any]]] = []
    results = iter(zip(r.evaluate_many([(path, r.opts.bench_budget_s, False) for _, path in runnable], events),
                       events))
    out = []
    for step, path in prepared:
        if path is not None:
            res, seen = next(results)
            step.trace = [*(step.trace or []), evaluation_trace(res, seen)]
            med = median_us(res)
            step.correct, step.passed, step.check_summary = res.correct, res.passed, check_summary(res)
            step.median_us, step.timing, step.error = med, case_times(res), res.error
            step.speedup = ratio(r.run.baseline_us, med) if med and r.run.baseline_us else None
        out.append(r.record(step))
    return out


def _submit(r, args: dict[str, Any], parent: StepRecord, tokens: list[int], trace: Trace | None = None) -> StepRecord:
    (step,) = _evaluated(r, [_prepare(r, args, parent, tokens, trace)])
    return step
