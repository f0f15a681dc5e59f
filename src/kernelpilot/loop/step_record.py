"""What a step of a run records about its candidate, shared by the search engine and the agent loop: the
variant's file in the run's folder, its diff from the start file, and its evaluation summed up (the check, the
median time, each case's time)."""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any

from kernelpilot.evaluate.result import EvalResult
from kernelpilot.variant_origin import mark


def write_variant(folder: Path, stem: str, text: str, start: str | None) -> Path:
    """The variant's file in the run's folder, marked with its start file (variant_origin.py) so that it finds
    what lies beside that file."""
    path = folder / f"{stem}.py"
    path.write_text(mark(text, start) if start and Path(start).is_file() else text)
    return path


def diff(a: str, b: str, name: str) -> str:
    return "".join(difflib.unified_diff(a.splitlines(keepends=True), b.splitlines(keepends=True),
                                        fromfile=f"a/{name}", tofile=f"b/{name}"))


def check_summary(res: EvalResult) -> dict[str, Any]:
    return {"failed_cases": [f"{c.case} (seed {c.seed}): {c.message}"[:300] for c in res.cases if not c.ok][:5],
            "flags": [f"{f.level} {f.id}: {f.message}"[:300] for f in res.flags if f.level in ("error", "warning")],
            "error": (res.error or "")[:2000] or None, "notes": res.notes[:5]}


def median_us(res: EvalResult) -> float | None:
    """The median time of a candidate that passed; None otherwise."""
    t = res.timing()
    return t["median_us"] if t and res.passed else None


def case_times(res: EvalResult) -> dict[str, Any]:
    return {b.case: b.timing.median_us if b.timing else None for b in res.bench}


def evaluation_trace(res: EvalResult, events: list[dict[str, Any]]) -> dict[str, Any]:
    """An evaluation as a step's trace keeps it: its progress events, where its time went, and each timed case
    against the roofline floor (where the problem declares its cost and the GPU is known)."""
    cases = {}
    for b in res.bench:
        roof = b.roofline or {}
        cases[b.case] = {"median_us": b.timing.median_us if b.timing else None, "floor_us": roof.get("floor_us"),
                         "fraction": roof.get("fraction"), "bound": roof.get("bound")}
    return {"role": "evaluation", "events": events, "elapsed_s": res.elapsed_s, "cases": cases}
