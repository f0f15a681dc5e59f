"""The ``arch_info`` tool: what kernelpilot knows of a GPU or an ISA, each fact with its source."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kernelpilot.options import Options, param
from kernelpilot.tools.registry import ToolContext, register
from kernelpilot.tools.shapes import ANY, array_of, shape

__all__ = ["ArchRequest", "ArchAnswer"]


@dataclass(frozen=True, kw_only=True)
class ArchRequest(Options):
    name: str | None = param("A product (H200, MI300X, A100) or an ISA arch (sm_90a, gfx942), any case; omit it "
                             "for the list of known GPUs.", argument=True)


@dataclass
class ArchAnswer:
    """The known GPUs (no name asked), or one ISA arch and the product behind the name if it named one."""

    query: str | None
    spec: Any = None           # ArchSpec
    gpu: Any = None            # GPUSpec or None
    gpus: list[Any] | None = None

    def to_json(self) -> dict[str, Any]:
        from kernelpilot.arch.registry import ARCH_SCHEMA

        if self.gpus is not None:
            return {"schema": ARCH_SCHEMA, "gpus": [g.summary() for g in self.gpus]}
        return {"schema": ARCH_SCHEMA, "query": self.query, "gpu": self.gpu.to_json() if self.gpu else None,
                "arch": self.spec.to_json()}


@register("arch_info", """Facts about a GPU or ISA (SM/CU count, registers and shared memory/LDS per SM,
    warp size, bandwidth, peak FLOP/s, cache sizes), each with its source. Without a name, the list of known
    GPUs. Use it to reason about occupancy, rooflines and what an arch supports.""", ArchRequest,
          shape("kernelpilot.arch/1", optional=("gpus", "query", "gpu", "arch"), gpus=array_of(), query="string",
                gpu={"type": ["object", "null"]}, arch=ANY))
def arch_info(opts: ArchRequest, ctx: ToolContext) -> ArchAnswer:
    from kernelpilot.arch.registry import list_gpus, resolve

    if not opts.name:
        return ArchAnswer(None, gpus=list_gpus())
    spec, gpu = resolve(opts.name)
    return ArchAnswer(opts.name, spec, gpu)
