"""Which timed calls the reference re-checks (evaluate/rechecks.py), from a worker's journal: drawn from every
record of a case, never more than asked; whole kept outputs with the fingerprints journaled when they were kept;
and a journal that is not the harness's (a second record for a call, records missing) flagged."""

from __future__ import annotations

from kernelpilot.evaluate.jobs import BenchRun, CaseRun, FlagRecord, VerifyItem, WorkerResult
from kernelpilot.evaluate.rechecks import items_to_verify
from kernelpilot.evaluate.timing import Timing

CASE = "n=8"


def _timing(n: int) -> Timing:
    return Timing(median_us=1.0, iqr_us=0.0, min_us=1.0, max_us=1.0, mean_us=1.0, n=n, method="cpu-wall-clock",
                  converged=True)


def _record(i: int, **extra) -> dict:
    return {"key": f"{CASE}|bench|{100 + i}", "case": CASE, "seed": 100 + i, "call": i, "input": f"in{i}",
            "sample": {"nonce": i, "leaves": []}, **extra}


def _result(records: list[dict], n: int, *, kept=(), flags=(), cases=()) -> WorkerResult:
    return WorkerResult(journal=tuple(records), cases=tuple(cases), flags=tuple(flags),
                        bench=(BenchRun(case=CASE, timing=_timing(n), verify=tuple(kept)),))


def test_calls_are_drawn_from_every_record_and_carry_their_own():
    records = [_record(i) for i in range(40)]
    items, flags = items_to_verify(_result(records, 40), check=False, verify=16, sampled=True)
    assert not flags and len(items) == 16 and len({it.key for it in items}) == 16
    by_key = {r["key"]: r for r in records}
    for it in items:
        rec = by_key[it.key]
        assert (it.seed, it.fingerprint, it.sample) == (rec["seed"], rec["input"], rec["sample"])
    # fewer calls than asked: every one
    items, _ = items_to_verify(_result(records[:5], 5), check=False, verify=16, sampled=True)
    assert sorted(it.seed for it in items) == [100, 101, 102, 103, 104]


def test_draws_differ_from_run_to_run():
    records = [_record(i) for i in range(200)]
    draws = {tuple(sorted(it.seed for it in items_to_verify(_result(records, 200), check=False, verify=4,
                                                              sampled=True)[0])) for _ in range(20)}
    assert len(draws) > 1


def test_a_problem_with_its_own_check_gets_whole_outputs_only():
    kept = VerifyItem(case=CASE, seed=103, key=f"{CASE}|bench|103", fingerprint="in3")
    records = [_record(i, **({"output": "out3"} if i == 3 else {})) for i in range(10)]
    items, flags = items_to_verify(_result(records, 10, kept=[kept]), check=False, verify=16, sampled=False)
    assert not flags and len(items) == 1
    assert (items[0].output_fingerprint, items[0].journal_input, items[0].sample) == ("out3", "in3", None)


def test_a_kept_output_without_its_record_is_missing():
    kept = VerifyItem(case=CASE, seed=999, key=f"{CASE}|bench|999", fingerprint="x")
    items, _ = items_to_verify(_result([_record(0)], 1, kept=[kept]), check=False, verify=0, sampled=True)
    assert items[0].output_fingerprint == "missing"


def test_a_second_record_for_a_call_is_tampering_and_the_first_counts():
    records = [_record(i) for i in range(10)]
    forged = _record(4, input="forged", sample={"nonce": 0, "leaves": []})
    items, flags = items_to_verify(_result([forged, *records], 10), check=False, verify=16, sampled=True)
    assert [f.id for f in flags] == ["timed-output-tampered"] and flags[0].level == "error"
    assert "1 timed call(s) have a second record" in flags[0].message
    assert next(it for it in items if it.seed == 104).fingerprint == "forged"


def test_records_missing_for_timed_calls_are_tampering_unless_the_output_was_rejected():
    records = [_record(i) for i in range(7)]
    _, flags = items_to_verify(_result(records, 10), check=False, verify=16, sampled=True)
    assert len(flags) == 1 and "3 of 10 timed calls left no record" in flags[0].message
    lazy = FlagRecord("lazy-output", "a timed output is not a plain tensor", "error")
    _, flags = items_to_verify(_result(records, 10, flags=[lazy]), check=False, verify=16, sampled=True)
    assert not flags
    # nothing is recorded when nothing is re-checked
    _, flags = items_to_verify(_result([], 10), check=False, verify=0, sampled=True)
    assert not flags


def test_graph_replays_are_drawn_but_not_counted_as_event_timed_calls():
    records = [_record(i) for i in range(10)] + [_record(50 + i, graph=True) for i in range(10)]
    items, flags = items_to_verify(_result(records, 10), check=False, verify=20, sampled=True)
    assert not flags and len(items) == 20


def test_a_malformed_record_is_tampering():
    records = [_record(i) for i in range(3)] + [{"key": f"{CASE}|bench|x", "case": CASE, "seed": "not a number"}]
    _, flags = items_to_verify(_result(records, 3), check=False, verify=16, sampled=True)
    assert any("malformed" in f.message for f in flags)


def test_the_checks_outputs_carry_their_journaled_fingerprints():
    run = CaseRun(case=CASE, seed=7, fingerprint="in7")
    records = [{"key": f"{CASE}|7", "input": "in7", "output": "out7"}]
    items, flags = items_to_verify(_result(records, 0, cases=[run]), check=True, verify=16, sampled=True)
    assert not flags
    (it,) = items
    assert (it.key, it.output_fingerprint, it.journal_input, it.timed) == (f"{CASE}|7", "out7", "in7", False)
