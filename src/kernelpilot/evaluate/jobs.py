"""The jobs the harness hands its workers, and the results they send back: typed, versioned, self-contained, and
serialized as plain JSON.

Three kinds, one per worker role:

- ``CheckJob`` (a candidate's worker; ``bench_cases`` set: check, then time those cases in the same process),
- ``BenchJob`` (a candidate's or a baseline's worker: time the cases),
- ``VerifyJob`` (the reference's worker: regenerate the inputs from their seeds, run the reference, compare the
  candidate's saved outputs, each named by a ``VerifyItem``).

A job carries everything a worker needs: the problem's definition and the seal on its files, the device, the
cases, the timing options; nothing refers to the parent's memory, so the same job runs in a worker on this host,
on a remote host or in a cluster task. ``to_json`` gives ``{"schema": "kernelpilot.job/1", "kind": ..., ...}``;
``job_from_json`` reads it back and refuses another schema with one clear message. Plain data only: no pickle.

A worker answers with a ``WorkerResult``: the ``CaseRun`` of each case and seed it checked, the ``BenchRun`` of
each case it timed (with the outputs kept for re-checking), the reference's ``Verdict`` on each output, the
guards' ``FlagRecord``s, and where its seconds went.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any, Union

from kernelpilot.evaluate.problem import Problem
from kernelpilot.evaluate.timing import Timing

__all__ = ["SCHEMA", "CheckJob", "BenchJob", "VerifyJob", "VerifyItem", "Job", "job_from_json", "JobFormatError",
           "WorkerResult", "CaseRun", "BenchRun", "Verdict", "FlagRecord", "output_key"]

SCHEMA = "kernelpilot.job/1"


class JobFormatError(ValueError):
    """A job that is not one this harness can run (another schema, an unknown kind, a missing field)."""


def output_key(case: str, seed: int, *, timed: bool = False) -> str:
    """The name an output travels under, from the worker that made it to the reference's verdict on it: one of
    the check's, or (``timed``) a timed call's kept for re-checking."""
    return f"{case}|bench|{seed}" if timed else f"{case}|{seed}"


def _timed_key(key: str) -> bool:
    return "|bench|" in key


@dataclass(frozen=True)
class VerifyItem:
    """One output for the reference to verify: the case and secret seed it was made from, the fingerprint of the
    inputs the candidate's process made, and the fingerprints its journal recorded when the output was made
    (``"missing"`` where there was no record); or, with ``sample``, a timed call judged by the elements of its
    output that its journal record holds."""

    case: str
    seed: int
    key: str
    fingerprint: str
    output_fingerprint: str = "missing"
    journal_input: str | None = None
    sample: dict[str, Any] | None = None    # a timed call re-checked by the sample its record holds (sampling.py)

    @property
    def timed(self) -> bool:
        """A timed call's output, kept for re-checking (not one of the check's)."""
        return _timed_key(self.key)


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


# ---------------------------------------------------------------- what a worker sends back

@dataclass(frozen=True)
class FlagRecord:
    """A guard's finding in a worker (``result.Flag`` on the parent's side)."""

    id: str
    message: str
    level: str = "warning"
    evidence: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class CaseRun:
    """One case and seed of a check, as the candidate's worker ran it (its verdict comes from the reference)."""

    case: str
    seed: int
    fingerprint: str                 # of the inputs, made before the candidate was imported
    hidden: bool = False
    error: str | None = None         # it could not run (an exception, a rejected output, ...)
    nondeterministic: bool = False
    mutated_inputs: bool = False


@dataclass(frozen=True)
class BenchRun:
    """One timed case: its timing, its CUDA-graph timing (or why the call could not be captured), and the
    outputs kept for the reference."""

    case: str
    timing: Timing | None = None
    graph_timing: Timing | None = None
    graph_error: str = ""
    error: str = ""
    verify: tuple[VerifyItem, ...] = ()

    @classmethod
    def from_json(cls, b: dict[str, Any]) -> BenchRun:
        graph = b.get("graph_timing") or None
        return cls(case=b["case"], timing=Timing.from_json(b["timing"]) if b.get("timing") else None,
                   graph_timing=Timing.from_json(graph) if graph and "error" not in graph else None,
                   graph_error=str(graph["error"]) if graph and "error" in graph else b.get("graph_error", ""),
                   error=b.get("error", ""), verify=tuple(VerifyItem(**v) for v in b.get("verify", ())))


@dataclass(frozen=True)
class Verdict:
    """The reference's verdict on one output."""

    case: str
    seed: int
    key: str
    ok: bool = False
    message: str = ""
    max_abs_err: float | None = None
    rel_err: float | None = None
    mismatched: int = 0
    total: int = 0
    worst: tuple[dict[str, Any], ...] = ()
    low_signal: str | None = None

    @property
    def timed(self) -> bool:
        return _timed_key(self.key)


@dataclass(frozen=True)
class WorkerResult:
    """What a worker reports for its job, plus what the parent learned around it (``seconds``, ``stderr``,
    ``journal``, ``sandbox``, ``strays``, ``exit_s``). ``fatal``: the job could not be carried out (the text
    says why); ``problem_error``: the problem's own code failed."""

    role: str = ""
    mode: str = ""
    fatal: str | None = None
    problem_error: bool = False
    forged: bool = False
    gpu: str | None = None
    flags: tuple[FlagRecord, ...] = ()
    notes: tuple[str, ...] = ()
    phases_s: dict[str, float] = field(default_factory=dict)
    cases: tuple[CaseRun, ...] = ()
    bench: tuple[BenchRun, ...] = ()
    verdicts: tuple[Verdict, ...] = ()
    import_ops: tuple[str, ...] = ()
    import_kernels: tuple[str, ...] = ()
    candidate_ops: tuple[str, ...] = ()
    reference_ops: tuple[str, ...] = ()
    probe: dict[str, Any] | None = None
    cached: int = 0
    # the parent's
    seconds: float | None = None
    stderr: str = ""
    journal: tuple[dict[str, Any], ...] = ()
    sandbox: dict[str, Any] | None = None
    strays: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> WorkerResult:
        """Read a worker's result (plain data from another process: unknown keys are dropped, and a malformed
        one raises JobFormatError)."""
        if not isinstance(d, dict):
            raise JobFormatError("a worker's result must be a JSON object")
        try:
            kw = {f.name: d[f.name] for f in fields(cls) if f.name in d}
            kw["flags"] = tuple(FlagRecord(**f) for f in d.get("flags", ()))
            kw["cases"] = tuple(CaseRun(**c) for c in d.get("cases", ()))
            kw["bench"] = tuple(BenchRun.from_json(b) for b in d.get("bench", ()))
            kw["verdicts"] = tuple(Verdict(**{**v, "worst": tuple(v.get("worst", ()))}) for v in d.get("verdicts", ()))
            for name in ("notes", "import_ops", "import_kernels", "candidate_ops", "reference_ops", "journal",
                         "strays"):
                if name in kw:
                    kw[name] = tuple(kw[name])
            return cls(**kw)
        except (TypeError, KeyError) as e:
            raise JobFormatError(f"a worker's result the harness cannot read: {e}") from None
