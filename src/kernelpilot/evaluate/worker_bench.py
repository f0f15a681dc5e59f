"""Timing a candidate or a baseline (``BenchJob``), and the timing a check runs after it (``CheckJob`` with
``bench_cases``): every sample on new inputs made for it just before it, a sample of every timed output journaled
for the reference (and a few whole outputs), the timing functions bound before the candidate was imported. Runs
only in worker processes."""

from __future__ import annotations

import os
import statistics
import time
from pathlib import Path
from typing import Any

from kernelpilot.evaluate.jobs import output_key
from kernelpilot.evaluate.outputs import save_outputs
from kernelpilot.evaluate import worker_base as _base
from kernelpilot.evaluate.timing import TimingTampered, keep_busy
from kernelpilot.evaluate.worker_base import (Worker, _copy_into, _cuda_broken, _err, _journal, _journal_identity,
                                             _nbytes, _new_step, _plain_output, _seed, _sync, _to)

__all__ = ["TimingWorker", "BenchWorker"]

# Whole timed outputs kept for the reference to re-check, per case: up to ``_FULL_KEPT`` while they fit in
# ``_KEEP_BYTES``, and always one; where the problem has its own check, up to the job's ``verify`` while they fit
# in ``_MORE_BYTES``. Every timed call leaves a sample besides (sampling.py).
_KEEP_BYTES = 2 << 30
_FULL_KEPT = 3
# Beyond ``_FULL_KEPT`` (a problem with its own check, re-checked on whole outputs only), as many as fit in this.
_MORE_BYTES = 256 << 20
# Making a call's inputs longer than this leaves the GPU idle long enough to lower its clocks: it is kept busy
# for as long before the call (timing.keep_busy).
_IDLE_S = 0.002


def _fresh_seed(urandom, used: set[int]) -> int:
    """A secret seed for one timed call's inputs, from ``urandom`` and not in ``used`` (then added): each call's
    inputs, and the key its output travels under, are its own."""
    while True:
        seed = int.from_bytes(urandom(4), "little") & 0x7FFFFFFF
        if seed not in used:
            used.add(seed)
            return seed


