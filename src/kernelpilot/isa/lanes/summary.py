"""What a value that crossed lanes holds, said plainly, and what is wrong with it.

For each sink (a store of such a value, or a readlane of it), each lane's sources: which lanes' loaded values
reached it and how many times. A lane is *complete* when its sources are a whole aligned group of lanes (a 16-lane
row, a 32-lane half, the wave, or on NVIDIA the warp or a shuffle segment) each reached the same number of times.
The report names the group the sink's most complete lanes cover, and the lanes complete over it.

Findings:
- ``lanes.incomplete``: no lane covers its group evenly: the best lane's missing lanes and the lanes it counts
  more often than the others; or a value was added to its copy from lanes that already held the same sources
  (a step applied twice: every lane counted twice). Neither is reported where every combining operation is
  idempotent (max, min, and, or, a select);
- ``lanes.readlane``: a readlane reads a lane that is not complete while another lane is;
- ``lanes.half-wave``: on a 64-lane wave, the most any lane covers is one 32-lane half (a 32-lane warp's pattern,
  or a reduction of two halves on purpose: check which);
- ``lanes.conversion``: a conversion (float to int, int to float, ...) lies on the value's path;
- ``lanes.undefined``: a lane's value comes from a DPP's old destination that was never written;
- ``lanes.zero-fill``: a 0 that bound_ctrl read for a missing source lane went into a max, min, product or and,
  for which 0 is not neutral (a max over negative values comes out 0).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kernelpilot.isa.lanes.values import Data, idempotent, zero_neutral
from kernelpilot.isa.model import Finding, Instruction

__all__ = ["LaneSink", "summarize_sink", "span", "lanes_phrase", "tally"]


@dataclass
class LaneSink:
    """One sink's lane summary (the JSON of ``kpilot isa lanes``)."""

    index: int
    where: str
    opcode: str
    kind: str                          # "store" or "readlane"
    lane_read: int | None
    exchanges: list[str]
    operations: list[str]
    converted: list[str]
    group: str | None                  # "row", "half", "wave", "warp", "segment of N"; None: each lane its own value
    group_size: int | None
    complete_lanes: list[int]
    times: int | None                  # how many times each source lane reached a complete lane
    per_lane: int                      # how often a lane's own values reached it before the first exchange
    best_lane: int
    missing: list[int] = field(default_factory=list)     # of the best lane's group
    uneven: list[int] = field(default_factory=list)      # reached more often than the least-reached
    undefined_lanes: list[int] = field(default_factory=list)
    upper_bound: bool = False          # passed a select on a condition not followed: counts are at most these
    findings: list[Finding] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        d = {k: v for k, v in self.__dict__.items() if k != "findings"}
        d["findings"] = [f.to_json() for f in self.findings]
        return d


def span(lanes: list[int]) -> str:
    """Lanes as ranges: 0-15, 32, 48-63."""
    out, start = [], None
    for i, l in enumerate(lanes):
        if start is None:
            start = l
        if i + 1 == len(lanes) or lanes[i + 1] != l + 1:
            out.append(f"{start}" if start == l else f"{start}-{l}")
            start = None
    return ", ".join(out) if out else "none"


def lanes_phrase(lanes: list[int]) -> str:
    """"lane 15" or "lanes 0-15, 32"."""
    return f"{'lane' if len(lanes) == 1 else 'lanes'} {span(lanes)}"


def tally(items: list[str]) -> str:
    """Items with their counts, in first-seen order: "v_cvt_i32_f32 x4, v_cvt_f32_i32 x4"."""
    counts = {i: items.count(i) for i in items}
    return ", ".join(f"{i} x{n}" if n > 1 else i for i, n in counts.items())


def _group_name(size: int, width: int) -> str:
    if size == width:
        return "wave" if width == 64 else "warp"
    return {16: "row", 32: "half"}.get(size, f"group of {size}") if width == 64 else f"segment of {size}"


