"""Verifying a candidate's outputs (``VerifyJob``) in the reference's process: the inputs made again from their
seeds and checked against the candidate's, the reference run (or taken from what a serving worker kept), and
each output compared where the reference computed it (a timed call's sample: the same elements of the
reference's output). Runs only in worker processes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kernelpilot.evaluate.outputs import OutputsRejected, Rejected, load_outputs, to_device
from kernelpilot.evaluate.worker_base import (Worker, _cache_bytes, _low_signal, _nbytes, _resident_bytes, _sync,
                                             _to)

__all__ = ["VerifyWorker"]


class VerifyWorker(Worker):
    """``VerifyJob``: the reference's verdict on each output."""

    def reference_verify(self) -> None:
        from kernelpilot.evaluate.compare import compare_outputs
        from kernelpilot.evaluate.guards import fingerprint
        from kernelpilot.evaluate.sampling import check_sample

        got_all: dict[str, Any] = {}
        unreadable = None
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
        cached = 0
        for it in items:
            case = self.problem.case(it.case)
            res = {"case": case.name, "seed": it.seed, "key": it.key}
            results.append(res)
            cached += (case.name, it.seed) in self.state.get("expected", {})
            fp, expected, expected_fp = self._expected(case, it.seed, keep=not it.timed)
            if fp != it.fingerprint:
                res.update(ok=False, message="the candidate did not receive the inputs the reference used "
                           "(its process generated or saw different data)")
                self.flag("input-mismatch", f"case {case.name}: inputs in the candidate's process differ from the "
                          "reference's (a patched generator, or a nondeterministic make_inputs)", case=case.name)
                continue
            ref_by_case.setdefault(case.name, []).append(expected_fp)
            if it.sample is not None:
                # A timed call judged by the elements its journal record holds, against the same elements here.
                res.update(check_sample(it.sample, expected, self.problem.tolerance_for).to_json())
                continue
            if it.key not in got_all:
                res.update(ok=False, message=unreadable or "no output")
                continue
            got = got_all[it.key]
            if isinstance(got, Rejected):
                res.update(ok=False, message=f"output rejected: {got}")
                self.flag("outputs-rejected", f"an output read back from the candidate's file is not plain data: {got}")
                continue
            if _nbytes(got) <= _resident_bytes(self.device):
                # Read from its file once, then fingerprinted and compared on the device.
                got = to_device(got, self.device)
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
                # Compared where it was computed, in pieces (compare.py): no host copy of an output of many GB.
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
        self.result["cached"] = cached

    def _expected(self, case, seed: int, *, keep: bool) -> tuple[str, Any, str]:
        """(fingerprint of the inputs, the reference's output, its fingerprint) for ``case`` and ``seed``. A
        reference worker that serves job after job (a pool's) keeps these, while they fit in a quarter of the
        device's memory, so the next candidate on the problem with the same secret seeds costs no reference run."""
        from kernelpilot.evaluate.guards import fingerprint
        from kernelpilot.evaluate.probe import probe_call

        cache = self.state.setdefault("expected", {})
        if (case.name, seed) in cache:
            return cache[(case.name, seed)]
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

    def run(self) -> None:
        with self.phase("reference"):
            self.reference_verify()
