"""Which timed calls the reference re-checks, chosen in the parent from the candidate worker's journal once
timing is over (no choice is made, or readable, in the candidate's process).

The worker writes one record per timed call the moment the call returns (worker_bench.py): its key (case and
secret seed), the fingerprint of its inputs, a sample of its output (sampling.py), and for the few calls whose
whole output it kept, that output's fingerprint. The harness writes exactly one record per key, so a second
record for a key, or fewer records than the case's timed calls, means the candidate wrote to (or cut off) the
journal: the case is flagged ``timed-output-tampered``.
"""

from __future__ import annotations

import secrets
from collections import Counter
from dataclasses import replace
from typing import Any

from kernelpilot.evaluate.jobs import VerifyItem, WorkerResult, output_key
from kernelpilot.evaluate.result import Flag

__all__ = ["items_to_verify"]


def items_to_verify(res: WorkerResult, *, check: bool, verify: int,
                    sampled: bool) -> tuple[list[VerifyItem], list[Flag]]:
    """The outputs for the reference to verify, and the flags of a journal that is not the harness's.

    The check's outputs (where ``check``); per timed case, every whole output the worker kept, each with the
    fingerprints journaled when it was made (the first record for a key), and up to ``verify`` timed calls
    drawn at random from all of the case's records (where ``sampled``: the problem is judged by the standard
    comparison, which sampled elements can feed)."""
    records: dict[str, dict[str, Any]] = {}
    repeated: Counter[str] = Counter()                # per case: records for a key already recorded
    per_case: dict[str, list[dict[str, Any]]] = {}
    for rec in res.journal:
        key = rec.get("key")
        if not isinstance(key, str):
            continue
        if key in records:
            repeated[str(records[key].get("case"))] += 1
            continue
        records[key] = rec
        per_case.setdefault(str(rec.get("case")), []).append(rec)
    flags = []
    items = [_journaled(VerifyItem(case=e.case, seed=e.seed, key=output_key(e.case, e.seed),
                                   fingerprint=e.fingerprint), records)
             for e in (res.cases if check else ()) if not e.error]
    draw = secrets.SystemRandom()
    for entry in res.bench:
        recs = per_case.get(entry.case, [])
        timed = [r for r in recs if not r.get("graph")]
        why = ""
        if repeated[entry.case]:
            why = f"{repeated[entry.case]} timed call(s) have a second record (the harness writes one)"
        elif verify > 0 and entry.timing is not None and len(timed) < entry.timing.n and not _lazy(res):
            why = f"{entry.timing.n - len(timed)} of {entry.timing.n} timed calls left no record"
        if why:
            flags.append(Flag("timed-output-tampered", f"case {entry.case}: the journal of timed calls is not the "
                              f"harness's: {why}", "error", {"case": entry.case}))
        items += [_journaled(it, records) for it in entry.verify]
        if sampled and verify > 0:
            for rec in draw.sample(recs, min(verify, len(recs))):
                try:
                    items.append(VerifyItem(case=entry.case, seed=int(rec["seed"]), key=rec["key"],
                                            fingerprint=str(rec.get("input")), sample=rec.get("sample")))
                except (KeyError, TypeError, ValueError):
                    flags.append(Flag("timed-output-tampered", f"case {entry.case}: a record of a timed call "
                                      "is malformed", "error", {"case": entry.case}))
    return items, flags


def _journaled(it: VerifyItem, records: dict[str, dict[str, Any]]) -> VerifyItem:
    rec = records.get(it.key, {})
    return replace(it, output_fingerprint=rec.get("output") or "missing", journal_input=rec.get("input"))


def _lazy(res: WorkerResult) -> bool:
    """A candidate rejected while timed (a lazy output): its later calls are not recorded."""
    return any(f.id == "lazy-output" for f in res.flags)
