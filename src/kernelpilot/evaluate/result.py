"""The evaluation result: ``kernelpilot.eval/1`` (DESIGN.md), plain data on the parent's side."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from kernelpilot.evaluate.timing import Timing

__all__ = ["SCHEMA", "Flag", "CaseResult", "Baseline", "BenchCase", "EvalResult", "ratio"]


def ratio(a: float, b: float) -> float:
    """``a / b`` to four significant digits (a speedup of 0.00004 stays 4e-05, not 0)."""
    return float(f"{a / b:.4g}")

SCHEMA = "kernelpilot.eval/1"


@dataclass
class Flag:
    """A guard's finding. ``level`` "error" rejects the candidate; "warning" is reported."""

    id: str
    message: str
    level: Literal["error", "warning", "info"] = "warning"
    evidence: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class CaseResult:
    case: str
    seed: int
    ok: bool
    message: str = ""
    max_abs_err: float | None = None
    rel_err: float | None = None
    hidden: bool = False
    low_signal: str | None = None
    worst: list[dict[str, Any]] = field(default_factory=list)
    params: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Baseline:
    """A baseline's timing of one case, and the candidate's speedup over it."""

    timing: Timing
    speedup: float | None
    # with --graphs: the baseline's CUDA-graph replay, and the candidate's replay speedup over it
    graph_timing: Timing | None = None
    graph_speedup: float | None = None

    def to_json(self) -> dict[str, Any]:
        d = {**self.timing.to_json(), "speedup": self.speedup}
        if self.graph_timing is not None:
            d["graph"] = {**self.graph_timing.to_json(), "speedup": self.graph_speedup}
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "Baseline":
        graph = d.get("graph") if isinstance(d.get("graph"), dict) else None
        return cls(Timing.from_json(d), d.get("speedup"), Timing.from_json(graph) if graph else None,
                   graph.get("speedup") if graph else None)


@dataclass
class BenchCase:
    case: str
    params: dict[str, Any]
    timing: Timing | None
    checked: int = 0                          # timed runs whose outputs were re-checked
    check_ok: bool = True
    message: str = ""
    roofline: dict[str, Any] | None = None    # bytes, flops, floor_us, fraction
    baselines: dict[str, Baseline] = field(default_factory=dict)
    graph_timing: Timing | None = None
    graph_error: str = ""                     # why the call could not be captured in a CUDA graph

    def to_json(self) -> dict[str, Any]:
        graph = (self.graph_timing.to_json() if self.graph_timing is not None
                 else {"error": self.graph_error} if self.graph_error else None)
        return {"case": self.case, "params": dict(self.params),
                "timing": self.timing.to_json() if self.timing is not None else None, "checked": self.checked,
                "check_ok": self.check_ok, "message": self.message, "roofline": self.roofline,
                "baselines": {n: b.to_json() for n, b in self.baselines.items()}, "graph_timing": graph}


@dataclass
class EvalResult:
    problem: str
    candidate: str
    device: str
    correct: bool | None = None               # None: not checked (bench only)
    cases: list[CaseResult] = field(default_factory=list)
    bench: list[BenchCase] = field(default_factory=list)
    flags: list[Flag] = field(default_factory=list)
    gpu: str | None = None
    error: str | None = None                  # the candidate could not be evaluated at all (crash, hang, import)
    notes: list[str] = field(default_factory=list)
    elapsed_s: dict[str, Any] = field(default_factory=dict)   # where the evaluation's wall time went
    target: dict[str, Any] | None = None      # where it ran: the target's name, host, device (targets/)

    @property
    def rejected(self) -> bool:
        return any(f.level == "error" for f in self.flags)

    @property
    def passed(self) -> bool:
        # bench alone (correct is None) passes on its re-checked timed outputs and the guards
        checked = self.correct if self.correct is not None else bool(self.bench)
        return bool(checked) and not self.rejected and self.error is None and all(b.check_ok for b in self.bench)

    def timing(self) -> dict[str, Any] | None:
        ts = [b.timing for b in self.bench if b.timing]
        if not ts:
            return None
        if len(ts) == 1:
            return ts[0].to_json()
        import math

        gm = math.exp(sum(math.log(t.median_us) for t in ts) / len(ts))
        return {"median_us": round(gm, 4), "aggregate": f"geometric mean of {len(ts)} cases' medians",
                "n": sum(t.n for t in ts), "method": ts[0].method,
                "iqr_us": None, "min_us": None}

    def baselines(self) -> dict[str, dict[str, Any]]:
        import math

        def geomean(values: list[float | None]) -> float | None:
            kept = [v for v in values if v is not None and v > 0]
            return float(f"{math.exp(sum(math.log(v) for v in kept) / len(kept)):.4g}") if kept else None

        names = sorted({n for b in self.bench for n in b.baselines})
        out = {}
        for n in names:
            mine = [b.baselines[n] for b in self.bench if n in b.baselines]
            sp = [x.speedup for x in mine if x.speedup is not None and x.speedup > 0]
            if sp:
                out[n] = {"speedup": geomean(sp), "cases": len(sp),
                          "aggregate": "geometric mean" if len(sp) > 1 else "one case"}
                graph = [x.graph_speedup for x in mine if x.graph_speedup]
                if graph:           # CUDA-graph replays of both (--graphs): launch overhead left out of both
                    out[n].update(graph_speedup=geomean(graph), graph_cases=len(graph))
            else:
                out[n] = {"speedup": None, "cases": 0}
            if len(self.bench) == 1 and n in self.bench[0].baselines:
                out[n].update(self.bench[0].baselines[n].timing.to_json())
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "problem": self.problem,
            "candidate": self.candidate,
            "device": self.device,
            "gpu": self.gpu,
            "correct": self.correct,
            "passed": self.passed,
            "error": self.error,
            "cases": [c.to_json() for c in self.cases],
            "timing": self.timing(),
            "baselines": self.baselines(),
            "bench": [b.to_json() for b in self.bench],
            "flags": [f.to_json() for f in self.flags],
            "notes": list(self.notes),
            "elapsed_s": dict(self.elapsed_s),
            "target": self.target,
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> EvalResult:
        """A result read back from ``to_json`` (a target's answer): what ``render`` and ``passed`` need."""
        def timing(t: dict[str, Any] | None) -> Timing | None:
            return Timing.from_json(t) if isinstance(t, dict) and "median_us" in t else None

        bench = []
        for b in d.get("bench") or []:
            graph = b.get("graph_timing")
            bench.append(BenchCase(
                case=b["case"], params=b.get("params") or {}, timing=timing(b.get("timing")),
                checked=b.get("checked", 0), check_ok=b.get("check_ok", True), message=b.get("message", ""),
                roofline=b.get("roofline"),
                baselines={n: Baseline.from_json(x) for n, x in (b.get("baselines") or {}).items()},
                graph_timing=timing(graph), graph_error=(graph or {}).get("error", "") if isinstance(graph, dict)
                else ""))
        return cls(problem=d["problem"], candidate=d["candidate"], device=d["device"], correct=d.get("correct"),
                   cases=[CaseResult(**c) for c in d.get("cases") or []], bench=bench,
                   flags=[Flag(**f) for f in d.get("flags") or []], gpu=d.get("gpu"), error=d.get("error"),
                   notes=list(d.get("notes") or []), elapsed_s=dict(d.get("elapsed_s") or {}), target=d.get("target"))
