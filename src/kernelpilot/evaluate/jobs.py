"""The jobs the harness hands its workers: typed, versioned, self-contained, and serialized as plain JSON.

Three kinds, one per worker role:

- ``CheckJob`` (a candidate's worker; ``bench_cases`` set: check, then time those cases in the same process),
- ``BenchJob`` (a candidate's or a baseline's worker: time the cases),
- ``VerifyJob`` (the reference's worker: regenerate the inputs from their seeds, run the reference, compare the
  candidate's saved outputs, each named by a ``VerifyItem``).

A job carries everything a worker needs: the problem's definition and the seal on its files, the device, the
cases, the timing options; nothing refers to the parent's memory, so the same job runs in a worker on this host,
on a remote host or in a cluster task. ``to_json`` gives ``{"schema": "kernelpilot.job/1", "kind": ..., ...}``;
``job_from_json`` reads it back and refuses another schema with one clear message. Plain data only: no pickle.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any, Union

from kernelpilot.evaluate.problem import Problem

__all__ = ["SCHEMA", "CheckJob", "BenchJob", "VerifyJob", "VerifyItem", "Job", "job_from_json", "JobFormatError"]

SCHEMA = "kernelpilot.job/1"


class JobFormatError(ValueError):
    """A job that is not one this harness can run (another schema, an unknown kind, a missing field)."""


@dataclass(frozen=True)
class VerifyItem:
    """One output for the reference to verify: the case and secret seed it was made from, the fingerprint of the
    inputs the candidate's process made, and the fingerprints its journal recorded when the output was made
    (``"missing"`` where there was no record)."""

    case: str
    seed: int
    key: str
    fingerprint: str
    output_fingerprint: str = "missing"
    journal_input: str | None = None

    @property
    def timed(self) -> bool:
        """A timed call's output, kept for re-checking (not one of the check's)."""
        return "|bench|" in self.key


@dataclass(frozen=True)
class _Job:
    name: str                       # unique within an evaluation: names the worker's folder and logs
    problem: Problem
    device: str
    seal: dict[str, str] = field(default_factory=dict)   # path -> sha256 of the problem's files

    kind = ""
    role = ""
    mode = ""

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"schema": SCHEMA, "kind": self.kind}
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, Problem):
                value = value.to_json()
            elif isinstance(value, tuple):
                value = [asdict(v) if hasattr(v, "__dataclass_fields__") else v for v in value]
            out[f.name] = value
        return out


@dataclass(frozen=True)
class _Calls(_Job):
    """A job that calls a candidate's code or a baseline on ``cases``, and may time them."""

    cases: tuple[str, ...] = ()
    candidate: str | None = None
    timing: dict[str, Any] = field(default_factory=dict)     # TimingOptions fields
    graphs: bool = False                                     # also time CUDA-graph replays
    verify: int = 3                                          # timed outputs kept per case for the reference


@dataclass(frozen=True)
class CheckJob(_Calls):
    """Check ``candidate`` on ``cases`` with ``seeds`` secret seeds each (``seeds_by_case`` names them where
    the parent chose them, as a pool does); then, where ``bench_cases`` is set and every case ran, time those."""

    seeds: int = 3
    seeds_by_case: dict[str, list[int]] = field(default_factory=dict)
    bench_cases: tuple[str, ...] = ()

    kind = "check"
    role = "candidate"

    @property
    def mode(self) -> str:   # type: ignore[override]
        return "eval" if self.bench_cases else "check"


@dataclass(frozen=True)
class BenchJob(_Calls):
    """Time ``cases`` of a ``candidate`` file, or of a ``baseline`` of the problem (eager, compile)."""

    baseline: str | None = None

    kind = "bench"
    mode = "bench"

    @property
    def role(self) -> str:   # type: ignore[override]
        return "candidate" if self.candidate else "baseline"


@dataclass(frozen=True)
class VerifyJob(_Job):
    """Verify each of ``items`` against the reference, reading the outputs from ``outputs`` (files or folders the
    candidate's worker wrote)."""

    items: tuple[VerifyItem, ...] = ()
    outputs: tuple[str, ...] = ()

    kind = "verify"
    role = "reference"
    mode = "verify"


Job = Union[CheckJob, BenchJob, VerifyJob]
_KINDS = {cls.kind: cls for cls in (CheckJob, BenchJob, VerifyJob)}


def job_from_json(d: dict[str, Any]) -> Job:
    """The job a ``to_json`` dict describes."""
    if not isinstance(d, dict) or d.get("schema") != SCHEMA:
        raise JobFormatError(f"not a {SCHEMA} job (schema {d.get('schema') if isinstance(d, dict) else None!r}); "
                             "the harness and the worker come from different kernelpilot versions?")
    cls = _KINDS.get(d.get("kind"))
    if cls is None:
        raise JobFormatError(f"unknown job kind {d.get('kind')!r}; known: {', '.join(sorted(_KINDS))}")
    kw: dict[str, Any] = {}
    for f in fields(cls):
        if f.name not in d:
            continue
        value = d[f.name]
        if f.name == "problem":
            value = Problem.from_json(value)
        elif f.name == "items":
            value = tuple(VerifyItem(**v) for v in value)
        elif f.name in ("cases", "bench_cases", "outputs"):
            value = tuple(value)
        kw[f.name] = value
    try:
        return cls(**kw)
    except TypeError as e:
        raise JobFormatError(f"a {cls.kind} job the worker cannot read: {e}") from None
