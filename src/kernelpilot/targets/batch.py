"""`kpilot eval-batch`: many candidates on their problems, spread over a target's workers, recorded in the run
store as they finish (a stopped batch resumes where it stopped), summarized with KernelBench's fast_p.

Layout (KernelBench's generations): ``CANDIDATES/LEVEL/PROBLEM_ID/SAMPLE.py`` against ``PROBLEMS/LEVEL/`` holding
``PROBLEM_ID_NAME.py`` (KernelBench) or a problem folder named ``PROBLEM_ID...`` (native, GPU MODE). Each job is
an ``eval`` with the eager baseline; fast_p is the fraction of the candidates that are correct and more than p
times faster than eager (p = 0: correct at all).

A worker whose connection drops mid-job gives its job back: it is retried on another worker (once), then recorded
as failed; nothing is lost, and Ctrl-C ends every worker's connection, the work there with it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from kernelpilot.errors import KernelpilotError, UsageError

__all__ = ["Job", "find_jobs", "fast_p", "run_batch", "run_batch_ray", "evaluate_batch", "FAST_P"]

FAST_P = (0.0, 1.0, 1.5, 2.0)


@dataclass(frozen=True)
class Job:
    level: str
    problem_id: str
    sample: str
    problem: Path
    candidate: Path

    @property
    def key(self) -> str:
        return f"{self.level}/{self.problem_id}/{self.sample}"


def _problem_for(problems: Path, level: str, problem_id: str) -> Path | None:
    folder = problems / level
    if not folder.is_dir():
        return None
    for p in sorted(folder.iterdir()):
        stem = p.stem if p.is_file() else p.name
        if stem == problem_id or stem.split("_", 1)[0] == problem_id:
            if (p.is_file() and p.suffix == ".py") or p.is_dir():
                return p
    return None


def find_jobs(problems: Path, candidates: Path) -> tuple[list[Job], list[str]]:
    """Every candidate with its problem, in a stable order; and the candidates whose problem was not found."""
    problems, candidates = Path(problems), Path(candidates)
    if not candidates.is_dir():
        raise UsageError(f"{candidates}: not a folder of candidates (LEVEL/PROBLEM_ID/SAMPLE.py).")
    if not problems.is_dir():
        raise UsageError(f"{problems}: not a folder of problems (LEVEL/PROBLEM_ID_NAME.py or LEVEL/PROBLEM/).")
    jobs, orphans = [], []
    for cand in sorted(candidates.glob("*/*/*.py")):
        level, problem_id = cand.parent.parent.name, cand.parent.name
        problem = _problem_for(problems, level, problem_id)
        if problem is None:
            orphans.append(str(cand.relative_to(candidates)))
        else:
            jobs.append(Job(level, problem_id, cand.stem, problem, cand))
    if not jobs:
        raise UsageError(f"{candidates}: no candidate with a problem in {problems} (expected LEVEL/PROBLEM_ID/"
                         "SAMPLE.py beside PROBLEMS/LEVEL/PROBLEM_ID_NAME.py).")
    return jobs, orphans


def fast_p(rows: list[dict[str, Any]], ps: tuple[float, ...] = FAST_P) -> dict[str, float]:
    """KernelBench's fast_p over ``rows`` (each with ``correct`` and ``speedup`` over eager)."""
    n = len(rows)
    out = {}
    for p in ps:
        hits = sum(1 for r in rows if r.get("correct") and (p == 0 or (r.get("speedup") or 0) > p))
        out[f"fast_{p:g}"] = round(hits / n, 4) if n else 0.0
    return out


def _row(job: Job, result: dict[str, Any] | None, error: str | None) -> dict[str, Any]:
    if result is None:
        return {"key": job.key, "correct": False, "passed": False, "speedup": None, "median_us": None,
                "error": error, "target": None}
    eager = (result.get("baselines") or {}).get("eager") or {}
    timing = result.get("timing") or {}
    return {"key": job.key, "correct": bool(result.get("correct")), "passed": bool(result.get("passed")),
            "speedup": eager.get("speedup") if result.get("passed") else None,
            "median_us": timing.get("median_us") if result.get("passed") else None,
            "error": result.get("error"), "target": result.get("target")}


class _Tally:
    """The rows of a batch as its jobs finish: each recorded (``record``, in the calling thread) and announced as a
    progress event."""

    def __init__(self, jobs: list[Job], record: Callable[[Job, dict[str, Any]], None],
                 on_event: Callable[[dict[str, Any]], None] | None) -> None:
        self.jobs, self.record, self.on_event = jobs, record, on_event
        self.rows: dict[str, dict[str, Any]] = {}
        self.t0 = time.perf_counter()

    def finish(self, job: Job, result: dict[str, Any] | None, error: str | None) -> None:
        row = _row(job, result, error)
        self.rows[job.key] = row
        self.record(job, row)
        if self.on_event is not None:
            self.on_event({"event": "progress", "stage": "batch", "done": len(self.rows), "of": len(self.jobs),
                           "job": job.key, "passed": row["passed"], "speedup": row["speedup"],
                           "elapsed_s": round(time.perf_counter() - self.t0, 1)})

    def in_order(self) -> list[dict[str, Any]]:
        return [self.rows[j.key] for j in self.jobs if j.key in self.rows]


