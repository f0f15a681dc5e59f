"""check, bench and eval: the parent's side. It never imports the candidate; workers do (isolation.py)."""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import shutil
import tempfile
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

from kernelpilot.errors import KernelpilotError, UsageError, shorten
from kernelpilot.evaluate.guards import scan_source
from kernelpilot.evaluate.isolation import Confinement, WorkerPool, WorkerProcess, hide_own_memory, run_job
from kernelpilot.evaluate.jobs import BenchJob, CheckJob, Job, Verdict, VerifyJob, WorkerResult
from kernelpilot.evaluate.problem_files import Seal, problem_files
from kernelpilot.evaluate.worker_env import redact, redact_json, secret_values
from kernelpilot.evaluate.problem import Problem, load_problem
from kernelpilot.evaluate.rechecks import items_to_verify
from kernelpilot.evaluate.result import Baseline, BenchCase, CaseResult, EvalResult, Flag, ratio
from kernelpilot.evaluate.roofline import floor, gpu_from_device_name
from kernelpilot.evaluate.timing import TimingOptions
from kernelpilot.options import Options, param

__all__ = ["EvalOptions", "check", "bench", "evaluate", "default_device"]


_CHECK, _BENCH = ("check", "eval", "eval_batch"), ("bench", "eval", "eval_batch")   # the operations taking each


def worker_timeout_option() -> Any:
    """The ``timeout`` option of every operation that runs candidates in workers, declared once."""
    return param("Seconds each worker process may take.", 600.0, minimum=1)


@dataclass(frozen=True, kw_only=True)
class EvalOptions(Options):
    """How check, bench and eval run a candidate: declared once for the Python API, the CLI and the tools
    (``options.py``); ``only`` marks what check or bench alone does not take. ``pool`` and ``timing`` are for
    Python callers: a pool of workers started ahead, and TimingOptions fields beyond the budget."""

    device: str | None = param("Where to run (default: cuda when a GPU is present, else cpu for check).",
                               choices=("cuda", "cpu"))
    cases: tuple[str, ...] = param("Only this case.", flag="--case")
    seeds: int = param("Secret random seeds per case.", 3, minimum=1, only=_CHECK)
    baselines: tuple[str, ...] = param("eager, compile, or a candidate file to compare with.",
                                       flag="--baseline", only=_BENCH)
    graphs: bool = param("Also time CUDA-graph replays (removes launch overhead).", False, only=_BENCH)
    budget: float = param("Seconds of timed samples per case at most.", TimingOptions.budget_s,
                          exclusive_minimum=0, only=_BENCH)
    verify: int = param("Timed calls re-checked per case, drawn from all of them once timing is over.", 16,
                        minimum=0, only=_BENCH)
    timeout: float = worker_timeout_option()
    memory_limit_gb: float | None = param("GiB of host memory a worker (with what it starts) may hold before it is "
                                          "killed (default: 80% of this machine's).", flag="--memory-limit",
                                          exclusive_minimum=0)
    writable: tuple[Path, ...] = param("A folder the candidate may write besides its own and the compilers' caches.",
                                       path=True)
    keep: Path | None = param("Keep the workers' jobs, logs and tensors in this folder.", path=True)
    sandbox: bool = param("Confine the candidate's writes to its own folder (Landlock, where the kernel has it); "
                          "--no-sandbox lets it write anywhere (debugging only; the result says so).", True,
                          tool=False)
    pool: WorkerPool | None = None
    timing: dict[str, Any] = field(default_factory=dict)
    progress: Callable[[dict[str, Any]], None] | None = None    # gets a progress event at each stage

    def timings(self) -> dict[str, Any]:
        """The TimingOptions fields this evaluation times with."""
        return {"budget_s": self.budget, **self.timing}


def default_device() -> str:
    """``cuda`` when a GPU is usable here, else ``cpu``. Asks the NVIDIA driver directly (milliseconds), so the
    parent need not import torch (seconds) before it starts the workers; torch decides where there is no
    NVIDIA driver (a ROCm build also answers to "cuda")."""
    count = _nvidia_device_count()
    if count is not None:
        return "cuda" if count > 0 else "cpu"
    try:
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"
    except ImportError:
        return "cpu"


