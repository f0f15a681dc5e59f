"""Checking a candidate (``CheckJob``): inputs made for secret seeds before the candidate is imported, each case
run twice on fresh copies with the allocator poisoned, the first call profiled for the guards, outputs saved
for the reference; then, with ``bench_cases``, those cases timed in the same process. Runs only in worker
processes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kernelpilot.evaluate.jobs import output_key
from kernelpilot.evaluate.outputs import save_outputs
from kernelpilot.evaluate.worker_base import (_cuda_broken, _err, _journal, _nbytes, _new_step, _plain_output,
                                             _resident_bytes, _seed, _sync, _to)
from kernelpilot.evaluate.worker_bench import TimingWorker

__all__ = ["CheckWorker"]


class CheckWorker(TimingWorker):
    """``CheckJob``: check the candidate, then time it where asked."""

    def candidate_check(self) -> None:
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
            key = output_key(case.name, seed)
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
                    _new_step(collect=True)
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
                        save_outputs({key: out}, self.out_dir / "candidate_outputs" / f"{n:05d}")
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

    def _probe_flags(self, probe, own_kernels: list[str]) -> None:
        if probe.side_stream_kernels:
            self.flag("side-stream", "kernels ran on a stream other than the timed one and ended after its last "
                      "kernel, outside the timer: " + ", ".join(probe.side_stream_kernels[:5]),
                      kernels=probe.side_stream_kernels[:10])
        elif probe.other_stream_kernels:
            self.flag("other-streams", "kernels ran on other streams, each one the timed stream waited for or that "
                      "finished before its last kernel (so inside the timer on this call): "
                      + ", ".join(probe.other_stream_kernels[:5]),
                      "warning", kernels=probe.other_stream_kernels[:10])
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

    def run(self) -> None:
        job = self.job
        self.candidate_check()
        # check and bench in one process (one start-up); the parent discards the timing if the check fails
        if job.bench_cases and not any(c.get("error") for c in self.result["cases"]):
            with self.phase("bench"):
                self.bench(job.bench_cases)
