"""The optimization loop: evaluate the starting candidate, then candidate after candidate from a proposer,
recording each finished step in the run store, until the target speedup, the budget, the end of the
proposals, or Ctrl-C. A stopped run resumes from its last recorded step (``resume``).

The ``search`` strategy proposes the points of the candidate's declared tuning space (loop/space.py),
pruned statically where an arch is known (loop/prune.py), narrowed by successive halving (loop/halving.py).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from kernelpilot.errors import KernelpilotError, UsageError
from kernelpilot.evaluate.isolation import WorkerPool
from kernelpilot.evaluate.problem import load_problem
from kernelpilot.evaluate.result import EvalResult, ratio
from kernelpilot.evaluate.runner import EvalOptions, bench, default_device, evaluate, worker_timeout_option
from kernelpilot.loop.halving import Result, next_trials
from kernelpilot.loop.llm_client import LLMChoice, LLMError
from kernelpilot.loop.prune import spec_kernels, static_verdict
from kernelpilot.loop.space import config_key, read_space
from kernelpilot.loop.step_record import (case_times, check_summary, diff, evaluation_trace, median_us,
                                          write_variant)
from kernelpilot.runs.environment import environment
from kernelpilot.runs.lock import RunLock
from kernelpilot.options import param
from kernelpilot.options import to_json as options_json
from kernelpilot.runs.store import DEFAULT_PATH, RunRecord, RunStore, StepRecord, store_option

__all__ = ["OptimizeOptions", "optimize", "resume"]

Event = Callable[[dict[str, Any]], None]
Toolbox = Callable[[Path, WorkerPool, Path], Any]     # (workspace, pool, problem) -> .tools, .call(name, args)
DEFAULT_BUDGET = 20


@dataclass(frozen=True, kw_only=True)
class OptimizeOptions(LLMChoice):
    """How a run optimizes (declared once for the Python API, the CLI and the tools: ``options.py``). The API key
    is not among them: it is never stored, and flags or the environment give it each time."""

    strategy: str = param("search: explore the candidate's declared tuning space (KPILOT_TUNE) with static pruning "
                          "and successive halving; llm: an agent loop proposing new versions.", "search",
                          choices=("search", "llm"))
    budget: int | None = param(f"Candidate evaluations at most, the start included (default {DEFAULT_BUDGET}; a "
                               "resumed run keeps its own unless given).", minimum=1)
    goal: float | None = param("Stop once a candidate is this many times faster than the start.",
                               exclusive_minimum=0)
    device: str | None = param("Where candidates run (default: cuda when present).", choices=("cuda", "cpu"))
    arch: str | None = param("Compile each variant for this arch first and drop those that spill or starve "
                             "occupancy (search).")
    cases: tuple[str, ...] = param("Time only this case.", flag="--case")
    bench_budget_s: float = param("Seconds of timing per case in the first halving round; round r gets eta**r "
                                  "times more.", 0.5, flag="--bench-budget", exclusive_minimum=0)
    min_occupancy_pct: float = param("search with arch: drop variants below this occupancy.", 12.5, minimum=0)
    eta: int = param("search: the halving factor (keep 1/eta of the variants each round).", 2, minimum=2)
    seeds: int = param("Secret random seeds per case when checking a candidate.", 2, minimum=1)
    timeout: float = worker_timeout_option()
    target: str | None = param("Where candidates run: a target's name (`kpilot target list`), every evaluation "
                               "there, the start's included; default: here.", short="-t")
    parallel: int = param("search: evaluations at once, each on a worker of its own (one per GPU of the target, "
                          "or on CPU workers); with more than one, they run through the target's workers.", 1,
                          minimum=1)
    store: Path = store_option()
    llm_retries: int = param("llm: retries with backoff on rate limits and network errors.", 4, minimum=0)
    price_in: float | None = param("llm: USD per million input tokens, for the cost per step.", minimum=0)
    price_out: float | None = param("llm: USD per million output tokens.", minimum=0)
    max_turns: int = param("llm: model turns per step.", 12, minimum=1)
    profile: bool | None = param("llm: profile each passing candidate for the agent (default: on a GPU).")
    max_failures: int = param("llm: failed submissions per step before a fresh start.", 3, minimum=1)

    def to_json(self) -> dict[str, Any]:
        return options_json(self)


class _Run:
    """One run in progress: its record, its store, where its files go, and the evaluations."""

    def __init__(self, store: RunStore, run: RunRecord, opts: OptimizeOptions, on_event: Event | None) -> None:
        self.store, self.run, self.opts, self.on_event = store, run, opts, on_event
        self.dir = Path(opts.store).parent / f"run-{run.id}"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.steps = store.steps(run.id)
        self.pool = WorkerPool()
        # Through a target's workers where one is named or several evaluations run at once (each worker a
        # process with its own pool); else here, in this process's pool.
        self.remote = opts.target not in (None, "local") or opts.parallel > 1
        self.workers: list[Any] | None = None
        self.device = run.device or opts.device or (None if self.remote else default_device())
        self.gpu = run.gpu
        self.llm_config = None

    def start_step(self) -> StepRecord:
        """Step 0: the starting candidate as it is, checked and timed (once per run). It must pass: every
        speedup is over it."""
        first = next((s for s in self.steps if s.kind == "start"), None)
        if first is None:
            start = Path(self.run.start_candidate or "")
            t0 = time.time()
            (res,) = self.evaluate_many([(start, self.opts.bench_budget_s, False)])
            params = dict(read_space(start).defaults) if self.opts.strategy == "search" else None
            first = self.record(StepRecord(kind="start", hypothesis="the starting candidate as given", params=params,
                                           code=start.read_text(), correct=res.correct, passed=res.passed,
                                           check_summary=check_summary(res), median_us=median_us(res),
                                           timing=case_times(res),
                                           speedup=1.0 if median_us(res) else None, error=res.error, started=t0))
            if res.gpu:
                self.gpu = res.gpu
                self.store.update_run(self.run.id, gpu=res.gpu)
        if not first.passed or not first.median_us:
            summary = first.check_summary or {}
            why = (first.error or "; ".join(summary.get("failed_cases", [])[:2])
                   or "; ".join(summary.get("flags", [])[:2]) or "no timing")
            raise KernelpilotError(f"the starting candidate does not pass, so nothing can be compared with it: {why}")
        self.store.update_run(self.run.id, baseline_us=first.median_us)
        self.run.baseline_us = first.median_us
        return first

    def evaluations(self) -> int:
        """Candidates evaluated so far, against the budget: the start, each variant, each proposal that came with
        code (a proposal without any was not evaluated)."""
        return sum(1 for s in self.steps if s.kind in ("start", "variant") or (s.kind == "proposal" and s.code))

    def eval_options(self, budget_s: float) -> EvalOptions:
        return EvalOptions(device=self.device, seeds=self.opts.seeds, timeout=self.opts.timeout, cases=self.opts.cases,
                           budget=budget_s, pool=self.pool)

    def evaluate_many(self, items: list[tuple[Path, float, bool]],
                      events: list[list[dict[str, Any]]] | None = None) -> list[EvalResult]:
        """Each ``(candidate, timing budget per case, bench only)``: here one after another, or on the target's
        workers, as many at once as there are workers. Results in the items' order; ``events``, when given, gets
        each evaluation's progress events (for the step's trace)."""
        seen: list[list[dict[str, Any]]] = [[] for _ in items]
        if events is not None:
            events.extend(seen)
        if not self.remote:
            return [(bench if only else evaluate)(self.run.problem, path,
                                                  self.eval_options(budget_s).replace(progress=seen[i].append))
                    for i, (path, budget_s, only) in enumerate(items)]
        from kernelpilot.targets.bundle import make_bundle
        from kernelpilot.targets.config import get_target
        from kernelpilot.targets.dispatch import open_channels, remote_options, spread

        if self.workers is None:
            self.workers = open_channels(get_target(self.opts.target), slots=self.opts.parallel)

        def work(channel: Any, i: int) -> EvalResult:
            path, budget_s, only = items[i]
            operation = "bench" if only else "eval"
            bundle = make_bundle(self.run.problem, path)
            args = remote_options(operation, self.eval_options(budget_s), bundle)
            return EvalResult.from_json(channel.run(operation, args, bundle, seen[i].append))

        results: list[EvalResult | None] = [None] * len(items)
        for i, value, error in spread(list(range(len(items))), self.workers, work):
            results[i] = value if error is None else EvalResult(
                problem=str(self.run.problem), candidate=str(items[i][0]), device=str(self.device), correct=False,
                error=f"not evaluated: {error}")
        return results

    def record(self, step: StepRecord) -> StepRecord:
        step.n = self.store.add_step(self.run.id, step)
        self.steps.append(step)
        best = self.best()
        if best is not None and best.speedup is not None:
            self.store.update_run(self.run.id, best_step=best.n, best_speedup=best.speedup)
            self.run.best_step, self.run.best_speedup = best.n, best.speedup
        if self.on_event:
            self.on_event({"event": "step", "run": self.run.id, "n": step.n, "kind": step.kind, "params": step.params,
                           "correct": step.correct, "passed": step.passed, "median_us": step.median_us,
                           "speedup": step.speedup, "best_speedup": self.run.best_speedup,
                           "error": (step.error or "")[:300] or None, "hypothesis": (step.hypothesis or "")[:300] or None,
                           "tokens_in": step.tokens_in, "tokens_out": step.tokens_out, "cost_usd": step.cost_usd,
                           "evaluations": self.evaluations(), "budget": self.opts.budget})
        return step

    def best(self) -> StepRecord | None:
        ok = [s for s in self.steps if s.passed and s.median_us]
        if not ok:
            return None
        # a later halving round times longer: among the final survivors prefer the latest measurement
        return min(ok, key=lambda s: s.median_us)

    def close(self) -> None:
        self.pool.close()
        for channel in self.workers or []:
            channel.close()


def _model(opts: OptimizeOptions, api_key: str | None):
    from kernelpilot.loop.llm_client import connect, load_config

    cfg = load_config(provider=opts.provider, model=opts.model, api_key=api_key, base_url=opts.base_url,
                      max_retries=opts.llm_retries, price_in=opts.price_in, price_out=opts.price_out)
    model = connect(cfg)
    model.verify()          # a rejected key or an unreachable endpoint: said now, not after the start's evaluation
    return opts.replace(provider=cfg.provider, model=cfg.model, base_url=cfg.base_url), (cfg, model)


def optimize(problem: str | Path, candidate: str | Path, opts: OptimizeOptions, *, api_key: str | None = None,
             on_event: Event | None = None, toolbox: Toolbox | None = None) -> RunRecord:
    """Start a run: returns its record when it ends (done, stopped, or failed). ``toolbox(workspace, pool,
    problem)`` gives the llm strategy's model the tools it may call besides submitting (``tools.runs``); without
    one it can only submit and stop."""
    opts = opts.replace(budget=opts.budget or DEFAULT_BUDGET)
    load_problem(problem)        # a malformed problem fails here, before a run is recorded
    cand = Path(candidate).resolve()
    if not cand.is_file():
        raise UsageError(f"{cand}: no such candidate file.")     # as check, bench and eval say it
    model = None
    if opts.strategy == "search":
        read_space(cand)         # a search needs a tuning space: say so before anything runs
    else:
        opts, model = _model(opts, api_key)     # no key, no SDK: say so before anything runs
    with RunStore(opts.store) as store:
        run_id = store.create_run(problem=str(Path(problem).resolve()), strategy=opts.strategy,
                                  start_candidate=str(cand), target=opts.goal, budget=opts.budget,
                                  options={**opts.to_json(), "environment": environment()},
                                  device=opts.device or default_device())
        with RunLock(opts.store, run_id):
            return _drive(store, store.run(run_id), opts, on_event, model, toolbox)


def resume(run_id: int, store_path: Path = DEFAULT_PATH, *, budget: int | None = None, goal: float | None = None,
           api_key: str | None = None, on_event: Event | None = None, toolbox: Toolbox | None = None) -> RunRecord:
    """Carry on a stopped (or killed) run from its last recorded step, with the options it was started with;
    ``budget`` and ``goal``, when given, replace its own."""
    with RunStore(store_path, create=False) as store:
        run = store.run(run_id)
        if run.status == "done":
            raise KernelpilotError(f"run {run_id} has finished ({run.stop_reason}); start a new one.")
        recorded = dict(run.options)
        if isinstance(recorded.get("target"), (int, float)):      # runs recorded when the goal was named target
            recorded["goal"] = recorded.pop("target")
        saved = OptimizeOptions(**{k: v for k, v in recorded.items() if k in OptimizeOptions.__dataclass_fields__})
        saved = saved.replace(store=Path(store_path), budget=budget if budget is not None else saved.budget,
                              goal=goal if goal is not None else saved.goal)
        with RunLock(store_path, run_id):      # before anything is changed: a second resume is refused here
            if saved.strategy == "llm":
                saved, model = _model(saved, api_key)
            else:
                model = None
            store.update_run(run_id, status="running", stop_reason=None, budget=saved.budget, target=saved.goal)
            return _drive(store, store.run(run_id), saved, on_event, model, toolbox)


def _drive(store: RunStore, run: RunRecord, opts: OptimizeOptions, on_event: Event | None, model=None,
           toolbox: Toolbox | None = None) -> RunRecord:
    if on_event:
        on_event({"event": "run", "run": run.id, "store": str(Path(opts.store).resolve()), "strategy": opts.strategy})
    r = _Run(store, run, opts, on_event)
    status, reason = "failed", "error"
    try:
        if model is not None:
            from kernelpilot.loop.agent import run_agent

            r.llm_config = model[0]
            status, reason = run_agent(r, model[1], toolbox, max_turns=opts.max_turns, max_failures=opts.max_failures)
        else:
            status, reason = _search(r)
    except KeyboardInterrupt:
        status, reason = "stopped", "interrupted"
    except LLMError as e:             # the model is out of reach for now: the run can resume later
        status, reason = "stopped", str(e)
        raise
    except KernelpilotError as e:
        status, reason = "failed", str(e)
        raise
    finally:
        r.close()
        store.update_run(run.id, status=status, stop_reason=reason, finished=time.time())
        if on_event:
            on_event({"event": "end", "run": run.id, "status": status, "reason": reason,
                      "best_step": store.run(run.id).best_step, "best_speedup": store.run(run.id).best_speedup})
    return store.run(run.id)


def _search(r: _Run) -> tuple[str, str]:
    opts, run = r.opts, r.run
    start = Path(run.start_candidate or "")
    space = read_space(start)
    base_text = space.source

    first = r.start_step()
    baseline = first.median_us

    configs = space.configs()
    by_key = {config_key(c): c for c in configs}
    pruned = {config_key(s.params or {}) for s in r.steps if s.kind == "pruned"}
    kernels = spec_kernels(base_text)
    arch = opts.arch
    if arch and kernels:
        for key, cfg in by_key.items():
            if key in pruned or any(s.kind == "variant" and config_key(_config(s)) == key for s in r.steps):
                continue
            path = write_variant(r.dir, f"static-{len(pruned)}", space.variant(cfg), r.run.start_candidate)
            v = static_verdict(path, arch, kernels, min_occupancy_pct=opts.min_occupancy_pct)
            if not v.keep:
                pruned.add(key)
                r.record(StepRecord(kind="pruned", params=cfg, hypothesis=f"static check for {arch}",
                                    isa={"arch": arch, "kernels": v.kernels}, error=v.reason))
    keys = [k for k in by_key if k not in pruned]

    start_key = config_key(space.defaults)
    while True:
        results = [Result(config_key(_config(s)), int((s.params or {}).get("round", 0)), s.median_us)
                   for s in r.steps if s.kind == "variant"]
        if start_key in keys:     # the start is the default configuration, already checked and timed in round 0
            results.append(Result(start_key, 0, first.median_us))
        trials = next_trials(keys, results, opts.eta)
        if not trials:
            return "done", "search finished"
        room = opts.budget - r.evaluations()
        if room <= 0:
            return "done", f"budget of {opts.budget} evaluations spent"
        trials = trials[:room]
        # A round's trials are independent: with several workers they run at once, recorded in order.
        items, texts = [], []
        for trial in trials:
            cfg = by_key[trial.key]
            text = space.variant(cfg)
            path = write_variant(r.dir, f"step-{len(r.steps) + len(texts)}", text, r.run.start_candidate)
            texts.append(text)
            items.append((path, opts.bench_budget_s * opts.eta ** trial.round, trial.round > 0))
        t0 = time.time()
        events: list[list[dict[str, Any]]] = []
        results = r.evaluate_many(items, events)
        for trial, text, (path, budget_s, _), res, seen in zip(trials, texts, items, results, events):
            cfg = by_key[trial.key]
            med = median_us(res)
            r.record(StepRecord(
                kind="variant", parent=first.n, params={**cfg, "round": trial.round},
                hypothesis=f"{trial.key} (successive halving round {trial.round}, {budget_s:g} s of timing per case)",
                code=text, diff=diff(base_text, text, start.name), correct=res.correct, passed=res.passed,
                check_summary=check_summary(res), median_us=med, timing=case_times(res),
                speedup=ratio(baseline, med) if med else None, error=res.error, started=t0,
                trace=[evaluation_trace(res, seen)]))
            if opts.goal and r.run.best_speedup and r.run.best_speedup >= opts.goal:
                return "done", f"goal of {opts.goal:g}x reached"
        if r.evaluations() >= opts.budget:
            return "done", f"budget of {opts.budget} evaluations spent"


def _config(step: StepRecord) -> dict[str, Any]:
    return {k: v for k, v in (step.params or {}).items() if k != "round"}