class TimingWorker(Worker):
    """A worker that times calls (a candidate's or a baseline's), or runs candidate code at all: it takes the
    snapshots of the timers and of the harness's own functions before any candidate code runs."""

    def __init__(self, job, work_dir: Path, *, runtime=None, state: dict | None = None) -> None:
        super().__init__(job, work_dir, runtime=runtime, state=state)
        import torch

        if self.device.startswith("cuda"):
            # The CUDA context made now, as a warm worker's is, so that PersistingL2 below reads the L2 set-aside
            # the context starts with (some machines' contexts start with one) and does not count its first
            # clearing as the candidate's: a worker started cold, as for a bench job, has no context yet.
            try:
                torch.zeros(1, device=self.device)
            except Exception:
                pass   # the job meets the same failure and reports it

        from kernelpilot.evaluate import sampling, timing
        from kernelpilot.evaluate.guards import HarnessSnapshot, HookSnapshot, TimerSnapshot, fingerprint, harness_modules
        from kernelpilot.evaluate.pyload import imported_files

        # Timing and synchronisation functions as they are now: timing uses these, and a replacement is reported.
        self.timers = TimerSnapshot()
        self.clock = self.timers.functions()
        # The L2's persisting lines, demoted before every flush by driver functions bound now (timing.PersistingL2).
        self.persisting = timing.PersistingL2(self.clock.get("torch.cuda.synchronize"))
        self.clock["cuda.persisting_l2"] = self.persisting
        self.harness = HarnessSnapshot(harness_modules(), skip=set(self.clock), problem_modules=imported_files())
        self.take_sample, self.fingerprint = sampling.take_sample, fingerprint
        # Python's profile, trace and monitoring hooks as they are now: one installed since is reported.
        self.hooks = HookSnapshot()
        # The timing functions as they are now: bench calls these, whatever the module holds later.
        self.tools = {name: getattr(timing, name) for name in
                      ("TimingOptions", "cpu_sampler", "gpu_sampler", "graph_sampler", "measure", "side_stream_level",
                       "summarize")}
        self.tool_code = {name: getattr(fn, "__code__", None) for name, fn in self.tools.items()}
        # The journal as it is now: a timed call's record goes there, and a journal moved or closed since is said.
        self.journal = _journal_identity()

    def _check_timers(self) -> None:
        changed = self.timers.changed()
        if changed and not any(f["id"] == "patched-timer" for f in self.result["flags"]):
            self.flag("patched-timer", "the candidate replaced timing or synchronisation functions: "
                      + ", ".join(changed), functions=changed)
        hooked = self.hooks.changed()
        if hooked and not any(f["id"] == "harness-tampered" and "installed" in f["message"]
                              for f in self.result["flags"]):
            self.flag("harness-tampered", "the candidate installed code that runs inside whatever runs ("
                      + ", ".join(hooked) + "): inside the harness's code too", hooks=hooked)
        tampered = self.harness.changed()
        if tampered and not any(f["id"] == "harness-tampered" for f in self.result["flags"]):
            self.flag("harness-tampered", "the candidate replaced functions of the harness, of torch, of the "
                      "problem's files or of the modules they time and check with: " + ", ".join(tampered[:8]),
                      functions=tampered[:50])

    def bench(self, cases: tuple[str, ...]) -> None:
        fingerprint, take_sample = self.fingerprint, self.take_sample
        TimingOptions, cpu_sampler, gpu_sampler, measure, side_stream_level = (
            self.tools[n] for n in ("TimingOptions", "cpu_sampler", "gpu_sampler", "measure", "side_stream_level"))
        opts = TimingOptions(**self.job.timing)
        role = self.job.role
        if role == "candidate":
            fn = getattr(self, "fn", None) or self.rt.load_candidate(Path(self.job.candidate), self.device, 0)
        else:
            fn = self.rt.baseline(self.job.baseline)
        # A candidate's timed calls are re-checked: every one leaves a sample in the journal, and a few leave
        # their whole output (all of ``verify`` where the problem has its own check, which samples cannot feed).
        checked = role == "candidate" and self.job.verify > 0
        full_n = 0
        if checked:
            full_n = self.job.verify if self.problem.own_check else min(self.job.verify, _FULL_KEPT)
        out_cases = []
        kept: dict[str, Any] = {}
        urandom = self.clock.get("os.urandom") or os.urandom   # as it was before the candidate was imported
        now = time.perf_counter
        for case in self.cases(cases):
            state: dict[str, Any] = {"warm_inputs": self.rt.make_inputs(case, _seed(), self.device)}
            slots: list[tuple[dict[str, Any], Any]] = []
            seen = [0]
            used: set[int] = set()
            prep_s = [0.0]

            def prepare(i: int) -> None:
                if i < 0:
                    state["seed"], state["inputs"], state["fp"] = None, state["warm_inputs"], None
                    return
                # Every timed call gets inputs made for it alone, from a secret seed drawn now: while the
                # candidate runs, no later call's inputs exist, and nothing it can read tells what they will be.
                t0 = now()
                state.pop("inputs", None)
                seed = _fresh_seed(urandom, used)
                # No hook of the candidate's runs while the inputs are made and fingerprinted (HookSnapshot).
                hooked = self.hooks.restore()
                gc_was_on = self.hooks.gc_enabled()
                self.hooks.gc_off()
                try:
                    inputs = self.rt.make_inputs(case, seed, self.device)
                    # fingerprinted as made: the reference makes them again from the seed and compares
                    state["seed"], state["inputs"], state["fp"] = seed, inputs, fingerprint(inputs) if checked else None
                finally:
                    if gc_was_on:
                        self.hooks.gc_on()
                hooked += self.hooks.restore()
                if hooked and "hooked" not in state:
                    state["hooked"] = sorted(set(hooked))
                _sync(self.device)
                took = now() - t0
                if took > _IDLE_S:
                    keep_busy(self.device, took, self.clock)
                prep_s[0] += now() - t0

            def record(i: int, out: Any, *, graph: bool = False) -> None:
                # Out of the process at once, before the candidate runs again: the call's seed, its inputs'
                # fingerprint and a sample of its output at positions drawn now (sampling.py). The parent picks
                # the calls the reference re-checks once timing is over.
                rec = {"key": output_key(case.name, state["seed"], timed=True), "case": case.name,
                       "seed": state["seed"], "call": i, "input": state["fp"],
                       "sample": take_sample(out, int.from_bytes(urandom(8), "little"))}
                if graph:
                    rec["graph"] = True
                elif full_n:
                    # Reservoir sampling with os.urandom, decided after the call returned: every timed call is
                    # equally likely to leave its whole output. Its fingerprint goes with the record: an output
                    # edited later in this process is caught.
                    t = seen[0]
                    seen[0] += 1
                    if not t:
                        size = max(_nbytes(out), 1)
                        state["keep"] = min(full_n, max(1, min(_FULL_KEPT, _KEEP_BYTES // size), _MORE_BYTES // size))
                    j = t if t < state["keep"] else int.from_bytes(urandom(8), "little") % (t + 1)
                    if j < state["keep"]:
                        item = {"case": case.name, "seed": state["seed"], "key": rec["key"], "fingerprint": state["fp"]}
                        kept_out = _to(out, self.device)
                        rec["output"] = fingerprint(kept_out)
                        if j < len(slots):
                            slots[j] = (item, kept_out)
                        else:
                            slots.append((item, kept_out))
                if self.journal[0] >= 0 and _journal_identity() != self.journal:
                    # The candidate moved the journal (the descriptor the harness writes to, or the pipe behind
                    # it): the record goes to the journal as it was, and the case is rejected.
                    state["journal_moved"] = True
                    _base._JOURNAL_FD = self.journal[0]
                _journal(rec, self.journal[0])

            def after(i: int, out: Any) -> None:
                # Around every timed call: the timing code is the code bound before the candidate was imported.
                if any(getattr(fn, "__code__", None) is not self.tool_code[n] for n, fn in self.tools.items()):
                    state["tampered"] = True
                if "hooked" not in state:
                    hooked = self.hooks.restore()     # nothing to put back: one comparison, as changed() would be
                    if hooked:
                        state["hooked"] = hooked
                if i >= 0 and "lazy" not in state:
                    why = _plain_output(out)
                    if why:
                        state["lazy"] = why
                        self.flag("lazy-output", f"a timed output is not a plain tensor: {why}")
                if "lazy" in state or i < 0 or not checked:
                    return      # nothing of a rejected candidate's is re-checked
                record(i, out)

            def call() -> Any:
                _new_step()
                return fn(*state["inputs"])

            entry: dict[str, Any] = {"case": case.name}
            untimed = lambda: prep_s[0]  # noqa: E731
            persisting = self.persisting.found
            try:
                if self.device.startswith("cuda"):
                    sampler = gpu_sampler(call, prepare=prepare, after=after, flush_l2=opts.flush_l2,
                                          flush_mode=opts.flush_mode, device=self.device, clock=self.clock)
                    timing = measure(sampler, "cuda-events", opts, untimed=untimed)
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
                                     "cpu-wall-clock", opts, untimed=untimed)
                entry["timing"] = timing.to_json()
                if self.job.graphs and self.device.startswith("cuda"):
                    entry["graph_timing"] = self._graph_timing(
                        fn, state, prepare, opts, untimed,
                        (lambda i, out: record(i, out, graph=True)) if checked else None)
            except Exception as e:
                entry["error"] = _err(e)
                if isinstance(e, TimingTampered):
                    self.flag("harness-tampered", f"case {case.name}: {e}", case=case.name)
                if _cuda_broken(e):
                    out_cases.append(entry)
                    break
            if state.get("journal_moved"):
                self.flag("timed-output-tampered", f"case {case.name}: the worker's journal was moved while the case "
                          "was timed (the candidate changed the descriptor the harness records timed calls on)",
                          case=case.name)
            if state.get("hooked"):
                self.flag("harness-tampered", f"case {case.name}: the candidate installed code that runs inside "
                          f"whatever runs ({', '.join(state['hooked'])}) while the case was timed: inside the "
                          "harness's code too, as the inputs were made (it was removed)", case=case.name,
                          hooks=state["hooked"])
            if self.persisting.found > persisting:
                self._flag_persisting(case.name, self.persisting.found - persisting)
            if state.get("tampered"):
                self.flag("harness-tampered", "the code of the harness's timing functions was replaced while "
                          f"case {case.name} was timed", case=case.name)
            self._check_timers()
            entry["verify"] = [item for item, _ in slots]
            for item, out in slots:
                kept[item["key"]] = out
            out_cases.append(entry)
            state.clear()
        if kept:
            save_outputs(kept, self.out_dir / "bench_outputs" / "kept")
        self.result["bench"] = out_cases
        self._check_timers()

    def _flag_persisting(self, case: str, flushes: int) -> None:
        """Say once that L2 was found set aside for persisting lines, which the flushes gave back and demoted."""
        f = next((f for f in self.result["flags"] if f["id"] == "l2-persisting"), None)
        if f is not None:
            f["evidence"]["cases"].append(case)
            f["evidence"]["set_aside_bytes"] = self.persisting.set_aside
            return
        self.flag("l2-persisting", f"case {case}: L2 was set aside for persisting accesses "
                  f"(cudaLimitPersistingL2CacheSize, {self.persisting.set_aside} bytes), which would keep the memory "
                  "marked persisting in the L2 through the flush before each timed call: before each flush "
                  f"({flushes} flushes) the set-aside was returned to 0 and its lines demoted, so no call found the "
                  "last one's data or its own new inputs still cached", level="warning", cases=[case],
                  set_aside_bytes=self.persisting.set_aside)

    def _graph_timing(self, fn, state: dict[str, Any], prepare, opts, untimed, record) -> dict[str, Any]:
        """Time CUDA-graph replays of the call: new inputs are copied into the captured buffers before
        each replay (untimed), so only the kernels are timed, without launch overhead. After each replay the
        captured output is sampled like any timed output (``record``), so a graph that does not compute the
        answer is caught too."""
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
                captured = fn(*static)
        except Exception as e:
            return {"error": f"could not capture a CUDA graph: {type(e).__name__}: {e}"[:500]}
        if record is not None and _plain_output(captured):
            return {"error": f"the captured call's output is not a plain tensor: {_plain_output(captured)}"}

        def prep(i: int) -> None:
            prepare(i)
            _copy_into(static, state["inputs"])

        def after(i: int) -> None:
            if record is not None and i >= 0:
                record(i, captured)

        t = measure(graph_sampler(graph, prepare=prep, after=after, flush_l2=opts.flush_l2,
                                  flush_mode=opts.flush_mode, device=self.device, clock=self.clock),
                    "cuda-graph-replay", opts, untimed=untimed)
        return t.to_json()


class BenchWorker(TimingWorker):
    """``BenchJob``: time the cases."""

    def run(self) -> None:
        with self.phase("bench"):
            self.bench(self.job.cases)