def run_batch(jobs: list[Job], channels: list[Any], options: Callable[[Job], tuple[dict[str, Any], Any]],
              record: Callable[[Job, dict[str, Any]], None], *, retries: int = 1,
              on_event: Callable[[dict[str, Any]], None] | None = None) -> list[dict[str, Any]]:
    """Run ``jobs`` on ``channels`` (one job at a time each; ``dispatch.spread``); ``options(job)`` gives a job's
    arguments and bundle; ``record(job, row)`` is called in this thread as each finishes. Returns the rows in job
    order."""
    from kernelpilot.targets.channel import TargetError
    from kernelpilot.targets.dispatch import spread

    def work(channel: Any, job: Job) -> dict[str, Any]:
        args, bundle = options(job)
        return channel.run("eval", args, bundle)

    tally = _Tally(jobs, record, on_event)
    try:
        for i, result, error in spread(jobs, channels, work, retries=retries, group=lambda job: job.problem):
            tally.finish(jobs[i], result, None if error is None else
                         error.message if isinstance(error, TargetError) else str(error))
    except KeyboardInterrupt:
        for c in channels:
            c.kill()
        raise
    return tally.in_order()


def run_batch_ray(jobs: list[Job], target: Any, options: Callable[[Job], tuple[dict[str, Any], Any]],
                  record: Callable[[Job, dict[str, Any]], None], *,
                  on_event: Callable[[dict[str, Any]], None] | None = None) -> list[dict[str, Any]]:
    """``run_batch`` on a Ray cluster (``ray_target.RayTarget``): at most ``target.slots`` tasks in flight; a task
    whose worker died is retried by Ray, then recorded as failed."""
    ray = target.ray
    pending: dict[Any, Job] = {}
    waiting = list(jobs)
    tally = _Tally(jobs, record, on_event)
    finish = tally.finish

    def fill() -> None:
        while waiting and len(pending) < target.slots:
            job = waiting.pop(0)
            try:
                args, bundle = options(job)
            except KernelpilotError as e:
                finish(job, None, str(e))
                continue
            pending[target.submit("eval", args, bundle)] = job

    try:
        fill()
        while pending:
            ready, _ = ray.wait(list(pending), num_returns=1)
            for ref in ready:
                job = pending.pop(ref)
                try:
                    answer = ray.get(ref)
                except Exception as e:  # noqa: BLE001 - a task that failed after Ray's retries: its job failed
                    finish(job, None, f"the Ray task failed: {type(e).__name__}: {str(e)[:300]}")
                    continue
                if "error" in answer:
                    finish(job, None, answer["error"].get("message"))
                else:
                    finish(job, {**answer["result"], "target": answer["target"]}, None)
            fill()
    except KeyboardInterrupt:
        for ref in pending:
            ray.cancel(ref, force=True)     # Ctrl-C stops the cluster's work on this batch too
        raise
    return tally.in_order()


def evaluate_batch(problems: Path, candidates: Path, job_args: Callable[[Job], tuple[dict[str, Any], Any]], *,
                   target: str | None, workers: int | None, store_path: Path, resume: int | None,
                   device: str | None, on_event: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
    """The whole of `kpilot eval-batch`: find the jobs, reach the target, record a run (or carry one on), run what
    it has not recorded, and summarize every recorded row with fast_p."""
    from kernelpilot.runs.lock import RunLock
    from kernelpilot.runs.store import RunStore, StepRecord
    from kernelpilot.targets.config import get_target
    from kernelpilot.targets.dispatch import open_channels

    jobs, orphans = find_jobs(problems, candidates)
    spec = get_target(target)
    cluster = None
    if spec.kind == "ray":                 # reach the cluster before a run is recorded
        from kernelpilot.targets.ray_target import RayTarget

        cluster = RayTarget(spec, slots=workers)
    t0 = time.perf_counter()
    try:
        with RunStore(store_path) as store:
            run_id = store.run(resume).id if resume is not None else store.create_run(
                problem=str(problems), strategy="batch", start_candidate=str(candidates), target=None,
                budget=len(jobs), options={"target": spec.name, "workers": workers}, device=device)
            with RunLock(store_path, run_id):
                seen = {(s.params or {}).get("key") for s in store.steps(run_id)}
                todo = [j for j in jobs if j.key not in seen]

                def record(job: Job, row: dict[str, Any]) -> None:
                    store.add_step(run_id, StepRecord(
                        kind="batch", params={"key": job.key, "problem": str(job.problem),
                                              "candidate": str(job.candidate)},
                        correct=row["correct"], passed=row["passed"], median_us=row["median_us"],
                        speedup=row["speedup"], error=(row["error"] or "")[:2000] or None,
                        check_summary={"target": row["target"]}))

                if cluster is not None:
                    used = cluster.slots
                    run_batch_ray(todo, cluster, job_args, record, on_event=on_event)
                else:
                    channels = open_channels(spec, slots=workers) if todo else []
                    used = len(channels)
                    try:
                        run_batch(todo, channels, job_args, record, on_event=on_event)
                    finally:
                        for c in channels:
                            c.close()
                rows = sorted(({"key": s.params["key"], "correct": s.correct, "passed": s.passed,
                                "speedup": s.speedup, "median_us": s.median_us, "error": s.error,
                                "target": (s.check_summary or {}).get("target")}
                               for s in store.steps(run_id) if s.kind == "batch"), key=lambda r: r["key"])
                store.update_run(run_id, status="done", stop_reason=f"{len(rows)} of {len(jobs)} candidates evaluated")
    finally:
        if cluster is not None:
            cluster.close()
    return {"run": run_id, "jobs": len(jobs), "evaluated": len(todo), "workers": used,
            "wall_s": round(time.perf_counter() - t0, 2), "fast_p": fast_p(rows), "rows": rows, "orphans": orphans}