def _nvidia_device_count() -> int | None:
    """GPUs the NVIDIA driver shows this process (CUDA_VISIBLE_DEVICES applies), or None without a driver."""
    import ctypes

    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return None
    count = ctypes.c_int(0)
    if cuda.cuInit(0) != 0:
        return 0
    if cuda.cuDeviceGetCount(ctypes.byref(count)) != 0:
        return 0
    return count.value


class _Session:
    """One evaluation's private folder (removed afterwards unless kept), the workers it started, and the seal on
    the problem's files."""

    def __init__(self, keep: Path | None, problem: Problem, box: Confinement) -> None:
        if keep is not None:
            keep.mkdir(parents=True, exist_ok=True)
            self.dir = Path(tempfile.mkdtemp(prefix="eval-", dir=keep))
        else:
            self.dir = Path(tempfile.mkdtemp(prefix="kpilot-eval-"))
        os.chmod(self.dir, 0o700)
        self.keep = keep is not None
        self.n = 0
        self.workers: list[WorkerProcess] = []
        self.box = box                  # how every worker of this evaluation is confined
        self.seal = Seal.take(problem_files(problem))
        # What identifies the problem for what a pool keeps across candidates: its definition and its files.
        text = json.dumps([problem.to_json(), self.seal.hashes], sort_keys=True, default=str)
        self.problem_key = hashlib.sha256(text.encode()).hexdigest()[:20]

    def job(self, cls: type[Job], **kw) -> Job:
        """A job of this evaluation, named by its order and kind, with the seal on the problem's files."""
        self.n += 1
        return cls(name=f"{self.n:02d}_{cls.kind}", seal=self.seal.hashes, **kw)

    def worker_dir(self, name: str) -> Path:
        return self.dir / name

    def ran(self, done: tuple[WorkerResult, WorkerProcess]) -> tuple[WorkerResult, WorkerProcess]:
        """A worker's result and process, the process noted so that ``close`` waits for it."""
        self.workers.append(done[1])
        return done

    def end_workers(self) -> None:
        """End every worker of this evaluation and wait until they and what they started are gone."""
        for w in self.workers:
            w.close()
        for w in self.workers:
            w.wait_closed(15.0)

    def close(self) -> None:
        self.end_workers()
        if not self.keep:
            shutil.rmtree(self.dir, ignore_errors=True)


def _load(problem: str | Path | Problem, candidate: str | Path) -> tuple[Problem, Path]:
    p = problem if isinstance(problem, Problem) else load_problem(problem)
    c = Path(candidate)
    if not c.is_file():
        raise UsageError(f"{c}: no such candidate file.")
    return p, c.resolve()


def _flags(raw) -> list[Flag]:
    return [Flag(f.id, f.message, f.level, dict(f.evidence)) for f in raw]


def _fatal_text(res: WorkerResult) -> str:
    text = res.fatal or ""
    if res.stderr:
        text += "\n" + res.stderr[-1500:]
    return text


def _cases(problem: Problem, names: list[str] | None, *, bench: bool) -> list[str]:
    pool = (problem.benchmark_cases or [c for c in problem.cases if not c.hidden]) if bench else problem.cases
    if not names:
        return [c.name for c in pool]
    known = {c.name for c in problem.cases + problem.benchmark_cases}
    bad = [n for n in names if n not in known]
    if bad:
        raise UsageError(f"no case named {', '.join(bad)}; cases: {', '.join(sorted(known))}.")
    return list(names)


def _verify(session: _Session, problem: Problem, device: str, items: list[dict[str, Any]], outputs: list[Path],
            timeout: float, worker: WorkerProcess, *, serving: bool) -> WorkerResult:
    job = session.job(VerifyJob, problem=problem, device=device, items=tuple(items),
                      outputs=tuple(str(o) for o in outputs))
    res = worker.request(job, timeout=timeout) if serving else worker.run(job, timeout=timeout)
    if res.fatal:
        raise KernelpilotError(f"the problem's reference failed, so nothing can be checked: "
                               f"{res.fatal if res.problem_error else _fatal_text(res)}")
    return res


