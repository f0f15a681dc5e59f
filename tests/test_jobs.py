"""The jobs the harness sends its workers: typed, versioned, and the same after a round trip through JSON."""

from __future__ import annotations

import json

import pytest
from conftest import EXAMPLES

from kernelpilot.evaluate.jobs import SCHEMA, BenchJob, CheckJob, JobFormatError, VerifyItem, VerifyJob, job_from_json
from kernelpilot.evaluate.problem import load_problem

ROW = EXAMPLES / "problems" / "row_softmax"


def _round_trip(job):
    text = json.dumps(job.to_json())          # plain JSON: nothing that needs pickle
    back = job_from_json(json.loads(text))
    assert back == job and type(back) is type(job)
    return json.loads(text)


def test_every_kind_survives_a_round_trip():
    prob = load_problem(ROW)
    seal = {"/p/reference.py": "ab" * 32}
    check = CheckJob(name="01_check", problem=prob, device="cuda", seal=seal, candidate="/c/cand.py",
                     cases=("a", "b"), seeds=2, seeds_by_case={"a": [1, 2]}, bench_cases=("a",),
                     timing={"budget_s": 0.5}, graphs=True, verify=2)
    d = _round_trip(check)
    assert d["schema"] == SCHEMA and d["kind"] == "check" and d["problem"]["name"] == "row_softmax"
    assert (check.role, check.mode) == ("candidate", "eval")
    bench = BenchJob(name="02_bench", problem=prob, device="cpu", cases=("a",), baseline="eager")
    _round_trip(bench)
    assert (bench.role, bench.mode) == ("baseline", "bench")
    item = VerifyItem(case="a", seed=7, key="a|bench|7", fingerprint="f" * 32, output_fingerprint="e" * 32,
                      journal_input="f" * 32)
    verify = VerifyJob(name="03_verify", problem=prob, device="cpu", items=(item,), outputs=("/w/out",))
    assert _round_trip(verify)["items"][0]["key"] == "a|bench|7"
    assert item.timed and (verify.role, verify.mode) == ("reference", "verify")


def test_a_job_from_another_version_or_of_an_unknown_kind_is_refused():
    prob = load_problem(ROW)
    d = BenchJob(name="x", problem=prob, device="cpu", cases=("a",)).to_json()
    with pytest.raises(JobFormatError, match="different kernelpilot versions"):
        job_from_json({**d, "schema": "kernelpilot.job/0"})
    with pytest.raises(JobFormatError, match="unknown job kind 'train'"):
        job_from_json({**d, "kind": "train"})
    with pytest.raises(JobFormatError, match="cannot read"):
        job_from_json({k: v for k, v in d.items() if k != "device"})


TIMING = {"median_us": 2.0, "iqr_us": 0.1, "min_us": 1.9, "max_us": 2.5, "mean_us": 2.05, "n": 20,
          "method": "cuda-events", "converged": True, "untimed_tail_us": 0.3, "host_median_us": 4.0, "prepare_s": 0.01}


def test_a_worker_result_is_read_into_typed_parts():
    from kernelpilot.evaluate.jobs import WorkerResult

    raw = {"role": "candidate", "mode": "eval", "gpu": "NVIDIA H200", "unknown_key": 1,
           "flags": [{"id": "threads", "message": "m", "level": "warning", "evidence": {"threads": ["t"]}}],
           "cases": [{"case": "a", "seed": 3, "fingerprint": "f", "hidden": True, "error": None}],
           "bench": [{"case": "a", "timing": TIMING, "graph_timing": {"error": "could not capture"},
                      "verify": [{"case": "a", "seed": 9, "key": "a|bench|9", "fingerprint": "g"}]}],
           "verdicts": [{"case": "a", "seed": 9, "key": "a|bench|9", "ok": True, "worst": [{"index": [0]}]}],
           "phases_s": {"calls": 0.5}, "import_ops": ["aten::add"]}
    res = WorkerResult.from_json(json.loads(json.dumps(raw)))
    assert res.flags[0].evidence == {"threads": ["t"]} and res.cases[0].hidden and res.cases[0].seed == 3
    assert res.bench[0].timing.median_us == 2.0 and res.bench[0].verify[0].timed
    assert res.bench[0].graph_timing is None and res.bench[0].graph_error == "could not capture"
    assert res.verdicts[0].timed and res.verdicts[0].ok and res.import_ops == ("aten::add",)
    assert WorkerResult.from_json(json.loads(json.dumps(res.to_json()))) == res
    with pytest.raises(JobFormatError, match="cannot read"):
        WorkerResult.from_json({"cases": [{"case": "a"}]})        # no seed, no fingerprint
    with pytest.raises(JobFormatError, match="cannot read"):
        WorkerResult.from_json({"bench": [{"case": "a", "timing": {"median_us": 2.0}}]})   # not a whole timing
    with pytest.raises(JobFormatError, match="JSON object"):
        WorkerResult.from_json(["not", "a", "result"])
