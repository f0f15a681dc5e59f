"""The occupancy result, shared by the calculators here and the ISA and profile reports above."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

__all__ = ["Occupancy"]


@dataclass
class Occupancy:
    unit: Literal["warps_per_sm", "waves_per_simd"]
    active: int
    max: int
    percent: float
    limiter: str                          # "registers", "shared_memory", "warps", "blocks", "vgpr", "sgpr", "lds", "waves"
    block_size: int
    limits: dict[str, int] = field(default_factory=dict)   # per resource: blocks (NVIDIA) or waves (AMD) it allows
    compiler: int | None = None           # AMD: the compiler's own `; Occupancy:`
    next_step: str | None = None          # what would raise it one step ("use 64 registers or fewer")
    block_size_source: str | None = None  # where block_size came from: launch bounds, num_warps, --block-size

    def to_json(self) -> dict[str, Any]:
        return asdict(self)