def _merge_check(result: EvalResult, prob: Problem, res: WorkerResult, ref: WorkerResult | None) -> None:
    """Per-case results from the candidate's worker and the reference's verdicts; the guards' flags."""
    verified: dict[tuple[str, int], Verdict] = {}
    if ref is not None:
        result.flags.extend(_flags(ref.flags))
        verified = {(v.case, v.seed): v for v in ref.verdicts if not v.timed}
        ref_ops = set(ref.reference_ops)
        at_import = sorted(set(res.import_ops) & ref_ops)
        if at_import:
            result.flags.append(Flag("work-at-import", "the candidate runs the reference's computation when it "
                                     "is imported (answers can be precomputed there, outside every check and "
                                     "timer): " + ", ".join(at_import), "warning", {"ops": at_import}))
        fallback = sorted(set(res.candidate_ops) & ref_ops)
        if fallback:
            result.flags.append(Flag("library-fallback", "the candidate runs the reference's own library op(s): "
                                     + ", ".join(fallback), "warning", {"ops": fallback}))
    params = {c.name: c.params for c in prob.cases}
    for e in res.cases:
        v = verified.get((e.case, e.seed))
        result.cases.append(CaseResult(
            case=e.case, seed=e.seed, ok=not e.error and v is not None and v.ok,
            message=e.error or (v.message if v else ""), max_abs_err=v.max_abs_err if v else None,
            rel_err=v.rel_err if v else None, hidden=e.hidden, low_signal=v.low_signal if v else None,
            worst=list(v.worst) if v else [], params=params.get(e.case, {}),
        ))
    hidden_failed = sorted({c.case for c in result.cases if c.hidden and not c.ok})
    if hidden_failed and all(c.ok for c in result.cases if not c.hidden):
        result.flags.append(Flag("shape-specialised", "correct on every public case but wrong on shapes it was "
                                 "not shown: " + ", ".join(hidden_failed), "error", {"cases": hidden_failed}))
    result.correct = bool(result.cases) and all(c.ok for c in result.cases)


def _merge_bench(result: EvalResult, prob: Problem, res: WorkerResult, ref: WorkerResult | None) -> None:
    """Timings, re-checks of timed outputs, and the roofline floor per case."""
    checks: dict[str, list[Verdict]] = {}
    for v in ref.verdicts if ref is not None else ():
        if v.timed:
            checks.setdefault(v.case, []).append(v)
    gpu = gpu_from_device_name(result.gpu)
    by_case = {c.name: c for c in prob.cases + prob.benchmark_cases}
    for entry in res.bench:
        name = entry.case
        bc = BenchCase(case=name, params=by_case[name].params, timing=entry.timing,
                       graph_timing=entry.graph_timing, graph_error=entry.graph_error, message=entry.error)
        verdicts = checks.get(name, [])
        bc.checked = len(verdicts)
        bad = [v for v in verdicts if not v.ok]
        if entry.error:
            bc.check_ok = False
        if bad:
            bc.check_ok = False
            bc.message = bc.message or (f"{len(bad)} of {len(verdicts)} re-checked timed outputs were wrong: "
                                        f"{bad[0].message}")
            result.flags.append(Flag("timed-output-wrong", f"case {name}: outputs of timed calls were wrong "
                                     "(cached, replayed or batched results?)", "error", {"case": name}))
        try:
            bc.roofline = floor(prob.cost, by_case[name].params, gpu)
        except KernelpilotError as e:
            result.notes.append(str(e))
        if bc.roofline and bc.roofline.get("floor_us") and bc.timing:
            fl = bc.roofline["floor_us"]
            bc.roofline["fraction"] = round(fl / bc.timing.median_us, 4)
            if bc.timing.median_us < fl and result.device.startswith("cuda"):
                result.flags.append(Flag("impossible-time", f"case {name}: {bc.timing.median_us:.2f} us is below "
                                         f"the hardware floor of {fl:.2f} us ({bc.roofline['bound']}-bound)", "error",
                                         {"case": name, "median_us": bc.timing.median_us, "floor_us": fl}))
        result.bench.append(bc)


def _run(problem, candidate, opts: EvalOptions, *, do_check: bool, do_bench: bool) -> EvalResult:
    t0 = time.perf_counter()
    result = _run_timed(problem, candidate, opts, do_check=do_check, do_bench=do_bench)
    result.elapsed_s["total"] = round(time.perf_counter() - t0, 3)
    return _redacted(result)


