"""What changed between two analyses of a kernel: resources, occupancy, families, opcodes, findings."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kernelpilot.isa.model import KernelReport

__all__ = ["KernelDiff", "IsaDiff", "diff_kernel", "diff_reports", "DIFF_SCHEMA"]

DIFF_SCHEMA = "kernelpilot.isa-diff/1"


@dataclass
class KernelDiff:
    a: str
    b: str
    arch: tuple[str, str]
    resources: dict[str, tuple[Any, Any]] = field(default_factory=dict)
    occupancy: dict[str, tuple[Any, Any]] = field(default_factory=dict)
    instruction_count: tuple[int, int] = (0, 0)
    families: dict[str, tuple[int, int]] = field(default_factory=dict)
    opcodes: dict[str, tuple[int, int]] = field(default_factory=dict)
    loops: tuple[int, int] = (0, 0)
    stall_cycles: tuple[Any, Any] = (None, None)
    stall_method: str | None = None
    findings_resolved: list[dict[str, str]] = field(default_factory=list)
    findings_appeared: list[dict[str, str]] = field(default_factory=list)
    findings_kept: list[str] = field(default_factory=list)
    lanes: tuple[list[str], list[str]] = ([], [])      # each side's lane summary (isa lanes), one line per sink

    def to_json(self) -> dict[str, Any]:
        pair = lambda t: {"a": t[0], "b": t[1]}  # noqa: E731
        return {
            "a": self.a,
            "b": self.b,
            "arch": {"a": self.arch[0], "b": self.arch[1]},
            "resources": {k: pair(v) for k, v in self.resources.items()},
            "resources_changed": [k for k, (x, y) in self.resources.items() if x != y],
            "occupancy": {k: pair(v) for k, v in self.occupancy.items()},
            "instruction_count": pair(self.instruction_count),
            "families": {k: pair(v) for k, v in self.families.items()},
            "opcodes": {k: pair(v) for k, v in self.opcodes.items()},
            "loops": pair(self.loops),
            "stall_cycles": pair(self.stall_cycles),
            "stall_method": self.stall_method,
            "findings": {"resolved": self.findings_resolved, "appeared": self.findings_appeared,
                         "kept": self.findings_kept},
            "lanes": pair(self.lanes),
        }


def _changed(a: dict[str, Any], b: dict[str, Any], skip: tuple[str, ...] = ()) -> dict[str, tuple[Any, Any]]:
    out = {}
    for k in list(a) + [k for k in b if k not in a]:
        if k in skip:
            continue
        va, vb = a.get(k), b.get(k)
        if va != vb:
            out[k] = (va, vb)
    return out


def _lane_lines(r: KernelReport) -> list[str]:
    """The kernel's lane summary, one line per sink with its findings; none where the kernel has no cross-lane
    code (or its report was made without one)."""
    from kernelpilot.isa.lanes import lanes_json, sink_line

    if not any(f.startswith("crosslane") for f in r.families):
        return []
    report = lanes_json(r) or {}
    return [sink_line(s) + "".join(f" [{f['id']}]" for f in s["findings"]) for s in report.get("sinks", [])]


def diff_kernel(a: KernelReport, b: KernelReport) -> KernelDiff:
    ra, rb = a.resources.to_json(), b.resources.to_json()
    oa = a.occupancy.to_json() if a.occupancy else {}
    ob = b.occupancy.to_json() if b.occupancy else {}
    fa = {f.id: f for f in a.findings}
    fb = {f.id: f for f in b.findings}
    return KernelDiff(
        a=a.display_name or a.name,
        b=b.display_name or b.name,
        arch=(a.arch, b.arch),
        # every resource, changed or not: an unchanged register count is an answer too
        resources={k: (ra.get(k), rb.get(k)) for k in list(ra) + [k for k in rb if k not in ra] if k != "source"},
        occupancy=_changed({k: oa.get(k) for k in ("active", "max", "percent", "limiter", "block_size", "compiler")},
                           {k: ob.get(k) for k in ("active", "max", "percent", "limiter", "block_size", "compiler")}),
        instruction_count=(a.instruction_count, b.instruction_count),
        families={k: (v[0] or 0, v[1] or 0) for k, v in _changed(a.families, b.families).items()},
        opcodes={k: (v[0] or 0, v[1] or 0) for k, v in _changed(a.opcodes, b.opcodes).items()},
        loops=(len(a.loops), len(b.loops)),
        stall_cycles=(a.stalls.total_cycles, b.stalls.total_cycles),
        stall_method=b.stalls.method,
        findings_resolved=[{"id": i, "title": fa[i].title} for i in fa if i not in fb],
        findings_appeared=[{"id": i, "title": fb[i].title} for i in fb if i not in fa],
        findings_kept=[i for i in fa if i in fb],
        lanes=(_lane_lines(a), _lane_lines(b)),
    )


def _key(r: KernelReport) -> str:
    return (r.display_name or r.name).split("(", 1)[0]


def diff_reports(a: list[KernelReport], b: list[KernelReport]) -> tuple[list[KernelDiff], list[str], list[str]]:
    """Pair kernels by name (or the only kernel on each side) and diff each pair.

    Returns the diffs, the kernels only in A, and the kernels only in B."""
    if len(a) == 1 and len(b) == 1:
        return [diff_kernel(a[0], b[0])], [], []
    bmap = {_key(r): r for r in b}
    diffs, only_a = [], []
    for r in a:
        other = bmap.pop(_key(r), None)
        if other is None:
            only_a.append(_key(r))
        else:
            diffs.append(diff_kernel(r, other))
    return diffs, only_a, list(bmap)


@dataclass
class IsaDiff:
    """Two versions of a file compared: the kernels both have, and those only one has."""

    a: str
    b: str
    kernels: list[KernelDiff]
    only_in_a: list[str]
    only_in_b: list[str]

    def to_json(self) -> dict[str, Any]:
        return {"schema": DIFF_SCHEMA, "a": self.a, "b": self.b, "kernels": [d.to_json() for d in self.kernels],
                "only_in_a": self.only_in_a, "only_in_b": self.only_in_b}
