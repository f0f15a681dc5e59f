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
the job's exit token; a serving reference worker writes one result per job and waits for the next. Tensors
travel in ``torch.save`` files in the worker's own folder, loaded with ``weights_only=True``.
"""

from __future__ import annotations

import importlib.util
import json
import os
import statistics
import struct
import sys
import threading
import time
import traceback
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from kernelpilot.errors import KernelpilotError
from kernelpilot.evaluate.jobs import BenchJob, CheckJob, Job, VerifyJob, job_from_json
from kernelpilot.evaluate.outputs import OutputsRejected, Rejected, load_outputs, save_outputs

__all__ = ["main"]

# Bound when the worker starts, before any candidate code runs. The variable naming the descriptor is removed
# and the descriptor is not passed to programs the worker executes.
_JOURNAL_FD = int(os.environ.pop("KPILOT_JOURNAL_FD", "-1"))
if _JOURNAL_FD >= 0:
    try:
        os.set_inheritable(_JOURNAL_FD, False)
    except OSError:
        _JOURNAL_FD = -1
_write = os.write
_dumps = json.dumps
_exit = os._exit
_close = os.close


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass


def _journal(record: dict[str, Any]) -> None:
    if _JOURNAL_FD < 0:
        return
    data = (_dumps(record, default=str) + "\n").encode()
    try:
        while data:
            data = data[_write(_JOURNAL_FD, data):]
    except OSError:
        pass


def _seed() -> int:
    return struct.unpack("<I", os.urandom(4))[0] & 0x7FFFFFFF


def _to(obj: Any, device: str, *, copy: bool = True):
    """Every tensor in a nested value on ``device``: a private copy even on the same device, or with
    ``copy=False`` moved only where it lies elsewhere."""
    import torch

    if isinstance(obj, torch.Tensor):
        return obj.detach().to(device, copy=copy)
    if isinstance(obj, tuple):
        return tuple(_to(x, device, copy=copy) for x in obj)
    if isinstance(obj, list):
        return [_to(x, device, copy=copy) for x in obj]
    if isinstance(obj, dict):
        return {k: _to(v, device, copy=copy) for k, v in obj.items()}
    if hasattr(obj, "__dataclass_fields__") and not isinstance(obj, type):
        import dataclasses

        return dataclasses.replace(obj, **{f: _to(getattr(obj, f), device, copy=copy)
                                           for f in obj.__dataclass_fields__ if obj.__dataclass_fields__[f].init})
    return obj


def _nbytes(obj: Any) -> int:
    import torch

    if isinstance(obj, torch.Tensor):
        return obj.numel() * obj.element_size()
    if isinstance(obj, (tuple, list)):
        return sum(_nbytes(x) for x in obj)
    if isinstance(obj, dict):
        return sum(_nbytes(x) for x in obj.values())
    if hasattr(obj, "__dataclass_fields__") and not isinstance(obj, type):
        return sum(_nbytes(getattr(obj, f)) for f in obj.__dataclass_fields__)
    return 0


def _plain_output(obj: Any) -> str | None:
    """Why ``obj`` is not an acceptable output, or None (see ``outputs.plain_output``)."""
    from kernelpilot.evaluate.outputs import plain_output

    return plain_output(obj)


def _sync(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()


def _cuda_broken(exc: BaseException) -> bool:
    text = str(exc)
    return any(s in text for s in ("CUDA error", "illegal memory access", "device-side assert", "CUDA-capable",
                                   "unspecified launch failure", "misaligned address", "AcceleratorError"))


def _err(exc: BaseException) -> str:
    tb = traceback.format_exception(type(exc), exc, exc.__traceback__)
    tail = "".join(tb[-3:]).strip()
    return f"{type(exc).__name__}: {exc}"[:2000] + ("\n" + tail[-1500:] if tail else "")


# Host memory for inputs made ahead (check's plan, a bench batch) when running on the CPU.
_HOST_BYTES = 4 << 30


def _cache_bytes(device: str) -> int:
    """How many bytes of expected outputs a serving reference worker keeps: a quarter of the device's memory,
    or 2 GiB on the CPU."""
    if device.startswith("cuda"):
        import torch

        return int(torch.cuda.get_device_properties(torch.cuda.current_device()).total_memory * 0.25)
    return 2 << 30


def _resident_bytes(device: str) -> int:
    """How many bytes of inputs to keep made ahead: 40% of the device's free memory (the rest serves the
    candidate, its outputs and copies), or 4 GiB on the CPU."""
    if device.startswith("cuda"):
        import torch

        free, _ = torch.cuda.mem_get_info()
        return int(free * 0.4)
    return _HOST_BYTES


class ProblemError(Exception):
    """The problem's own code failed (not the candidate's)."""


class Worker:
    def __init__(self, job: Job, work_dir: Path, *, runtime=None, state: dict | None = None) -> None:
        from kernelpilot.evaluate.formats import runtime_for

        self.job = job
        self.device = job.device
        self.problem = job.problem
        self.out_dir = Path(work_dir)
        self.state = state if state is not None else {}     # kept across the jobs of a serving reference worker
        self.result: dict[str, Any] = {"role": job.role, "mode": job.mode, "flags": [], "notes": []}
        if self.device.startswith("cuda"):
            import torch

            self.result["gpu"] = torch.cuda.get_device_name()
        try:
            self.rt = runtime if runtime is not None else runtime_for(self.problem)
        except Exception as e:
            raise ProblemError(str(e) if isinstance(e, KernelpilotError) else _err(e)) from None
        # Timing and synchronisation functions as they are before any candidate code runs: timing uses these,
        # and any replacement is reported.
        import torch  # noqa: F401

        from kernelpilot.evaluate.guards import HarnessSnapshot, TimerSnapshot

        self.timers = TimerSnapshot()
        self.clock = self.timers.functions()
        self.harness = HarnessSnapshot(skip=set(self.clock))
        # The timing functions as they are now: bench calls these, whatever the module holds later.
        from kernelpilot.evaluate import timing

        self.tools = {name: getattr(timing, name) for name in
                      ("TimingOptions", "cpu_sampler", "gpu_sampler", "graph_sampler", "measure", "side_stream_level",
                       "summarize")}
        self.tool_code = {name: getattr(fn, "__code__", None) for name, fn in self.tools.items()}

    @contextmanager
    def phase(self, name: str):
        """Add the wall time of the block to ``phases_s[name]`` (where an evaluation's seconds go)."""
        t0 = time.perf_counter()
        try:
            yield
        finally:
            phases = self.result.setdefault("phases_s", {})
            phases[name] = round(phases.get(name, 0.0) + time.perf_counter() - t0, 3)

    def flag(self, id: str, message: str, level: str = "error", **evidence) -> None:
        if any(f["id"] == id and f["message"] == message for f in self.result["flags"]):
            return   # once per distinct finding (a case runs several seeds)
        self.result["flags"].append({"id": id, "message": message, "level": level, "evidence": evidence})

    def cases(self, names: list[str]):
        return [self.problem.case(n) for n in names]

    # -------------------------------------------------------------- candidate: check

    def candidate_check(self) -> None:
        import torch

        from kernelpilot.evaluate.probe import live_threads, probe_call

        with self.phase("inputs"):
            plan = self._plan(self.cases(self.job.cases), self.job.seeds, self.job.seeds_by_case)
        threads_before = live_threads()
        path = Path(self.job.candidate)
        with self.phase("import"):
            fn, import_probe = probe_call(lambda: self.rt.load_candidate(path, self.device, 0), self.device)
        if fn is None:
            raise RuntimeError("the candidate could not be loaded")
        self.fn = fn
        # What it computed while being imported or constructed; the parent compares it with the reference's
        # ops (precomputing the answer needs them; initialising weights does not).
        self.result["import_ops"] = sorted(self._significant(import_probe.ops))
        self.result["import_kernels"] = import_probe.kernels[:20]
        with self.phase("calls"):
            cases_out = self._check_calls(fn, path, plan)
        self._check_timers()
        new_threads = sorted(live_threads() - threads_before)
        if new_threads:
            self.flag("threads", "threads the candidate started are still running after its calls: "
                      + ", ".join(new_threads[:5]), "warning", threads=new_threads)
        nondet = [c["case"] for c in cases_out if c.get("nondeterministic")]
        if nondet:
            self.flag("nondeterministic", f"two runs on the same inputs gave different outputs: {', '.join(sorted(set(nondet)))}",
                      "warning", cases=sorted(set(nondet)))
        self.result["cases"] = cases_out

    def _check_calls(self, fn, path: Path, plan) -> list[dict[str, Any]]:
        """Each planned case twice, on fresh device copies with the allocator poisoned; the first call profiled.
        Each case's first output is saved for the reference as soon as it is made (one at a time on the host);
        returns one entry per case and seed."""
        from kernelpilot.evaluate.guards import defined_kernels, fingerprint, poison_allocator
        from kernelpilot.evaluate.probe import probe_call

        writable = bool(self.problem.options.get("writable_inputs"))
        cases_out: list[dict[str, Any]] = []
        probe_done = False
        broken = None
        for n, (case, seed, inputs, fp) in enumerate(plan):
            key = f"{case.name}|{seed}"
            entry = {"case": case.name, "seed": seed, "fingerprint": fp, "hidden": case.hidden}
            cases_out.append(entry)
            plan[n] = (case, seed, None, fp)      # the plan holds its inputs no longer
            if broken:
                entry["error"] = f"not run: an earlier case left the GPU in an error state ({broken})"
                continue
            prints = []
            try:
                if inputs is None:
                    # Not kept (memory): made again from its seed; it must be what was made before the candidate
                    # was imported.
                    inputs = self.rt.make_inputs(case, seed, self.device)
                    if fingerprint(inputs) != fp:
                        entry["error"] = ("the inputs made again after the candidate was imported differ from those "
                                          "made before (a patched generator?)")
                        self.flag("input-mismatch", f"case {case.name}: inputs made after the candidate's import "
                                  "differ from those made before it", case=case.name)
                        continue
                for run in range(2):
                    dev = _to(inputs, self.device)
                    poison_allocator(self.device, 2 * _nbytes(inputs))
                    if not probe_done:
                        out, probe = probe_call(lambda: fn(*dev), self.device)
                        probe_done = True
                        self.result["probe"] = probe.to_json()
                        self._probe_flags(probe, defined_kernels(path))
                    else:
                        out = fn(*dev)
                    _sync(self.device)
                    why = _plain_output(out)
                    if why:
                        entry["error"] = f"output rejected: {why}"
                        self.flag("lazy-output", f"output is not a plain tensor: {why}")
                        break
                    prints.append(fingerprint(out))
                    if run == 0:
                        save_outputs({key: _to(out, "cpu")}, self.out_dir / "candidate_outputs" / f"{n:05d}.pt")
                        # out of the process at once: an output edited (or a file replaced) later is caught
                        _journal({"key": key, "input": fp, "output": prints[0]})
                    if not writable and fingerprint(dev) != fp and not entry.get("mutated_inputs"):
                        entry["mutated_inputs"] = True
                        self.flag("input-mutation", f"case {case.name}: the candidate modified its inputs",
                                  case=case.name)
                    del dev, out
            except Exception as e:
                entry["error"] = _err(e)
                if self.device.startswith("cuda") and _cuda_broken(e):
                    broken = str(e).splitlines()[0][:200]
                continue
            finally:
                inputs = None
            if len(prints) == 2 and prints[0] != prints[1]:
                entry["nondeterministic"] = True
        return cases_out

    def _plan(self, cases, n_seeds: int, by_case: dict[str, list[int]]) -> list[tuple[Any, int, Any, str]]:
        """Each case's inputs for each secret seed, with their fingerprints (computed where the inputs lie): made
        before the candidate is imported. Inputs are kept where they were made while they fit in a share of the
        free memory (``_resident_bytes``); the rest are made again when their case runs and must match."""
        from kernelpilot.evaluate.guards import fingerprint

        plan = []
        room = _resident_bytes(self.device)
        for case in cases:
            for seed in (by_case.get(case.name) or [_seed() for _ in range(n_seeds)]):
                inputs = self.rt.make_inputs(case, seed, self.device)
                fp = fingerprint(inputs)
                size = _nbytes(inputs)
                if size <= room:
                    room -= size
                else:
                    inputs = None
                plan.append((case, seed, inputs, fp))
        _sync(self.device)
        return plan

    def _check_timers(self) -> None:
        changed = self.timers.changed()
        if changed and not any(f["id"] == "patched-timer" for f in self.result["flags"]):
            self.flag("patched-timer", "the candidate replaced timing or synchronisation functions: "
                      + ", ".join(changed), functions=changed)
        tampered = self.harness.changed()
        if tampered and not any(f["id"] == "harness-tampered" for f in self.result["flags"]):
            self.flag("harness-tampered", "the candidate replaced functions of the harness or of the modules it "
                      "times and checks with: " + ", ".join(tampered[:8]), functions=tampered[:50])

    def _significant(self, ops) -> set[str]:
        from kernelpilot.evaluate.guards import significant_ops

        return significant_ops(set(ops))

    def _probe_flags(self, probe, own_kernels: list[str]) -> None:
        if probe.side_stream_kernels:
            self.flag("side-stream", "kernels ran on a stream other than the timed one, outside the timer: "
                      + ", ".join(probe.side_stream_kernels[:5]), kernels=probe.side_stream_kernels[:10])
        if probe.other_thread_ops:
            self.flag("other-thread", "work was launched from another thread: " + ", ".join(probe.other_thread_ops[:5]),
                      ops=probe.other_thread_ops[:10])
        if own_kernels and self.device.startswith("cuda") and probe.error is None:
            ran = [k for k in own_kernels if any(k in name for name in probe.kernels)]
            if not ran:
                self.flag("fast-path-not-run", f"the candidate defines kernels ({', '.join(own_kernels[:5])}) but none "
                          f"ran; it ran: {', '.join(probe.kernels[:5]) or 'no GPU kernels'}", "warning",
                          defined=own_kernels, ran=probe.kernels[:10])
        self.result["candidate_ops"] = sorted(self._significant(probe.ops))

    # -------------------------------------------------------------- reference: verify outputs

    def reference_verify(self) -> None:
        import torch

        from kernelpilot.evaluate.compare import compare_outputs
        from kernelpilot.evaluate.guards import fingerprint
        from kernelpilot.evaluate.probe import probe_call

        got_all: dict[str, Any] = {}
        unreadable = None
        # reference_ops and the cache of expected outputs (see _expected)
        for f in self.job.outputs:
            if Path(f).exists():
                try:
                    got_all.update(load_outputs(Path(f)))
                except OutputsRejected as e:
                    unreadable = str(e)
                    self.flag("outputs-rejected", str(e))
        items = self.job.items
        results = []
        ref_by_case: dict[str, list[str]] = {}
        for it in items:
            case = self.problem.case(it.case)
            res = {"case": case.name, "seed": it.seed, "key": it.key}
            results.append(res)
            fp, expected, expected_fp = self._expected(case, it.seed, keep=not it.timed)
            if fp != it.fingerprint:
                res.update(ok=False, message="the candidate did not receive the inputs the reference used "
                           "(its process generated or saw different data)")
                self.flag("input-mismatch", f"case {case.name}: inputs in the candidate's process differ from the "
                          "reference's (a patched generator, or a nondeterministic make_inputs)", case=case.name)
                continue
            # Compared where it was computed, in pieces (compare.py): no host copy of an output of many GB.
            ref_by_case.setdefault(case.name, []).append(expected_fp)
            if it.key not in got_all:
                res.update(ok=False, message=unreadable or "no output")
                continue
            got = got_all[it.key]
            if isinstance(got, Rejected):
                res.update(ok=False, message=f"output rejected: {got}")
                self.flag("outputs-rejected", f"an output read back from the candidate's file is not plain data: {got}")
                continue
            if it.output_fingerprint and fingerprint(got) != it.output_fingerprint:
                res.update(ok=False, message="the timed output was changed after it was taken for re-checking")
                self.flag("timed-output-tampered", f"case {case.name}: a re-checked timed output was edited in the "
                          "candidate's process after the harness took it", case=case.name)
                continue
            if it.journal_input and it.journal_input != it.fingerprint:
                res.update(ok=False, message="the inputs recorded for this timed call were changed")
                self.flag("timed-output-tampered", f"case {case.name}: the record of a timed call's inputs was "
                          "edited in the candidate's process", case=case.name)
                continue
            own = self.rt.check(_to(self.rt.make_inputs(case, it.seed, self.device), self.device),
                                _to(got, self.device), expected, case)
            if own is not None:
                ok, msg = own
                res.update(ok=bool(ok), message=str(msg or ""))
            else:
                cmp = compare_outputs(got, expected, self.problem.tolerance_for)
                res.update(cmp.to_json())
            low = _low_signal(expected, self.problem)
            if low:
                res["low_signal"] = low
        for case_name, fps in ref_by_case.items():
            if len(fps) > 1 and len(set(fps)) == 1:
                for r in results:
                    if r["case"] == case_name:
                        r["low_signal"] = "the reference output is the same for every seed"
        self.result["verdicts"] = results
        self.result["reference_ops"] = self.state.get("reference_ops", [])
        self.result["cached"] = sum(1 for it in items if self.state.get("hits", {}).get((it.case, it.seed)))

    def _expected(self, case, seed: int, *, keep: bool) -> tuple[str, Any, str]:
        """(fingerprint of the inputs, the reference's output, its fingerprint) for ``case`` and ``seed``. A
        reference worker that serves job after job (a pool's) keeps these, while they fit in a quarter of the
        device's memory, so the next candidate on the problem with the same secret seeds costs no reference run."""
        from kernelpilot.evaluate.guards import fingerprint
        from kernelpilot.evaluate.probe import probe_call

        cache = self.state.setdefault("expected", {})
        hits = self.state.setdefault("hits", {})
        if (case.name, seed) in cache:
            hits[(case.name, seed)] = True
            return cache[(case.name, seed)]
        hits.pop((case.name, seed), None)
        inputs = self.rt.make_inputs(case, seed, self.device)
        fp = fingerprint(inputs)
        ref_in = _to(inputs, self.device, copy=False)     # made for this call alone: no copy needed
        if "reference_ops" not in self.state:
            expected, probe = probe_call(lambda: self.rt.reference(ref_in, case, seed), self.device)
            self.state["reference_ops"] = sorted(self._significant(probe.ops))
        else:
            expected = self.rt.reference(ref_in, case, seed)
        _sync(self.device)
        del inputs, ref_in
        entry = (fp, expected, fingerprint(expected))
        size = _nbytes(expected)
        if keep and self.state.get("cached_bytes", 0) + size <= _cache_bytes(self.device):
            cache[(case.name, seed)] = entry
            self.state["cached_bytes"] = self.state.get("cached_bytes", 0) + size
        return entry

    # -------------------------------------------------------------- timing

    def bench(self, cases: tuple[str, ...]) -> None:
        import torch

        from kernelpilot.evaluate.guards import fingerprint

        TimingOptions, cpu_sampler, gpu_sampler, measure, side_stream_level = (
            self.tools[n] for n in ("TimingOptions", "cpu_sampler", "gpu_sampler", "measure", "side_stream_level"))
        opts = TimingOptions(**self.job.timing)
        role = self.job.role
        if role == "candidate":
            fn = getattr(self, "fn", None) or self.rt.load_candidate(Path(self.job.candidate), self.device, 0)
        else:
            fn = self.rt.baseline(self.job.baseline)
        out_cases = []
        kept: dict[str, Any] = {}
        urandom = self.clock.get("os.urandom") or os.urandom   # as it was before the candidate was imported
        for case in self.cases(cases):
            base = _seed()
            state: dict[str, Any] = {}
            keep_n = self.job.verify if role == "candidate" else 0
            slots: list[tuple[dict[str, Any], Any]] = []
            seen = [0]

            # Every timed call gets inputs no call has seen. They are generated a batch at a time before the
            # batch (untimed), so timed calls follow each other closely and the GPU keeps its clocks; warm-up
            # calls between batches use an input of their own that is never timed.
            pool: dict[int, tuple[int, Any, str | None]] = {}
            state["warm_inputs"] = self.rt.make_inputs(case, _seed(), self.device)
            in_bytes = max(_nbytes(state["warm_inputs"]), 1)
            batch = max(1, min(opts.batch, _resident_bytes(self.device) // in_bytes))

            def prepare_batch(ids: list[int]) -> None:
                pool.clear()
                state.pop("inputs", None)
                for i in ids:
                    seed = (base + 1000003 * (i + 10)) & 0x7FFFFFFF
                    inputs = self.rt.make_inputs(case, seed, self.device)
                    # fingerprinted as made: the reference regenerates them from the seed, before any call
                    pool[i] = (seed, inputs, fingerprint(inputs) if keep_n > 0 else None)
                _sync(self.device)

            def prepare(i: int) -> None:
                if i < 0:
                    state["seed"], state["inputs"], state["fp"] = None, state["warm_inputs"], None
                else:
                    state["seed"], state["inputs"], state["fp"] = pool.pop(i)

            def after(i: int, out: Any) -> None:
                # Around every timed call: the timing code is the code bound before the candidate was imported.
                if any(getattr(fn, "__code__", None) is not self.tool_code[n] for n, fn in self.tools.items()):
                    state["tampered"] = True
                if i >= 0 and "lazy" not in state:
                    why = _plain_output(out)
                    if why:
                        state["lazy"] = why
                        self.flag("lazy-output", f"a timed output is not a plain tensor: {why}")
                if "lazy" in state:
                    return      # nothing of a rejected candidate's is kept for re-checking
                if i < 0 or keep_n <= 0:
                    return
                # Reservoir sampling with os.urandom, decided after the call returned: every timed call is
                # equally likely to be re-checked, and nothing in this process tells which will be.
                t = seen[0]
                seen[0] += 1
                j = t if t < keep_n else int.from_bytes(urandom(8), "little") % (t + 1)
                if j >= keep_n:
                    return
                # A private copy on the device, and fingerprints (computed on the device: no slow host work
                # between timed calls) out of the process at once: an output edited later is caught.
                item = {"case": case.name, "seed": state["seed"], "key": f"{case.name}|bench|{state['seed']}",
                        "fingerprint": state["fp"]}
                kept_out = _to(out, self.device)
                _journal({"key": item["key"], "input": item["fingerprint"], "output": fingerprint(kept_out)})
                if j < len(slots):
                    slots[j] = (item, kept_out)
                else:
                    slots.append((item, kept_out))

            call = lambda: fn(*state["inputs"])  # noqa: E731
            entry: dict[str, Any] = {"case": case.name}
            try:
                if self.device.startswith("cuda"):
                    sampler = gpu_sampler(call, prepare=prepare, after=after, flush_l2=opts.flush_l2,
                                          flush_mode=opts.flush_mode, device=self.device, clock=self.clock)
                    timing = measure(sampler, "cuda-events", opts, prepare_batch=prepare_batch, batch=batch)
                    if sampler.host_us:
                        timing.host_median_us = round(statistics.median(sampler.host_us), 3)
                    tail = sampler.tails.excess_us()
                    if tail is not None:
                        timing.untimed_tail_us = round(tail, 3)
                        level = side_stream_level(tail, timing.median_us)
                        if level:
                            self.flag("side-stream", f"case {case.name}: the GPU stayed busy {tail:.1f} us (median) "
                                      f"after the timed stream finished ({timing.median_us:.1f} us timed): work on "
                                      "another stream or from another thread is outside the timer"
                                      + ("" if level == "error" else " (or the host woke up late: too little to "
                                         "tell from the host's own jitter)"),
                                      level=level, case=case.name, untimed_tail_us=round(tail, 3))
                else:
                    timing = measure(cpu_sampler(call, prepare=prepare, after=after, clock=self.clock),
                                     "cpu-wall-clock", opts, prepare_batch=prepare_batch, batch=batch)
                entry["timing"] = timing.to_json()
                if self.job.graphs and self.device.startswith("cuda"):
                    entry["graph_timing"] = self._graph_timing(fn, state, prepare, opts, prepare_batch, batch)
            except Exception as e:
                entry["error"] = _err(e)
                if _cuda_broken(e):
                    out_cases.append(entry)
                    break
            if state.get("tampered"):
                self.flag("harness-tampered", "the code of the harness's timing functions was replaced while "
                          f"case {case.name} was timed", case=case.name)
            self._check_timers()
            entry["verify"] = [item for item, _ in slots]
            for item, out in slots:
                kept[item["key"]] = _to(out, "cpu")
            out_cases.append(entry)
            state.clear()
        if kept:
            save_outputs(kept, self.out_dir / "bench_outputs" / "kept.pt")
        self.result["bench"] = out_cases
        self._check_timers()

    def _graph_timing(self, fn, state: dict[str, Any], prepare, opts, prepare_batch, batch: int) -> dict[str, Any]:
        """Time CUDA-graph replays of the call: new inputs are copied into the captured buffers before
        each replay (untimed), so only the kernels are timed, without launch overhead."""
        import torch

        graph_sampler, measure = self.tools["graph_sampler"], self.tools["measure"]
        static = _to(state["warm_inputs"], self.device)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(2):
                fn(*static)
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.graph(graph):
                fn(*static)
        except Exception as e:
            return {"error": f"could not capture a CUDA graph: {type(e).__name__}: {e}"[:500]}

        def prep(i: int) -> None:
            prepare(i)
            _copy_into(static, state["inputs"])

        t = measure(graph_sampler(graph, prepare=prep, flush_l2=opts.flush_l2, flush_mode=opts.flush_mode,
                                  device=self.device, clock=self.clock),
                    "cuda-graph-replay", opts, prepare_batch=prepare_batch, batch=batch)
        return t.to_json()

    def run(self) -> None:
        job = self.job
        if isinstance(job, CheckJob):
            self.candidate_check()
            # check and bench in one process (one start-up); the parent discards the timing if the check fails
            if job.bench_cases and not any(c.get("error") for c in self.result["cases"]):
                with self.phase("bench"):
                    self.bench(job.bench_cases)
        elif isinstance(job, VerifyJob):
            with self.phase("reference"):
                self.reference_verify()
        elif isinstance(job, BenchJob):
            with self.phase("bench"):
                self.bench(job.cases)
        else:
            raise ValueError(f"unknown job {type(job).__name__}")


def _copy_into(dst: Any, src: Any) -> None:
    import torch

    if isinstance(dst, torch.Tensor):
        dst.copy_(src)
    elif isinstance(dst, (tuple, list)):
        for d, s in zip(dst, src):
            _copy_into(d, s)
    elif isinstance(dst, dict):
        for k in dst:
            _copy_into(dst[k], src[k])


def _low_signal(expected: Any, problem) -> str | None:
    import torch

    from kernelpilot.evaluate.compare import flatten

    leaves = [t for _, t in flatten(expected) if isinstance(t, torch.Tensor) and t.is_floating_point() and t.numel()]
    if not leaves:
        return None
    for t in leaves:
        tol = problem.tolerance_for(str(t.dtype))
        if float(t.detach().abs().to(torch.float64).nan_to_num(0).max()) > max(tol.atol, 1e-12) * 10:
            return None
    return "the reference output is within 10x atol of zero: an all-zero answer would pass the elementwise test"


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
    if _JOURNAL_FD >= 0:
        _close(_JOURNAL_FD)
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
        w = Worker(job, work_dir, runtime=rt, state=loaded.setdefault("state", {}) if same else None)
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