def _redacted(result: EvalResult) -> EvalResult:
    """The result with this process's credentials blanked wherever a candidate's text carried them."""
    secrets = secret_values()
    if not secrets:
        return result
    result.error = redact(result.error, secrets) if result.error else result.error
    result.notes = [redact(n, secrets) for n in result.notes]
    for f in result.flags:
        f.message = redact(f.message, secrets)
        f.evidence = redact_json(f.evidence, secrets)
    for c in result.cases:
        c.message = redact(c.message, secrets)
        c.worst = redact_json(c.worst, secrets)
    for b in result.bench:
        b.message = redact(b.message, secrets)
    return result


def _elapsed(result: EvalResult, label: str, res: WorkerResult | None) -> None:
    """A worker's wall time (from its job to its result) and its phases, into the result."""
    if res is not None and res.seconds is not None:
        result.elapsed_s[label] = res.seconds
        for k, v in res.phases_s.items():
            result.elapsed_s[f"{label}.{k}"] = v


def _run_timed(problem, candidate, opts: EvalOptions, *, do_check: bool, do_bench: bool) -> EvalResult:
    opts = opts or EvalOptions()
    prob, cand = _load(problem, candidate)
    device = opts.device or default_device()
    if do_bench and not do_check and opts.device is None and device == "cpu":
        raise UsageError("no CUDA GPU here: kpilot bench times GPU kernels; pass --device cpu to time on the CPU "
                         "(wall-clock CPU times, not GPU times).")
    hide_own_memory()
    result = EvalResult(problem=prob.name, candidate=str(candidate), device=device,
                        correct=False if do_check else None)
    if do_check:
        result.flags.extend(scan_source(cand))
    bench_names = _cases(prob, opts.cases, bench=True) if do_bench else []
    if do_bench and device == "cpu":
        result.notes.append("times are CPU wall-clock times, not GPU times")
    box = _box(opts)          # its options checked before any process starts
    session = _Session(opts.keep, prob, box)
    # Baselines' workers start now too, importing while the candidate runs (none left over afterwards).
    base_pool = opts.pool
    if base_pool is None and do_bench and opts.baselines:
        base_pool = WorkerPool(spares=len(opts.baselines), refill=False, box=box)
        base_pool.prestart(device, warm=False, trusted=True)
    try:
        common = dict(problem=prob, candidate=str(cand), device=device, timing=opts.timings(),
                      graphs=opts.graphs, verify=opts.verify)
        key = session.problem_key
        if do_check:
            names = _cases(prob, opts.cases, bench=False)
            # In a pool, every candidate on the problem gets the same secret seeds, whose reference outputs the
            # pool's reference worker keeps; alone, the candidate's worker draws them.
            seeds = ({n: opts.pool.seeds_for(key, n, opts.seeds) for n in names} if opts.pool is not None else {})
            # The shapes that are timed are checked too, one secret seed each: a candidate right on the test
            # shapes and wrong on the benchmark's (a branch on the size) does not pass.
            for n in ([] if opts.cases else [c.name for c in prob.benchmark_cases if c.name not in names]):
                names.append(n)
                seeds[n] = opts.pool.seeds_for(key, n, 1) if opts.pool is not None else [secrets.randbelow(1 << 31)]
            job = session.job(CheckJob, cases=tuple(names), seeds=opts.seeds, seeds_by_case=seeds,
                              bench_cases=tuple(bench_names), **common)
        else:
            job = session.job(BenchJob, cases=tuple(bench_names), **common)
        # The reference's worker imports the problem before any candidate code runs (a pool's serves every
        # candidate on the problem and is up already); it gets its job afterwards.
        serving = opts.pool is not None
        if serving:
            ref_worker = opts.pool.reference(key, device, prob.to_json(), session.seal.hashes)
        else:
            ref_worker = WorkerProcess(session.worker_dir(f"{session.n + 1:02d}_reference_verify"), device,
                                       warm=True, trusted=True, box=box)
            session.workers.append(ref_worker)
            ref_worker.load(prob.to_json(), session.seal.hashes)
        # run_job returns once the candidate's supervisor has ended it and everything it started, so the
        # reference reads what it left with none of its processes alive.
        _say(opts, stage="candidate", what="checking the candidate" if do_check else "timing the candidate",
             cases=len(job.cases), device=device)
        res, cand = session.ran(run_job(job, timeout=opts.timeout, pool=opts.pool,
                                        work_dir=session.worker_dir(job.name), box=box))
        _elapsed(result, "candidate", res)
        _sandbox_note(result, res, opts)
        if res.problem_error:
            raise KernelpilotError(f"the problem's own code failed: {res.fatal}")
        result.gpu = res.gpu
        result.flags.extend(_flags(res.flags))
        if res.fatal:
            result.error = f"the candidate could not be run: {_fatal_text(res)}"
            _check_seal(session, result)
            return result
        items, journal_flags = items_to_verify(res, check=do_check, verify=opts.verify, sampled=not prob.own_check)
        result.flags.extend(journal_flags)
        outputs = [cand.dir / "candidate_outputs", cand.dir / "bench_outputs"]
        if items:
            _say(opts, stage="reference", what="computing the reference's outputs and comparing",
                 outputs=len(items))
        ref = (_verify(session, prob, device, items, outputs, opts.timeout, ref_worker, serving=serving)
               if items else None)
        _elapsed(result, "reference", ref)
        if not session.keep:
            # Verified: removed now, since a pool's worker folders outlive the evaluation and outputs can be GBs.
            for d in outputs:
                shutil.rmtree(d, ignore_errors=True)
        if ref is not None and ref.cached:
            result.notes.append(f"the reference's outputs for {ref.cached} of {len(items)} checked outputs were "
                                "kept from an earlier candidate on this problem (same secret seeds, this pool)")
        if do_check:
            _merge_check(result, prob, res, ref)
            for c in result.cases:
                _say(opts, stage="case", case=c.case, seed=c.seed, ok=c.ok, rel_err=c.rel_err, hidden=c.hidden)
        if res.bench and (not do_check or result.passed):
            _merge_bench(result, prob, res, ref)
            for b in result.bench:
                _say(opts, stage="timed", case=b.case, median_us=b.timing.median_us if b.timing else None)
            for base in opts.baselines:
                _say(opts, stage="baseline", what=f"timing the baseline {base}", baseline=base)
                _add_baseline(session, prob, device, bench_names, opts, base, result, base_pool)
        elif do_bench and do_check:
            result.notes.append("not benchmarked: the candidate failed the check" if not result.correct
                                else "not benchmarked: the candidate was rejected")
        _check_seal(session, result)
        return result
    finally:
        session.close()
        if base_pool is not None and base_pool is not opts.pool:
            base_pool.close()


