"""Timing a candidate or a baseline (``BenchJob``), and the timing a check runs after it (``CheckJob`` with
``bench_cases``): every sample on new inputs made a batch at a time, a few timed outputs kept at random for the
reference, the timing functions bound before the candidate was imported. Runs only in worker processes."""

from __future__ import annotations

import os
import statistics
from pathlib import Path
from typing import Any

from kernelpilot.evaluate.jobs import output_key
from kernelpilot.evaluate.outputs import save_outputs
from kernelpilot.evaluate.worker_base import (Worker, _copy_into, _cuda_broken, _err, _journal, _nbytes,
                                             _new_step, _plain_output, _resident_bytes, _seed, _sync, _to)

__all__ = ["TimingWorker", "BenchWorker"]

# Timed outputs kept for the reference to re-check, per case: up to the job's ``verify`` of them while they fit
# in this many bytes, and always one.
_KEEP_BYTES = 2 << 30


class TimingWorker(Worker):
    """A worker that times calls (a candidate's or a baseline's), or runs candidate code at all: it takes the
    snapshots of the timers and of the harness's own functions before any candidate code runs."""

    def __init__(self, job, work_dir: Path, *, runtime=None, state: dict | None = None) -> None:
        super().__init__(job, work_dir, runtime=runtime, state=state)
        import torch  # noqa: F401

        from kernelpilot.evaluate import timing
        from kernelpilot.evaluate.guards import HarnessSnapshot, TimerSnapshot

        # Timing and synchronisation functions as they are now: timing uses these, and a replacement is reported.
        self.timers = TimerSnapshot()
        self.clock = self.timers.functions()
        self.harness = HarnessSnapshot(skip=set(self.clock))
        # The timing functions as they are now: bench calls these, whatever the module holds later.
        self.tools = {name: getattr(timing, name) for name in
                      ("TimingOptions", "cpu_sampler", "gpu_sampler", "graph_sampler", "measure", "side_stream_level",
                       "summarize")}
        self.tool_code = {name: getattr(fn, "__code__", None) for name, fn in self.tools.items()}

    def _check_timers(self) -> None:
        changed = self.timers.changed()
        if changed and not any(f["id"] == "patched-timer" for f in self.result["flags"]):
            self.flag("patched-timer", "the candidate replaced timing or synchronisation functions: "
                      + ", ".join(changed), functions=changed)
        tampered = self.harness.changed()
        if tampered and not any(f["id"] == "harness-tampered" for f in self.result["flags"]):
            self.flag("harness-tampered", "the candidate replaced functions of the harness or of the modules it "
                      "times and checks with: " + ", ".join(tampered[:8]), functions=tampered[:50])

    def bench(self, cases: tuple[str, ...]) -> None:
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
                if not seen[0]:
                    # As many as fit in a budget (at least one): each is held on the device until the case ends
                    # and re-checked by the reference.
                    state["keep"] = min(keep_n, max(1, _KEEP_BYTES // max(_nbytes(out), 1)))
                # Reservoir sampling with os.urandom, decided after the call returned: every timed call is
                # equally likely to be re-checked, and nothing in this process tells which will be.
                t = seen[0]
                seen[0] += 1
                j = t if t < state["keep"] else int.from_bytes(urandom(8), "little") % (t + 1)
                if j >= state["keep"]:
                    return
                # A private copy on the device, and fingerprints (computed on the device: no slow host work
                # between timed calls) out of the process at once: an output edited later is caught.
                item = {"case": case.name, "seed": state["seed"], "key": output_key(case.name, state["seed"], timed=True),
                        "fingerprint": state["fp"]}
                kept_out = _to(out, self.device)
                _journal({"key": item["key"], "input": item["fingerprint"], "output": fingerprint(kept_out)})
                if j < len(slots):
                    slots[j] = (item, kept_out)
                else:
                    slots.append((item, kept_out))

            def call() -> Any:
                _new_step()
                return fn(*state["inputs"])

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
                kept[item["key"]] = out
            out_cases.append(entry)
            state.clear()
        if kept:
            save_outputs(kept, self.out_dir / "bench_outputs" / "kept")
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


class BenchWorker(TimingWorker):
    """``BenchJob``: time the cases."""

    def run(self) -> None:
        with self.phase("bench"):
            self.bench(self.job.cases)
