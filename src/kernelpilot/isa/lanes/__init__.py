"""The lane dataflow check (``kpilot isa lanes``): what a kernel's cross-lane code computes, proven from its ISA.

Every value the kernel loads starts as each lane's own; the kernel's instructions run once over those symbolic
values (amd.py: DPP, swizzles, permutes, readlane/writelane; nvidia.py: SHFL, REDUX, VOTE, MATCH), and every store
or readlane of a value that crossed lanes is summed up (summary.py): which source lanes reach each lane and how
many times, through which operations and exchanges, with any conversion on the way, and the findings.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kernelpilot.isa.lanes.summary import LaneSink, lanes_phrase, summarize_sink, tally
from kernelpilot.isa.model import KernelISA

__all__ = ["LaneReport", "LaneAnalysis", "trace_lanes", "wave_width", "lanes_json", "sink_line", "LANES_SCHEMA"]

LANES_SCHEMA = "kernelpilot.isa-lanes/1"


@dataclass
class LaneReport:
    kernel: str
    arch: str
    vendor: str
    width: int
    sinks: list[LaneSink] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    source: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"kernel": self.kernel, "arch": self.arch, "vendor": self.vendor, "source": self.source,
                "wave_size": self.width,
                "sinks": [s.to_json() for s in self.sinks], "notes": list(self.notes),
                "findings": [f.to_json() for s in self.sinks for f in s.findings]}


def wave_width(isa: KernelISA) -> int:
    """32 on NVIDIA; on AMD the code object's wavefront size (64 on GFX9, unless built for wave32)."""
    if isa.vendor == "nvidia":
        return 32
    md = isa.metadata.get("amdhsa_metadata") or {}
    return int(md.get(".wavefront_size") or (64 if isa.arch.startswith("gfx9") else 32))


def trace_lanes(isa: KernelISA) -> LaneReport:
    width = wave_width(isa)
    if isa.vendor == "nvidia":
        from kernelpilot.isa.lanes.nvidia import run_nvidia

        sinks, notes = run_nvidia(isa.instructions)
    else:
        from kernelpilot.isa.lanes.amd import run_amd

        sinks, notes = run_amd(isa.instructions, width)
    return LaneReport(kernel=isa.display_name or isa.name, arch=isa.arch, vendor=isa.vendor, width=width,
                      sinks=[summarize_sink(ins, value, lane, width) for ins, value, lane in sinks], notes=notes,
                      source=isa.source)


def lanes_json(report: Any) -> dict[str, Any] | None:
    """The lane report (JSON) of an analysis report: traced from its ISA, or as a boxed analysis returned it."""
    if isinstance(report, dict):
        return report.get("lanes")
    return trace_lanes(report.isa).to_json() if report.isa is not None else None


def sink_line(sink: dict[str, Any]) -> str:
    """One sink in a line: where, what it holds, through what."""
    what = sink["kind"] + (f" of lane {sink['lane_read']}" if sink.get("lane_read") is not None else "")
    lanes = sink["complete_lanes"]
    if lanes:
        times, per_lane = sink.get("times"), max(sink.get("per_lane") or 1, 1)
        held = (f"{lanes_phrase(lanes)} {'combines its' if len(lanes) == 1 else 'combine their'} "
                f"{sink['group']} ({sink['group_size']} lanes) "
                + ("exactly once" if times == 1 else f"exactly once ({per_lane} values per lane)" if times == per_lane
                   else f"{times} times each"))
    elif sink["group"] is None:
        held = "each lane its own value, combined with a value that crossed lanes (checked where that is read)"
    else:
        held = f"no lane combines a whole {sink['group']} evenly (best: lane {sink['best_lane']})"
    if sink.get("upper_bound"):
        held += " at most (selects on loaded data on the way may zero some lanes)"
    via = ", ".join(sink["exchanges"])
    ops = ", ".join(sink["operations"])
    conv = f"; converted by {tally(sink['converted'])}" if sink.get("converted") else ""
    return f"{sink['where']} {sink['opcode']} ({what}): {held}; via {via}" + (f" with {ops}" if ops else "") + conv


@dataclass
class LaneAnalysis:
    """The lane reports of every kernel of every source (``kpilot isa lanes``)."""

    kernels: list[dict[str, Any]]

    def to_json(self) -> dict[str, Any]:
        return {"schema": LANES_SCHEMA, "kernels": list(self.kernels)}
