"""The ISA model: one kernel's instructions and resources, for SASS and AMDGCN alike.

Parsers (``isa/sass.py``, ``isa/amdgcn.py``) produce ``KernelISA``; analysis (``isa/analyze.py``)
turns it into a ``KernelReport``, whose ``to_json()`` is the ``kernelpilot.isa/1`` form in DESIGN.md.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from kernelpilot.arch.model import Occupancy

__all__ = [
    "Analysis",
    "SCHEMA",
    "Vendor",
    "Control",
    "Instruction",
    "NvidiaResources",
    "AmdResources",
    "KernelISA",
    "Occupancy",
    "Loop",
    "StallEstimate",
    "Finding",
    "KernelReport",
]

SCHEMA = "kernelpilot.isa/1"
Vendor = Literal["nvidia", "amd"]


@dataclass(frozen=True)
class Control:
    """SASS scheduling control bits of one instruction (Volta and later: bits 41..57 of the second word)."""

    stall: int          # stall cycles before the next instruction issues (0..15)
    yield_: bool        # yield hint (the encoded bit 45 clear: CuAssembler and turingas read it so)
    write_barrier: int | None  # scoreboard set on write (0..5), None when 7 (no barrier)
    read_barrier: int | None   # scoreboard set on read (0..5), None when 7
    wait_mask: int      # 6-bit mask of scoreboards this instruction waits on
    reuse: int          # register-reuse cache flags


@dataclass(frozen=True)
class Instruction:
    """One machine instruction.

    ``opcode`` is the full mnemonic with its dotted modifiers as the disassembler prints it
    (``LDG.E.128.CONSTANT``, ``HGMMA.64x128x16.F32.BF16``, ``v_max_f32_dpp``); ``operands`` the rest of the
    line (for AMD including trailing modifiers such as ``row_shr:4 row_mask:0xf``).
    ``target`` is the index (in the kernel's instruction list) of a branch's destination, when resolved.
    """

    index: int
    opcode: str
    operands: str = ""
    address: int | None = None
    predicate: str = ""
    control: Control | None = None
    target: int | None = None
    line: int | None = None          # source line, where the binary has line info
    file: str | None = None

    @property
    def base(self) -> str:
        """The opcode without modifiers: ``LDG`` for ``LDG.E.128``; AMD mnemonics unchanged."""
        return self.opcode.split(".", 1)[0]

    def where(self) -> str:
        """How a finding points at this instruction: its address in hex, else its index."""
        return f"0x{self.address:04x}" if self.address is not None else f"#{self.index}"


@dataclass
class NvidiaResources:
    registers: int | None = None
    spill_store_bytes: int | None = None
    spill_load_bytes: int | None = None
    stack_bytes: int | None = None
    shared_bytes: int | None = None       # static shared memory per block
    local_bytes: int | None = None
    barriers: int | None = None
    constant_bytes: int | None = None     # cmem[0]
    source: str = ""                      # where the numbers came from: "ptxas -v", "cuobjdump -res-usage", "triton"

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class AmdResources:
    vgpr: int | None = None
    sgpr: int | None = None
    agpr: int | None = None
    vgpr_spill: int | None = None
    sgpr_spill: int | None = None
    lds_bytes: int | None = None
    scratch_bytes: int | None = None
    wavefront_size: int | None = None
    accum_offset: int | None = None
    total_vgpr: int | None = None          # unified VGPR+AGPR count the hardware allocates
    source: str = ""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class KernelISA:
    """A parsed kernel: what the binary and the compiler's report say, before any analysis."""

    name: str                       # symbol name as in the binary (mangled for C++)
    arch: str                       # normalized arch name: sm_90, sm_90a, gfx942
    vendor: Vendor
    source: str                     # the input it came from (file path, or file.py:kernel)
    instructions: list[Instruction]
    resources: NvidiaResources | AmdResources
    display_name: str | None = None  # demangled name where it differs
    block_size: int | None = None     # threads per block from launch bounds, num_warps or max_flat_workgroup_size
    block_size_source: str | None = None
    block_size_assumed: bool = False  # no launch bounds: the size is a default, not what the kernel is launched with
    compiler_occupancy: int | None = None   # AMD `; Occupancy:` (waves per SIMD)
    labels: dict[str, int] = field(default_factory=dict)   # label -> instruction index
    metadata: dict[str, Any] = field(default_factory=dict)  # anything else the parser found worth keeping


@dataclass
class Loop:
    """A natural loop found from a back edge: instructions ``start``..``end`` (inclusive, indices)."""

    start: int
    end: int
    depth: int
    start_address: int | None
    end_address: int | None
    instruction_count: int
    families: dict[str, int]
    opcodes: dict[str, int]
    stall_cycles: int | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class StallEstimate:
    """A static estimate of where issue slots go, from control words (SASS) or waits and nops (AMDGCN)."""

    method: str
    total_cycles: int | None = None         # sum of encoded stall counts (SASS) or nop cycles (AMD)
    barrier_waits: int = 0                  # instructions that wait on a scoreboard (SASS) / s_waitcnt (AMD)
    full_memory_waits: int = 0              # AMD s_waitcnt vmcnt(0); SASS DEPBAR ... 0x0
    nops: int = 0
    nop_cycles: int = 0
    yields: int = 0
    in_loops_cycles: int | None = None
    top: list[dict[str, Any]] = field(default_factory=list)  # most expensive instructions: where, opcode, cycles

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Finding:
    id: str                # stable: "amd.lds-crosslane", "nvidia.spills", ...
    severity: Literal["high", "medium", "low", "info"]
    title: str
    evidence: dict[str, Any]   # counts, addresses, resource values: the facts that made it fire
    suggestion: str
    docs: list[str] = field(default_factory=list)   # citations of the built-in passages that explain it

    def __post_init__(self) -> None:
        if not self.docs:
            from kernelpilot.docs.links import for_finding

            self.docs = for_finding(self.id)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class KernelReport:
    """Everything ``kpilot isa analyze`` says about one kernel."""

    name: str
    arch: str
    vendor: Vendor
    source: str
    resources: NvidiaResources | AmdResources
    occupancy: Occupancy | None
    instruction_count: int
    opcodes: dict[str, int]
    families: dict[str, int]
    loops: list[Loop]
    stalls: StallEstimate
    findings: list[Finding]
    display_name: str | None = None
    notes: list[str] = field(default_factory=list)   # what the build said that bears on the numbers
    isa: KernelISA | None = field(default=None, repr=False, compare=False)

    def dynamic_shared_bytes(self) -> int:
        """Shared memory (LDS) allocated at launch (Triton's), beside the static amount in ``resources``."""
        return int((self.isa.metadata if self.isa else {}).get("dynamic_shared_bytes", 0) or 0)

    def _dynamic_shared(self) -> dict[str, int]:
        n = self.dynamic_shared_bytes()
        return {"dynamic_shared_bytes": n} if n else {}

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "display_name": self.display_name or self.name,
            "arch": self.arch,
            "vendor": self.vendor,
            "source": self.source,
            "resources": self.resources.to_json() | self._dynamic_shared(),
            "occupancy": self.occupancy.to_json() if self.occupancy else None,
            "instruction_count": self.instruction_count,
            "opcodes": dict(self.opcodes),
            "families": dict(self.families),
            "loops": [l.to_json() for l in self.loops],
            "stalls": self.stalls.to_json(),
            "findings": [f.to_json() for f in self.findings],
            "notes": list(self.notes),
        }


@dataclass
class Analysis:
    """The reports of one analysis (``kpilot isa analyze``): every kernel of every source, each naming its source."""

    kernels: list[KernelReport | dict[str, Any]]    # a dict: a report made in another process, as JSON

    def to_json(self) -> dict[str, Any]:
        return {"schema": SCHEMA, "kernels": [k if isinstance(k, dict) else k.to_json() for k in self.kernels]}
