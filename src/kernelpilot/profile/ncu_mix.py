"""The instruction mix of each kernel launch in an ``.ncu-rep``: warp-level SASS instructions executed per opcode
(Nsight Compute's instanced metric ``sass__inst_executed_per_opcode``, which ncu's raw page gives only as a total).
Read with NVIDIA's ``ncu_report`` module, as the hotspots are (``profile/ncu_source.py``)."""

from __future__ import annotations

from typing import Any

from kernelpilot.profile.ncu_source import actions

__all__ = ["read_opcodes", "shares"]

_PER_OPCODE = "sass__inst_executed_per_opcode"


def read_opcodes(report: Any) -> list[dict[str, int]]:
    """Per launch of the report (loaded, or its path), in launch order: {opcode: warp-level instructions
    executed}, most executed first; empty for a launch whose report lacks the metric."""
    out = []
    for action in actions(report):
        m = action.metric_by_name(_PER_OPCODE)
        counts: dict[str, int] = {}
        if m is not None and m.has_correlation_ids():
            ids = m.correlation_ids()
            for i in range(m.num_instances()):
                n = int(m.as_uint64(i))
                if n:
                    counts[ids.as_string(i)] = counts.get(ids.as_string(i), 0) + n
        out.append(dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))))
    return out


def shares(opcodes: dict[str, int], top: int = 5) -> dict[str, float]:
    """The ``top`` most executed opcodes' shares of all executed instructions, percent."""
    total = sum(opcodes.values())
    return {op: round(100 * n / total, 1) for op, n in list(opcodes.items())[:top]} if total else {}