def _say(opts: EvalOptions, **event: Any) -> None:
    """A progress event to the caller (a terminal line, a JSON line, an MCP progress notice); never its result."""
    if opts.progress is not None:
        opts.progress({"event": "progress", **event})


def _box(opts: EvalOptions) -> Confinement:
    memory = None if opts.memory_limit_gb is None else int(opts.memory_limit_gb * (1 << 30))
    return Confinement(memory_bytes=memory, writable=tuple(opts.writable), sandbox=opts.sandbox)


def _sandbox_note(result: EvalResult, res: WorkerResult, opts: EvalOptions) -> None:
    """Say where the candidate ran without a write sandbox, and flag processes it left running."""
    box = res.sandbox or {}
    if box and not box.get("landlock"):
        why = "turned off" if not opts.sandbox else box.get("error") or "no Landlock"
        result.notes.append(f"the candidate's process was not sandboxed ({why}): it could write outside its "
                            "folder; the problem's files were checked instead")
    strays = list(res.strays)
    if strays:
        result.flags.append(Flag("stray-processes", f"the candidate left {len(strays)} process(es) running after "
                                 "its job (daemons, background work outside every timer); they were killed: "
                                 + "; ".join(strays[:3]), "warning", {"count": len(strays), "commands": strays}))


def _check_seal(session: _Session, result: EvalResult) -> None:
    """Once every candidate process has ended: the problem's files as sealed, else the run fails and they are
    put back."""
    session.end_workers()
    changed = session.seal.changed()
    if not changed:
        return
    failed = session.seal.restore(changed)
    names = ", ".join(Path(p).name for p in changed)
    result.flags.append(Flag("problem-tampered", f"the problem's files changed while the candidate ran ({names}); "
                             + ("they were put back as they were" if not failed else
                                f"{', '.join(Path(p).name for p in failed)} could not be put back"),
                             "error", {"files": changed}))
    result.correct = False


