"""The profile model: one program's kernel launches as a profiler measured them, for NVIDIA and AMD alike.

Readers (``profile/ncu_csv.py``, ``profile/ncu_details.py``, ``profile/rocprof.py``) produce ``KernelLaunch``
values; ``profile/diagnose.py`` classifies each and adds diagnoses; ``Profile.to_json()`` is the
``kernelpilot.profile/1`` form in DESIGN.md.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from kernelpilot.isa.model import Finding

__all__ = ["SCHEMA", "Finding", "Stall", "ToolRule", "Hotspot", "AccessSpot", "KernelLaunch", "KernelTotal",
           "Profile"]

SCHEMA = "kernelpilot.profile/1"


@dataclass
class Stall:
    reason: str         # "long_scoreboard", "barrier", ... (ncu's names without prefixes)
    pct: float          # share of the warps' cycles spent in this state, percent


@dataclass
class ToolRule:
    """One of the profiler's own rule messages (Nsight Compute's OPT / WRN / INF)."""

    section: str
    kind: str                           # "OPT", "WRN", "INF"
    message: str
    est_speedup_pct: float | None = None
    local: bool = False                 # "Est. Local Speedup" (of the part the rule looks at)


@dataclass
class Hotspot:
    """Where a kernel's sampled warps sat: one SASS instruction (``where``: its offset from the kernel's first
    sampled instruction) or one source line (``file:line``), its share of the kernel's samples, and the stall
    reasons those samples were taken in (largest first, as shares of this spot's samples)."""

    where: str
    samples: int
    share_pct: float
    stalls: list[dict[str, Any]] = field(default_factory=list)   # {"reason", "share_pct"}
    sass: str | None = None


@dataclass
class AccessSpot:
    """One memory instruction's accesses beyond what a perfect pattern would need, from Nsight Compute's
    per-instruction source counters: global-memory sectors beyond coalesced access, or shared-memory wavefronts
    beyond conflict-free ones. ``where``: the SASS offset (as in Hotspot), ``line``: ``file:line`` where the code
    has line info; ``share_pct``: of the launch's excess of that kind."""

    where: str
    excess: int
    total: int                  # sectors (or wavefronts) the instruction moved
    share_pct: float
    line: str | None = None
    sass: str | None = None


@dataclass
class KernelLaunch:
    """One kernel launch. Fields the profiler did not measure are None."""

    name: str                                   # short name ("add", "softmax_kernel")
    id: int                                     # launch index in the profile
    full_name: str = ""                         # as the profiler printed it (demangled signature)
    duration_us: float | None = None
    grid: tuple[int, int, int] | None = None
    block: tuple[int, int, int] | None = None
    registers_per_thread: int | None = None
    shared_bytes_per_block: int | None = None   # static + dynamic (NVIDIA); LDS (AMD)
    sm_count: int | None = None                 # SMs (NVIDIA) or CUs (AMD) of the device
    waves_per_sm: float | None = None
    occupancy: dict[str, Any] = field(default_factory=dict)   # theoretical_pct, achieved_pct, limiter, limits
    throughput: dict[str, Any] = field(default_factory=dict)  # sm_pct, memory_pct, dram_pct
    dram_bytes: float | None = None
    dram_bandwidth_gbps: float | None = None    # achieved
    peak_bandwidth_gbps: float | None = None    # the GPU's (arch data)
    l1_hit_pct: float | None = None
    l2_hit_pct: float | None = None
    stalls: list[Stall] = field(default_factory=list)          # largest first
    tensor_pipe_pct: float | None = None
    # each execution pipe's instruction issue as a share of its peak while the SM was active (NVIDIA: "alu",
    # "fma", "xu", "lsu", ...), busiest first
    pipes: dict[str, float] = field(default_factory=dict)
    # warp-level SASS instructions executed per opcode, most first (from an .ncu-rep: the instruction mix)
    opcodes: dict[str, int] = field(default_factory=dict)
    device: str | None = None
    bound: str | None = None                    # "launch", "latency", "memory", "compute"
    bound_evidence: dict[str, Any] = field(default_factory=dict)
    diagnoses: list[Finding] = field(default_factory=list)     # most important first
    tool_rules: list[ToolRule] = field(default_factory=list)
    hotspots: list[Hotspot] = field(default_factory=list)      # --source: hottest SASS instructions
    hot_lines: list[Hotspot] = field(default_factory=list)     # --source with line info: hottest source lines
    # --source: the instructions with global-memory sectors beyond coalesced access, and those with shared-memory
    # wavefronts beyond conflict-free ones, most excess first
    uncoalesced_at: list[AccessSpot] = field(default_factory=list)
    bank_conflicts_at: list[AccessSpot] = field(default_factory=list)
    metrics: dict[str, float] = field(default_factory=dict, repr=False)   # every raw metric read, base units

    @property
    def blocks(self) -> int | None:
        return None if self.grid is None else self.grid[0] * self.grid[1] * self.grid[2]

    @property
    def threads_per_block(self) -> int | None:
        return None if self.block is None else self.block[0] * self.block[1] * self.block[2]

    def to_json(self, *, metrics: bool = False) -> dict[str, Any]:
        d = asdict(self)
        d["grid"] = list(self.grid) if self.grid else None
        d["block"] = list(self.block) if self.block else None
        if not metrics:
            d.pop("metrics")
        return d


@dataclass
class KernelTotal:
    """All launches of one kernel name: for a program with many kernels, ranked by total time."""

    name: str
    launches: int
    total_us: float
    mean_us: float
    share_pct: float

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Profile:
    tool: str                                   # "ncu", "rocprofv3", "torch-profiler", "cuda-events"
    kernels: list[KernelLaunch]
    source: str = ""                            # the report file or the command profiled
    report: str | None = None                   # the profiler's own report kept beside the summary
    notes: list[str] = field(default_factory=list)

    def totals(self) -> list[KernelTotal]:
        by: dict[str, list[float]] = {}
        for k in self.kernels:
            if k.duration_us is not None:
                by.setdefault(k.name, []).append(k.duration_us)
        whole = sum(sum(v) for v in by.values()) or 1.0
        out = [KernelTotal(n, len(v), round(sum(v), 3), round(sum(v) / len(v), 3), round(100 * sum(v) / whole, 2))
               for n, v in by.items()]
        return sorted(out, key=lambda t: -t.total_us)

    def to_json(self, *, metrics: bool = False) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "tool": self.tool,
            "source": self.source,
            "report": self.report,
            "kernels": [k.to_json(metrics=metrics) for k in self.kernels],
            "totals": [t.to_json() for t in self.totals()],
            "notes": list(self.notes),
        }