def summarize_sink(ins: Instruction, value: Data, lane_read: int | None, width: int) -> LaneSink:
    sizes = [s for s in (4, 8, 16, 32, 64) if s <= width]
    own = all(not any(value.lanes[l][s] for s in range(width) if s != l) for l in range(width))
    best_cover, best_lane = -1, 0
    info = {}
    for lane in range(width):
        counts = value.lanes[lane]
        present = [s for s in range(width) if counts[s]]
        if not present:
            info[lane] = None
            continue
        size = next((z for z in sizes if present[0] // z == present[-1] // z), width)
        base = present[0] - present[0] % size
        group = range(base, base + size)
        reached = [counts[s] for s in group]
        even = min(reached) > 0 and max(reached) == min(reached)
        info[lane] = (size, base, even, min(reached), present)
        cover = len(present) * 2 + (1 if even else 0)
        if cover > best_cover:
            best_cover, best_lane = cover, lane
    top = None if own else info[best_lane]     # each lane only its own: a per-lane use of a cross-lane value
    size = top[0] if top else None
    complete = [l for l, i in info.items() if i and i[0] == size and i[2]]
    idem = all(idempotent(op) for op in value.ops)
    if idem and top and not complete:      # duplicates do not matter: complete means every lane reached
        complete = [l for l, i in info.items() if i and i[0] == size and len(i[4]) == size]
    sink = LaneSink(
        index=ins.index, where=ins.where(), opcode=ins.opcode, kind="readlane" if lane_read is not None else "store",
        lane_read=lane_read, exchanges=list(value.exchanges), operations=sorted(value.ops),
        converted=list(value.converted), group=_group_name(size, width) if size else None, group_size=size,
        complete_lanes=complete, times=top[3] if top and complete else None, per_lane=value.per_lane,
        best_lane=best_lane,
        undefined_lanes=sorted(value.undefined), upper_bound=value.masked)
    if top:
        counts = value.lanes[best_lane]
        group = range(top[1], top[1] + size)
        sink.missing = [s for s in group if not counts[s]]
        least = min((counts[s] for s in group if counts[s]), default=0)
        # an upper bound (a select on data on the way) tells what never arrives, not what arrives twice
        sink.uneven = [] if idem or value.masked else [s for s in group if counts[s] > least]
    sink.findings = _findings(sink, value, width)
    return sink


def _finding(id: str, severity: str, title: str, sink: LaneSink, suggestion: str, **evidence: Any) -> Finding:
    return Finding(id=id, severity=severity, title=title, suggestion=suggestion,
                   evidence={"at": [sink.where], **evidence})


def _findings(sink: LaneSink, value: Data, width: int) -> list[Finding]:
    out = []
    what = f"the value {'read' if sink.kind == 'readlane' else 'stored'} at {sink.where} ({sink.opcode})"
    if not sink.complete_lanes and sink.group_size:
        parts = []
        if sink.missing:
            parts.append(f"misses lanes {span(sink.missing)}")
        if sink.uneven:
            parts.append(f"counts lanes {span(sink.uneven)} more often than the others")
        out.append(_finding(
            "lanes.incomplete", "high",
            f"no lane of {what} combines its {sink.group} exactly once: lane {sink.best_lane} "
            + " and ".join(parts), sink,
            "Follow the exchanges (" + ", ".join(sink.exchanges) + ") lane by lane: a step is missing, repeated or "
            "reads the wrong lanes (a DPP control, a shuffle offset or a swizzle mask).",
            best_lane=sink.best_lane, missing=sink.missing, uneven=sink.uneven))
    if value.repeated and not value.masked:
        out.append(_finding(
            "lanes.incomplete", "high",
            f"{what} adds a value to its copy from lanes that already hold the same sources ("
            f"{', '.join(value.repeated)}): every lane is counted twice from that step on", sink,
            f"Remove the repeated step ({value.repeated[0]}), or give it the distance the reduction still needs.",
            repeated=list(value.repeated), times=sink.times))
    if sink.kind == "readlane" and sink.complete_lanes and sink.lane_read not in sink.complete_lanes:
        out.append(_finding(
            "lanes.readlane", "high",
            f"readlane {sink.lane_read} reads a lane that does not hold the whole {sink.group}; lanes "
            f"{span(sink.complete_lanes)} do", sink,
            f"Read lane {sink.complete_lanes[-1]}, where the reduction ends.", lane_read=sink.lane_read,
            complete_lanes=sink.complete_lanes))
    if width == 64 and sink.group_size == 32 and sink.kind == "store":   # a readlane of a half may be meant
        last = (sink.complete_lanes or [sink.best_lane])[-1]
        other = [s for s in range(width) if s // 32 != last // 32]
        out.append(_finding(
            "lanes.half-wave", "medium",
            f"{what} combines one 32-lane half of the 64-lane wave at most (lanes {span(sink.complete_lanes)} "
            f"hold their half): lanes {span(other)} never reach lane {last}", sink,
            "If the whole wave was meant, add the step across the halves (row_bcast:31 on GFX9, a swizzle or "
            "permute by 32, or readlane of lanes 31 and 63); a 32-lane warp's shuffle pattern stops at offset 16.",
            complete_lanes=sink.complete_lanes))
    if value.converted:
        out.append(_finding(
            "lanes.conversion", "high", f"{what} passes through {tally(list(value.converted))} on its way across lanes",
            sink,
            "Move the value's bits, not the value (__float_as_int / __int_as_float around an int-only exchange).",
            conversions=list(value.converted)))
    looked_at = [sink.lane_read] if sink.lane_read is not None else (sink.complete_lanes or [sink.best_lane])
    zeroed = [l for l in looked_at if l in value.zero_mixed]
    if zeroed:
        out.append(_finding(
            "lanes.zero-fill", "high",
            f"{lanes_phrase(zeroed)} of {what} took a 0 that bound_ctrl read for a missing source lane through an "
            "operation for which 0 is not neutral "
            f"({', '.join(sorted(o for o in value.ops if not zero_neutral(o))) or 'it'})",
            sink, "Turn bound_ctrl off and give the exchange the operation's identity as its old value (-inf or "
            "INT_MIN for a max, +inf for a min, 1 for a product), so that lanes without a source keep their own.",
            lanes=zeroed))
    undefined = [l for l in sink.complete_lanes or [sink.best_lane] if l in value.undefined]
    if undefined:
        out.append(_finding(
            "lanes.undefined", "high",
            f"{lanes_phrase(undefined)} of {what} hold a DPP destination's old value that was never written", sink,
            "Give the exchange an old value (update_dpp's first argument, e.g. the operation's identity) or "
            "bound_ctrl so that lanes without a source lane read 0.", lanes=undefined))
    return out
