"""The process that runs a candidate (or the reference, or a baseline): ``python -m kernelpilot.evaluate.worker
--stdin --dir DIR [--warm DEVICE]``, started by its supervisor (supervise.py), never by hand.

It imports torch and the harness, then reads the harness's messages (JSON lines on its standard input):
``{"load": ...}`` imports a problem now, before any candidate code runs, its files checked against the seal;
``{"job": ...}`` is a job (jobs.py), one per role:

- ``CheckJob``: generates every case's inputs for its secret seeds BEFORE importing the candidate, imports it
  (profiled, timers and the harness's functions snapshotted), runs each case twice on fresh copies of the inputs
  with the allocator poisoned, verifies the inputs are unchanged, and saves the outputs; then, with
  ``bench_cases``, times those cases in the same process.
- ``VerifyJob``: in a separate process, regenerates the same inputs from the seeds, checks they are the ones the
  candidate got (fingerprints), computes the reference (or takes it from what it kept for an earlier job) and
  compares.
- ``BenchJob``: times the call with new inputs every sample, keeping a random few outputs (chosen after each call
  from os.urandom) for the reference to verify.

The result goes to the parent as one record in the worker's journal (a pipe), after which the process ends with
the job's exit token; a serving reference worker writes one result per job and waits for the next. Outputs
travel as data (``outputs.py``: an index and raw tensor bytes) in the worker's own folder.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import threading
from pathlib import Path
from typing import Any

from kernelpilot.errors import KernelpilotError
from kernelpilot.evaluate import extension_builds
from kernelpilot.evaluate import worker_base as base
from kernelpilot.evaluate.jobs import BenchJob, CheckJob, Job, VerifyJob, job_from_json
from kernelpilot.evaluate.worker_base import ProblemError, _close, _err, _exit, _flush, _journal

__all__ = ["main", "worker_for"]


def worker_for(job: Job, work_dir: Path, *, runtime=None, state: dict | None = None) -> base.Worker:
    """The worker class of the job's role."""
    from kernelpilot.evaluate.worker_bench import BenchWorker
    from kernelpilot.evaluate.worker_check import CheckWorker
    from kernelpilot.evaluate.worker_verify import VerifyWorker

    cls = {CheckJob: CheckWorker, BenchJob: BenchWorker, VerifyJob: VerifyWorker}.get(type(job))
    if cls is None:
        raise ValueError(f"unknown job {type(job).__name__}")
    return cls(job, work_dir, runtime=runtime, state=state)


def _start_triton_key() -> threading.Thread | None:
    """Compute Triton's version key (a hash of its compiler, about 500 MB with libtriton) on a thread while the
    worker sets up (CUDA context, problem, inputs): a Triton kernel's first call needs it even when the kernel
    comes from Triton's cache. Hashing and file reads release the GIL, so the main thread goes on meanwhile."""
    if importlib.util.find_spec("triton") is None:
        return None

    def key() -> None:
        try:
            from triton.runtime.cache import triton_key

            triton_key()
        except Exception:
            pass   # a Triton without it (or broken) computes what it needs on its first call, as usual

    t = threading.Thread(target=key, name="kpilot-triton-key", daemon=True)
    t.start()
    return t


def _warm_up(device: str) -> None:
    """Create the CUDA context and start the profiler once, before the job (and any candidate code)."""
    try:
        import torch

        from kernelpilot.evaluate.probe import probe_call

        x = torch.zeros(16, device=device)
        probe_call(lambda: x.add_(1), device)
    except Exception:
        pass   # the job meets the same failure and reports it


def _messages(stream):
    """The harness's messages, one JSON object a line."""
    for line in stream:
        line = line.strip()
        if line:
            yield json.loads(line)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    try:
        import torch  # noqa: F401
    except ImportError:
        pass   # the job reports it
    extension_builds.guard_locks()   # a build a killed worker left half done does not hold up this one's
    triton_key = _start_triton_key()   # after torch: both read hundreds of MB of libraries
    # Started ahead of its job: do the slow imports now, then wait for the messages.
    import kernelpilot.evaluate.compare  # noqa: F401
    import kernelpilot.evaluate.formats  # noqa: F401

    if "--warm" in args:
        _warm_up(args[args.index("--warm") + 1])
    work_dir = Path(args[args.index("--dir") + 1]) if "--dir" in args else Path(os.environ.get("TMPDIR", "."))
    _journal({"ready": True})   # started up (a pool waiting for its workers reads this)
    loaded: dict[str, Any] = {}
    result: dict[str, Any] = {"fatal": "the worker was given no job", "flags": []}
    token = 0
    try:
        for msg in _messages(sys.stdin):
            if "load" in msg:
                loaded = _preload(msg["load"])
                continue
            if "job" in msg:
                raw = msg["job"]
                serve = bool(raw.pop("serve", False))
                # Only here, in this frame: the status the parent expects this process to end with.
                token = int(raw.pop("exit_token", 0))
                del msg
                job = job_from_json(raw)
                if serve:
                    # A reference worker serving job after job (it never runs candidate code): one result each.
                    _journal({"result": _run_job(job, work_dir, loaded, triton_key)})
                    continue
                result = _run_job(job, work_dir, loaded, triton_key)
                break
    except (ValueError, KeyError, TypeError) as e:
        result = {"fatal": f"the harness sent a message the worker cannot read: {e}", "flags": []}
    _flush()
    _journal({"result": result})
    if base._JOURNAL_FD >= 0:
        _close(base._JOURNAL_FD)
    _exit(token)   # at once: do not wait for threads the candidate may have left running


def _preload(load: dict[str, Any]) -> dict[str, Any]:
    """Import a problem's code before any candidate runs (its files checked against the parent's seal); the
    job that follows uses it. A failure is kept and reported by that job."""
    from kernelpilot.evaluate.problem_files import verify_seal

    try:
        from kernelpilot.evaluate.problem import Problem

        problem = Problem.from_json(load["problem"])
        changed = verify_seal(load.get("seal") or {})
        if changed:
            return {"error": f"the problem's files changed since they were loaded: {', '.join(changed)}"}
        from kernelpilot.evaluate.formats import runtime_for

        return {"problem": load["problem"], "runtime": runtime_for(problem)}
    except Exception as e:
        return {"error": str(e) if isinstance(e, KernelpilotError) else _err(e)}


def _run_job(job: Job, work_dir: Path, loaded: dict[str, Any], triton_key) -> dict[str, Any]:
    problem = job.problem.to_json()
    try:
        if loaded.get("error") and loaded.get("problem", problem) == problem:
            raise ProblemError(loaded["error"])
        same = loaded.get("problem") == problem
        rt = loaded.get("runtime") if same else None
        if getattr(job, "candidate", None):
            extension_builds.use_folder_for(Path(job.candidate))   # its extensions built apart from other candidates'
        w = worker_for(job, work_dir, runtime=rt, state=loaded.setdefault("state", {}) if same else None)
        if triton_key is not None:
            triton_key.join()   # before any candidate code runs (its threads are watched from then on)
        w.run()
        return w.result
    except ProblemError as e:
        return {"role": job.role, "mode": job.mode, "fatal": str(e), "problem_error": True, "flags": []}
    except KernelpilotError as e:   # a message written for the user: no traceback
        return {"role": job.role, "mode": job.mode, "fatal": str(e), "flags": []}
    except Exception as e:
        return {"role": job.role, "mode": job.mode, "fatal": _err(e), "flags": []}


if __name__ == "__main__":
    main()