def check(problem: str | Path | Problem, candidate: str | Path, opts: EvalOptions | None = None) -> EvalResult:
    """Correctness of ``candidate`` on every case (public and hidden) and several secret seeds."""
    return _run(problem, candidate, opts or EvalOptions(), do_check=True, do_bench=False)


def bench(problem: str | Path | Problem, candidate: str | Path, opts: EvalOptions | None = None) -> EvalResult:
    """Time ``candidate`` (and each baseline) on the benchmark cases; re-check a random sample of timed outputs.
    ``correct`` then says whether every re-checked timed output was right."""
    res = _run(problem, candidate, opts or EvalOptions(), do_check=False, do_bench=True)
    res.correct = bool(res.bench) and all(b.check_ok for b in res.bench) and res.error is None
    return res


def evaluate(problem: str | Path | Problem, candidate: str | Path, opts: EvalOptions | None = None) -> EvalResult:
    """Check, then bench when the candidate is correct and no guard rejected it (one worker process for both)."""
    return _run(problem, candidate, opts or EvalOptions(), do_check=True, do_bench=True)


def _bench_one(session: _Session, prob: Problem, device: str, names: list[str], opts: EvalOptions,
               pool: WorkerPool | None, *, candidate: str | None = None, baseline: str | None = None) -> WorkerResult:
    job = session.job(BenchJob, problem=prob, device=device, cases=tuple(names), timing=opts.timings(),
                      graphs=opts.graphs, verify=0, candidate=candidate, baseline=baseline)
    res, _ = session.ran(run_job(job, timeout=opts.timeout, pool=pool, work_dir=session.worker_dir(job.name),
                                 box=session.box))
    return res


def _add_baseline(session: _Session, prob: Problem, device: str, names: list[str], opts: EvalOptions, base: str,
                  result: EvalResult, pool: WorkerPool | None) -> None:
    if base in ("eager", "compile"):
        label = base
        # The problem's own code times the same for every candidate: a pool times it once per problem, case
        # list and timing options, and later candidates are compared with that run (the result says so).
        cache_key = (session.problem_key, json.dumps([base, device, names, opts.timings(), opts.graphs],
                                                           sort_keys=True))
        cached = opts.pool.baselines.get(cache_key) if opts.pool is not None else None
        if cached is not None:
            res = replace(cached, seconds=None, phases_s={})
            result.notes.append(f"baseline {label}: timed earlier in this pool, for an earlier candidate on this "
                                "problem")
        else:
            res = _bench_one(session, prob, device, names, opts, pool, baseline=base)
            if opts.pool is not None and not res.fatal:
                opts.pool.baselines[cache_key] = res
    else:
        path = Path(base)
        if not path.is_file():
            raise UsageError(f"--baseline {base}: not eager, compile, or a candidate file.")
        res = _bench_one(session, prob, device, names, opts, pool, candidate=str(path.resolve()))
        label = path.name
    _elapsed(result, f"baseline {label}", res)
    if res.fatal:
        result.notes.append(f"baseline {label} could not be timed: {res.fatal}")
        return
    timed = {e.case: e for e in res.bench}
    for bc in result.bench:
        e = timed.get(bc.case)
        if bc.timing and not (e and e.timing):     # said, not dropped: the case has no speedup over this baseline
            why = (e.error if e else "") or "no timing came back"
            result.notes.append(shorten(f"baseline {label} could not be timed on case {bc.case}: {why}", 1200))
        if not e or not e.timing or not bc.timing:
            continue
        graph, own = e.graph_timing, bc.graph_timing
        bc.baselines[label] = Baseline(e.timing, ratio(e.timing.median_us, bc.timing.median_us), graph,
                                       ratio(graph.median_us, own.median_us) if graph and own else None)
