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

import queue
import threading
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


def run_batch(jobs: list[Job], channels: list[Any], options: Callable[[Job], tuple[dict[str, Any], Any]],
              record: Callable[[Job, dict[str, Any]], None], *, retries: int = 1,
              on_event: Callable[[dict[str, Any]], None] | None = None) -> list[dict[str, Any]]:
    """Run ``jobs`` on ``channels`` (one job at a time each); ``options(job)`` gives a job's arguments and bundle;
    ``record(job, row)`` is called in this thread as each finishes. Returns the rows in job order."""
    from kernelpilot.targets.channel import TargetError, TargetLost

    todo: queue.Queue = queue.Queue()
    for job in jobs:
        todo.put((job, 0))
    done: queue.Queue = queue.Queue()
    alive = len(channels)
    lock = threading.Lock()

    def work(channel) -> None:
        nonlocal alive
        while True:
            try:
                job, tries = todo.get_nowait()
            except queue.Empty:
                break
            try:
                args, bundle = options(job)
                done.put((job, channel.run("eval", args, bundle), None))
            except TargetLost as e:
                # this worker is gone: its job goes back for another (or is failed), and it takes no more
                if tries < retries:
                    todo.put((job, tries + 1))
                else:
                    done.put((job, None, str(e)))
                with lock:
                    alive -= 1
                    if alive == 0:          # no worker left: what is still waiting is failed, not lost
                        while True:
                            try:
                                left, _ = todo.get_nowait()
                            except queue.Empty:
                                break
                            done.put((left, None, "no worker left to run it"))
                return
            except TargetError as e:
                done.put((job, None, e.message))
            except KernelpilotError as e:
                done.put((job, None, str(e)))

    threads = [threading.Thread(target=work, args=(c,), daemon=True) for c in channels]
    for t in threads:
        t.start()
    rows: dict[str, dict[str, Any]] = {}
    t0 = time.perf_counter()
    try:
        while len(rows) < len(jobs):
            job, result, error = done.get()
            row = _row(job, result, error)
            rows[job.key] = row
            record(job, row)
            if on_event is not None:
                on_event({"event": "progress", "stage": "batch", "done": len(rows), "of": len(jobs), "job": job.key,
                          "passed": row["passed"], "speedup": row["speedup"],
                          "elapsed_s": round(time.perf_counter() - t0, 1)})
    except KeyboardInterrupt:
        for c in channels:
            c.kill()
        raise
    return [rows[j.key] for j in jobs if j.key in rows]


def run_batch_ray(jobs: list[Job], target: Any, options: Callable[[Job], tuple[dict[str, Any], Any]],
                  record: Callable[[Job, dict[str, Any]], None], *,
                  on_event: Callable[[dict[str, Any]], None] | None = None) -> list[dict[str, Any]]:
    """``run_batch`` on a Ray cluster (``ray_target.RayTarget``): at most ``target.slots`` tasks in flight; a task
    whose worker died is retried by Ray, then recorded as failed."""
    ray = target.ray
    pending: dict[Any, Job] = {}
    waiting = list(jobs)
    rows: dict[str, dict[str, Any]] = {}
    t0 = time.perf_counter()

    def fill() -> None:
        while waiting and len(pending) < target.slots:
            job = waiting.pop(0)
            try:
                args, bundle = options(job)
            except KernelpilotError as e:
                finish(job, None, str(e))
                continue
            pending[target.submit("eval", args, bundle)] = job

    def finish(job: Job, result: dict[str, Any] | None, error: str | None) -> None:
        row = _row(job, result, error)
        rows[job.key] = row
        record(job, row)
        if on_event is not None:
            on_event({"event": "progress", "stage": "batch", "done": len(rows), "of": len(jobs), "job": job.key,
                      "passed": row["passed"], "speedup": row["speedup"],
                      "elapsed_s": round(time.perf_counter() - t0, 1)})

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
    return [rows[j.key] for j in jobs if j.key in rows]


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
