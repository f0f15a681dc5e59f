"""Which built-in passage explains each finding (isa) and diagnosis (profile): citations into
docs/corpus/, attached to every Finding so that an agent can read why it fired. tests/test_docs.py checks
that every citation here exists."""

from __future__ import annotations

__all__ = ["FINDING_DOCS", "for_finding"]

FINDING_DOCS: dict[str, list[str]] = {
    "amd.lds-crosslane": ["builtin/amdgcn.md#ds-bpermute-vs-dpp", "builtin/amdgcn.md#dpp-row-bcast"],
    "crosslane.conversion": ["builtin/amdgcn.md#crosslane-builtin-types"],
    "amd.readlane-chain": ["builtin/amdgcn.md#readlane", "builtin/amdgcn.md#dpp-row-bcast"],
    "amd.spills": ["builtin/amdgcn.md#occupancy"],
    "nvidia.spills": ["builtin/nvidia.md#spills"],
    "nvidia.local-memory": ["builtin/nvidia.md#spills"],
    "mem.narrow-global-loads": ["builtin/nvidia.md#coalescing"],
    "nvidia.hmma-on-hopper": ["builtin/nvidia.md#wgmma"],
    "sync.full-wait-in-loop": ["builtin/amdgcn.md#s-waitcnt", "builtin/nvidia.md#sass-control"],
    "occupancy.registers": ["builtin/nvidia.md#occupancy", "builtin/amdgcn.md#occupancy"],
    "occupancy.shared": ["builtin/nvidia.md#occupancy", "builtin/amdgcn.md#occupancy"],
    "occupancy.achieved-low": ["builtin/nvidia.md#occupancy"],
    "launch.underfill": ["builtin/nvidia.md#waves-per-sm"],
    "launch.tail": ["builtin/nvidia.md#waves-per-sm"],
    "stall.long-scoreboard": ["builtin/profiling.md#long-scoreboard"],
    "stall.hotspot": ["builtin/profiling.md#warp-sampling"],
    "memory.uncoalesced": ["builtin/nvidia.md#coalescing"],
    "memory.bank-conflicts": ["builtin/nvidia.md#bank-conflicts"],
    "memory.dram-bandwidth-low": ["builtin/profiling.md#speed-of-light"],
    "compute.pipe-busy": ["builtin/profiling.md#pipe-utilization"],
    "lanes.incomplete": ["builtin/amdgcn.md#dpp-row-shift", "builtin/amdgcn.md#dpp-row-bcast", "builtin/nvidia.md#shfl"],
    "lanes.readlane": ["builtin/amdgcn.md#readlane", "builtin/amdgcn.md#dpp-row-bcast"],
    "lanes.half-wave": ["builtin/amdgcn.md#dpp-row-bcast", "builtin/amdgcn.md#ds-bpermute-vs-dpp"],
    "lanes.conversion": ["builtin/amdgcn.md#crosslane-builtin-types"],
    "lanes.undefined": ["builtin/amdgcn.md#dpp"],
    "lanes.zero-fill": ["builtin/amdgcn.md#dpp"],
}


def for_finding(finding_id: str) -> list[str]:
    """The citations for a finding id; ids with a variant suffix (occupancy.registers...) match exactly."""
    return list(FINDING_DOCS.get(finding_id, []))
