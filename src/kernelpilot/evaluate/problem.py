"""A problem: what is computed (a reference), on what (an input generator and cases), and how closely a
candidate must agree (tolerances). Loaded from a folder in one of three formats:

- native: ``problem.toml`` naming ``reference.py:FUNC`` and ``reference.py:make_inputs``;
- KernelBench: a ``.py`` file with ``Model``, ``get_inputs``, ``get_init_inputs`` (candidate: ``ModelNew``);
- GPU MODE: ``reference.py`` (``ref_kernel``, ``generate_input``, ``check_implementation``) + ``task.yml``
  (candidate: ``custom_kernel`` in a submission file).

``Problem`` is plain data (it pickles and goes to workers as JSON); the code that runs the problem lives in
``ProblemRuntime`` implementations, which only workers instantiate (they import torch and the problem's code).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

__all__ = ["Case", "Tolerance", "Problem", "ProblemRuntime", "DEFAULT_TOLERANCES", "load_problem"]

Format = Literal["native", "kernelbench", "gpumode"]

# Per-dtype defaults: close to what torch.testing uses, loosened a little for reductions in low precision.
DEFAULT_TOLERANCES: dict[str, tuple[float, float]] = {
    "float64": (1e-7, 1e-7),
    "float32": (1e-4, 1e-4),
    "tfloat32": (1e-3, 1e-3),
    "float16": (1e-3, 1e-3),
    "bfloat16": (1e-2, 1e-2),
    "float8_e4m3fn": (1.25e-1, 1.25e-1),
    "float8_e5m2": (2.5e-1, 2.5e-1),
}


@dataclass(frozen=True)
class Tolerance:
    atol: float
    rtol: float

    def __post_init__(self) -> None:
        if not (self.atol >= 0 and self.rtol >= 0) or math.isnan(self.atol) or math.isnan(self.rtol):
            raise ValueError(f"tolerances must be non-negative numbers, got atol={self.atol}, rtol={self.rtol}")


@dataclass(frozen=True)
class Case:
    """One configuration: parameters handed to the input generator (shapes, dtype, k, ...)."""

    name: str
    params: dict[str, Any] = field(default_factory=dict)
    hidden: bool = False          # not in the public problem: shape variants the candidate was not shown

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Problem:
    name: str
    format: Format
    root: Path                          # the problem's folder (or the file, for KernelBench)
    cases: list[Case]
    tolerances: dict[str, Tolerance] = field(default_factory=dict)
    default_tolerance: Tolerance = field(default_factory=lambda: Tolerance(1e-4, 1e-4))
    entry: str = "custom_kernel"         # the name a candidate must define
    reference: str = ""                  # "reference.py:func" (native), informational otherwise
    cost: dict[str, str] = field(default_factory=dict)   # "bytes"/"flops" expressions over case params
    vary: list[str] = field(default_factory=list)        # integer params a candidate must not specialise on
    benchmark_cases: list[Case] = field(default_factory=list)  # GPU MODE: its benchmarks list
    options: dict[str, Any] = field(default_factory=dict)      # format-specific settings

    def tolerance_for(self, dtype: str) -> Tolerance:
        """The tolerance for an output of ``dtype`` (``torch.float16`` or ``float16``)."""
        key = dtype.replace("torch.", "")
        if key in self.tolerances:
            return self.tolerances[key]
        if key in DEFAULT_TOLERANCES and not self.tolerances:
            return Tolerance(*DEFAULT_TOLERANCES[key])
        return self.default_tolerance

    @property
    def own_check(self) -> bool:
        """Whether the problem judges outputs with a check of its own (GPU MODE's ``check_implementation``, a
        native problem's ``check``): outputs are then judged whole, never by sampled elements."""
        return self.format == "gpumode" or bool(self.options.get("check"))

    def case(self, name: str) -> Case:
        for c in self.cases + self.benchmark_cases:
            if c.name == name:
                return c
        raise KeyError(name)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "format": self.format,
            "root": str(self.root),
            "cases": [c.to_json() for c in self.cases],
            "benchmark_cases": [c.to_json() for c in self.benchmark_cases],
            "tolerances": {k: asdict(v) for k, v in self.tolerances.items()},
            "default_tolerance": asdict(self.default_tolerance),
            "entry": self.entry,
            "reference": self.reference,
            "cost": dict(self.cost),
            "vary": list(self.vary),
            "options": dict(self.options),
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "Problem":
        return cls(
            name=d["name"],
            format=d["format"],
            root=Path(d["root"]),
            cases=[Case(**c) for c in d["cases"]],
            benchmark_cases=[Case(**c) for c in d.get("benchmark_cases", [])],
            tolerances={k: Tolerance(**v) for k, v in d.get("tolerances", {}).items()},
            default_tolerance=Tolerance(**d["default_tolerance"]),
            entry=d.get("entry", "custom_kernel"),
            reference=d.get("reference", ""),
            cost=dict(d.get("cost", {})),
            vary=list(d.get("vary", [])),
            options=dict(d.get("options", {})),
        )


class ProblemRuntime(Protocol):
    """What a worker process does with a problem. Implemented per format in ``evaluate/formats/``.

    Inputs are whatever the reference takes (a tuple of positional arguments); outputs are a tensor or a
    (nested) tuple/list/dict of tensors and plain values.
    """

    problem: Problem

    def make_inputs(self, case: Case, seed: int, device: str) -> tuple:
        """Fresh inputs for ``case`` from ``seed`` on ``device`` (deterministic: same seed, same inputs)."""

    def reference(self, inputs: tuple, case: Case, seed: int) -> Any:
        """The reference output for these inputs (runs in the reference worker only)."""

    def load_candidate(self, path: Path, device: str, seed: int) -> Any:
        """Import the candidate file and return a callable taking the same inputs as the reference."""

    def check(self, inputs: tuple, output: Any, expected: Any, case: Case) -> tuple[bool, str] | None:
        """A format's own checker (GPU MODE's check_implementation), or None to use the generic comparison."""


def load_problem(path: str | Path) -> Problem:
    """Load a problem from a folder (``problem.toml`` or GPU MODE's ``reference.py`` + ``task.yml``) or a
    KernelBench ``.py`` file. Raises ``UsageError`` / ``InputFormatError`` with the reason."""
    from kernelpilot.evaluate.formats import detect_and_load

    return detect_and_load(Path(path))
