"""Parse NVIDIA SASS text (``nvdisasm -c -hex -gi`` or ``cuobjdump -sass``) into ``KernelISA`` objects.

``parse_sass`` is a pure parser (it only runs ``c++filt`` to demangle names, which can be turned off).
``load_nvidia_kernels`` at the bottom is the one function here that runs tools: it compiles a ``.cu``
or ``.ptx``, or opens a cubin / fatbin / executable, and returns parsed kernels with their resources.

Both disassemblers print a Volta-and-later instruction as two 64-bit words::

    /*00a0*/   @P0 BRA `(.L_x_1) ;            /* 0x0000000000280947 */
                                              /* 0x000fea0003800000 */

The second word's bits 41..61 are the scheduling control field (bits 105..125 of the 128-bit
instruction), decoded as in the public assemblers (CuAssembler ``CuSMVersion.splitControlCodes_7x_8x``
and ``decodeCtrlCodes``, turingas ``tools/disasm.py``, after maxas' control-code notes)::

    bits 41..44  stall cycles (0..15)
    bit  45      yield: the public decoders print ``Y`` when this bit is CLEAR, so ``yield_`` is
                 ``not bit45`` (the 0x7e0 control of NVIDIA's NOP padding reads ``[B------:R-:W-:Y:S00]``)
    bits 46..48  write (scoreboard) barrier set on completion, 7 = none -> None
    bits 49..51  read barrier, 7 = none -> None
    bits 52..57  wait mask: scoreboards this instruction waits on
    bits 58..61  register reuse-cache flags

Checked on nvcc 13.0 output for sm_80..sm_100a: stalls are 0..15 with most 1..5, the instruction after
an ``LDG`` that sets write barrier 2 waits with mask bit 2 (0x004), and branches and ``EXIT`` carry
stall 5 as NVIDIA's own examples do.

Branch targets are resolved to instruction indices: nvdisasm labels (`` `(.L_x_3)``, `` `($fn)`` for
``CALL.REL``, ``BRANCH_TARGETS`` lists of ``BRX``) and cuobjdump's absolute addresses (``BRA 0x1e0``,
``BSSY B0, 0x150``, ``CALL.REL.NOINC 0x1290``). ``target`` is set for every opcode that names one,
including ``BSSY`` (a reconvergence point, not a jump) and ``CALL``; control-flow analysis should decide
by opcode which ones are edges. The compiler's padding at the end of each function (the ``BRA`` to
itself after the last ``EXIT`` and the ``NOP`` fill) is left out of ``instructions`` and counted in
``metadata["padding"]``.

Source lines (nvdisasm ``-gi`` on a ``-lineinfo`` cubin): a run of ``//## File "F", line N [inlined at
...]`` lines is the inline chain of the instructions that follow, innermost first. ``line``/``file``
are the innermost frame that is not a CUDA toolkit header (``.../cuda*/.../include/...``), else the
outermost frame: the user's own source line for an inlined intrinsic, the device function's line for
the user's own inlined helpers.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Iterable, Mapping

from kernelpilot.isa.model import Control, Instruction, KernelISA, NvidiaResources

__all__ = [
    "parse_sass",
    "decode_control",
    "demangle",
    "load_nvidia_kernels",
]

# ---------------------------------------------------------------------------------------------------------
# Control words

_CONTROL_CACHE: dict[int, Control] = {}


def decode_control(second_word: int) -> Control:
    """Decode the scheduling control bits of a Volta+ instruction from its second (high) 64-bit word."""
    ctrl = (second_word >> 41) & 0x1FFFFF
    c = _CONTROL_CACHE.get(ctrl)
    if c is None:
        wb = (ctrl >> 5) & 0x7
        rb = (ctrl >> 8) & 0x7
        c = Control(
            stall=ctrl & 0xF,
            yield_=not (ctrl >> 4) & 1,
            write_barrier=None if wb == 7 else wb,
            read_barrier=None if rb == 7 else rb,
            wait_mask=(ctrl >> 11) & 0x3F,
            reuse=(ctrl >> 17) & 0xF,
        )
        _CONTROL_CACHE[ctrl] = c
    return c


# ---------------------------------------------------------------------------------------------------------
# Demangling

def _demangler() -> str | None:
    """NVIDIA's cu++filt (on PATH or in the CUDA toolkit), else binutils' c++filt: CUDA kernels use the
    Itanium C++ ABI, which both read."""
    found = shutil.which("cu++filt")
    if found:
        return found
    home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH") or "/usr/local/cuda"
    p = Path(home) / "bin" / "cu++filt"
    if p.is_file():
        return str(p)
    return shutil.which("c++filt")


def demangle(names: Iterable[str]) -> dict[str, str]:
    """Demangled forms of the C++ names among ``names`` (``cu++filt`` or ``c++filt``, one process for
    all of them). Names that are not mangled, or when no demangler is installed, are left out."""
    todo = sorted({n for n in names if n.startswith("_Z")})
    if not todo:
        return {}
    exe = _demangler()
    if exe is None:
        return {}
    try:
        proc = subprocess.run([exe], input="\n".join(todo) + "\n", capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return {}
    out_lines = proc.stdout.splitlines()
    if proc.returncode != 0 or len(out_lines) != len(todo):
        return {}
    return {m: d for m, d in zip(todo, out_lines) if d and d != m}


# ---------------------------------------------------------------------------------------------------------
# The parser

_INSTR = re.compile(r"/\*([0-9a-fA-F]+)\*/\s*(.*?)\s*;\s*(?:/\*\s*0x([0-9a-fA-F]+)\s*\*/)?\s*$")
_HIGH_WORD = re.compile(r"/\*\s*0x([0-9a-fA-F]+)\s*\*/\s*$")
_LINEINFO = re.compile(r'//##\s*File\s+"([^"]*)",\s*line\s+(\d+)')
_FUNCTION = re.compile(r"Function\s*:\s*(\S+)")
_TARGET_DIRECTIVE = re.compile(r"\.target\s+(sm_\w+)")
_CODE_FOR = re.compile(r"code for (sm_\w+)")
_ARCH_EQ = re.compile(r"arch\s*=\s*(sm_\w+)")
_LABEL_REF = re.compile(r"`\(([^)]+)\)")
_BRANCH_TARGETS = re.compile(r'BRANCH_TARGETS\s+([^"*]+)')
_HEX_TAIL = re.compile(r"(?:^|[\s,])(0x[0-9a-fA-F]+)\s*$")
_OTHER_ENTRY = re.compile(r"\.other\s+([^,\s]+),\s*@\"[^\"]*STO_CUDA_ENTRY")

# Opcodes whose trailing hex operand is an absolute address in cuobjdump's output.
_ADDRESS_OPS = frozenset({"BRA", "BSSY", "JMP", "SSY", "PBK", "PCNT", "CAL", "PRET", "CALL"})
_TOOLKIT_HEADER = re.compile(r"(?i)/(?:[^/]*cuda[^/]*|nvidia)/.*?/include/")


def _is_toolkit_header(path: str) -> bool:
    return bool(_TOOLKIT_HEADER.search(path))


class _Kernel:
    """Rows of one function while it is being read; turned into a ``KernelISA`` at its end."""

    __slots__ = ("name", "arch", "rows", "labels", "entry")

    def __init__(self, name: str, arch: str | None, entry: bool | None) -> None:
        self.name = name
        self.arch = arch
        # row: [address, predicate, opcode, operands, high_word_hex, line, file, label_ref, abs_addr, targets]
        self.rows: list[list] = []
        self.labels: dict[str, int] = {}   # label -> row index it precedes
        self.entry = entry


def _choose_frame(chain: list[tuple[str, int]]) -> tuple[str, int]:
    for f in chain:
        if not _is_toolkit_header(f[0]):
            return f
    return chain[-1]


def parse_sass(
    text: str,
    *,
    source: str,
    arch: str | None = None,
    resources: Mapping[str, NvidiaResources] | None = None,
    demangle_names: bool = True,
) -> list[KernelISA]:
    """Parse nvdisasm or cuobjdump SASS text into one ``KernelISA`` per function.

    ``arch`` overrides the arch the text names (``.target sm_90a`` / ``code for sm_90a``); when the text
    holds several archs (``cuobjdump -sass`` of a fatbin) and ``arch`` is given, only that arch's kernels
    are kept. ``resources[name]`` is attached to each kernel, else ``NvidiaResources(source="none")``.
    """
    kernels: list[_Kernel] = []
    cur: _Kernel | None = None
    text_arch: str | None = None
    tool = "nvdisasm"
    entries: set[str] = set()
    pending_labels: list[str] = []
    chain: list[tuple[str, int]] = []
    loc: tuple[str, int] | None = None
    in_lineinfo = False
    last_row: list | None = None

    for raw in text.splitlines():
        s = raw.lstrip()
        if not s:
            continue
        c = s[0]
        if c == "/":
            if s.startswith("/*") and len(s) > 2 and s[2] != " ":
                # An instruction: /*0040*/  [@P0] OPCODE operands ;  /* 0x... */
                in_lineinfo = False
                if cur is None:
                    continue
                m = _INSTR.match(s)
                if m is None:
                    continue
                body = m.group(2)
                pred = ""
                if body.startswith("@"):
                    sp = body.find(" ")
                    if sp < 0:
                        continue
                    pred = body[:sp]
                    body = body[sp + 1:].lstrip()
                sp = body.find(" ")
                if sp < 0:
                    opcode, operands = body, ""
                else:
                    opcode, operands = body[:sp], body[sp + 1:].strip()
                label_ref = None
                abs_addr = None
                targets = None
                if "`(" in operands:
                    lm = _LABEL_REF.search(operands)
                    if lm:
                        label_ref = lm.group(1)
                elif "BRANCH_TARGETS" in operands:
                    bm = _BRANCH_TARGETS.search(operands)
                    if bm:
                        targets = [t.strip() for t in bm.group(1).split(",") if t.strip()]
                        label_ref = targets[0] if targets else None
                else:
                    base = opcode.split(".", 1)[0]
                    if base in _ADDRESS_OPS and ".ABS" not in opcode:
                        hm = _HEX_TAIL.search(operands)
                        if hm:
                            abs_addr = int(hm.group(1), 16)
                row = [int(m.group(1), 16), pred, opcode, operands, None,
                       loc[1] if loc else None, loc[0] if loc else None, label_ref, abs_addr, targets]
                if pending_labels:
                    idx = len(cur.rows)
                    for lab in pending_labels:
                        cur.labels[lab] = idx
                    pending_labels.clear()
                cur.rows.append(row)
                last_row = row
                continue
            if s.startswith("/*"):
                # The second word of the previous instruction: /* 0x000fea0003800000 */
                if last_row is not None and last_row[4] is None:
                    hm = _HIGH_WORD.match(s)
                    if hm:
                        last_row[4] = hm.group(1)
                continue
            if s.startswith("//##"):
                lm = _LINEINFO.match(s)
                if lm:
                    frame = (lm.group(1), int(lm.group(2)))
                    if in_lineinfo:
                        chain.append(frame)
                    else:
                        chain = [frame]
                        in_lineinfo = True
                    loc = _choose_frame(chain)
                continue
            continue
        in_lineinfo = False
        last_row = None
        if c == ".":
            if s.startswith(".text.") and s.endswith(":"):
                name = s[len(".text."):-1]
                cur = _Kernel(name, text_arch, name in entries)
                kernels.append(cur)
                # nvdisasm does not repeat a source location that carries over from the previous
                # function, so `loc` is kept across functions.
                pending_labels = []
                continue
            if s.startswith(".target"):
                tm = _TARGET_DIRECTIVE.match(s)
                if tm:
                    text_arch = tm.group(1)
                continue
            if s.startswith(".other"):
                om = _OTHER_ENTRY.match(s)
                if om:
                    entries.add(om.group(1))
                continue
            if s.endswith(":") and cur is not None and " " not in s:
                pending_labels.append(s[:-1])   # .L_x_3:
            continue
        if c == "F" and s.startswith("Function"):
            fm = _FUNCTION.match(s)
            if fm:
                tool = "cuobjdump"
                cur = _Kernel(fm.group(1), text_arch, None)
                kernels.append(cur)
                pending_labels = []
                chain, loc = [], None
            continue
        if "code for sm_" in s:
            cm = _CODE_FOR.search(s)
            if cm:
                tool = "cuobjdump"
                text_arch = cm.group(1)
            continue
        if s.startswith("arch ="):
            am = _ARCH_EQ.match(s)
            if am:
                tool = "cuobjdump"
                text_arch = am.group(1)
            continue
        if s.endswith(":") and cur is not None and " " not in s and "\t" not in s:
            # nvdisasm symbol labels inside a section: `$_Z2k1Pfi$_Z6helperPfi:` (a subroutine)
            pending_labels.append(s[:-1])
            continue

    # Several archs in one text (cuobjdump -sass of a fatbin): keep the asked one. With a single arch,
    # `arch` only overrides the name (nvdisasm prints sm_100 for an sm_100f cubin, for instance).
    if arch is not None and len({k.arch for k in kernels if k.arch}) > 1:
        wanted = [k for k in kernels if k.arch in (None, arch)]
    else:
        wanted = kernels
    names = {k.name for k in wanted}
    pretty = demangle(names) if demangle_names else {}
    res = resources or {}
    return [_finish(k, source=source, arch=arch or k.arch or "unknown", tool=tool,
                    resources=res.get(k.name), display=pretty.get(k.name)) for k in wanted]


def _finish(k: _Kernel, *, source: str, arch: str, tool: str, resources: NvidiaResources | None,
            display: str | None) -> KernelISA:
    rows = k.rows
    by_addr = {r[0]: i for i, r in enumerate(rows)}
    labels = k.labels

    def resolve(r: list) -> int | None:
        if r[7] is not None:
            return labels.get(r[7])
        if r[8] is not None:
            return by_addr.get(r[8])
        return None

    targets_of = [resolve(r) for r in rows]

    # Trailing padding: NOPs, and before them the unpredicated `BRA` to itself that follows the last EXIT.
    end = len(rows)
    while end > 0 and rows[end - 1][2] == "NOP":
        end -= 1
    if end > 0 and rows[end - 1][2] == "BRA" and not rows[end - 1][1] and targets_of[end - 1] == end - 1:
        end -= 1
    padding = len(rows) - end

    instructions = []
    for i in range(end):
        r = rows[i]
        hw = r[4]
        instructions.append(Instruction(
            index=i,
            opcode=r[2],
            operands=r[3],
            address=r[0],
            predicate=r[1],
            control=decode_control(int(hw, 16)) if hw is not None else None,
            target=targets_of[i],
            line=r[5],
            file=r[6],
        ))
    metadata: dict = {"disassembler": tool, "padding": padding}
    if k.entry is not None:
        metadata["entry"] = k.entry
    multi = {}
    for i in range(end):
        if rows[i][9]:
            multi[i] = [labels.get(t) for t in rows[i][9]]
    if multi:
        metadata["branch_targets"] = multi
    return KernelISA(
        name=k.name,
        arch=arch,
        vendor="nvidia",
        source=source,
        instructions=instructions,
        resources=resources if resources is not None else NvidiaResources(source="none"),
        display_name=display,
        labels={lab: idx for lab, idx in labels.items() if idx < end},
        metadata=metadata,
    )


# ---------------------------------------------------------------------------------------------------------
# Running the tools: source or binary -> kernels

def _merge(primary: NvidiaResources, extra: NvidiaResources | None) -> NvidiaResources:
    """ptxas -v numbers, with the fields it does not print (constant bank, local) from -res-usage."""
    if extra is None:
        return primary
    filled = False
    for f in ("constant_bytes", "local_bytes", "barriers", "shared_bytes", "stack_bytes", "registers"):
        if getattr(primary, f) is None and getattr(extra, f) is not None:
            setattr(primary, f, getattr(extra, f))
            filled = True
    if filled:
        primary.source = f"{primary.source} + {extra.source}"
    return primary


def load_nvidia_kernels(
    path: str | Path,
    *,
    arch: str | None = None,
    defines: Mapping[str, str] | None = None,
    extra_flags: Iterable[str] = (),
    source_label: str | None = None,
) -> list[KernelISA]:
    """Kernels of a ``.cu`` (compiled with nvcc for ``arch``), ``.ptx`` (ptxas; arch defaults to the
    module's ``.target``), or a cubin / fatbin / object / executable (``arch`` picks the cubin).

    Resources come from ``ptxas -v`` for sources (spills included), topped up with ``cuobjdump
    -res-usage`` (constant bank, local), and from ``-res-usage`` alone for binaries (spills None).
    ``block_size`` is set from ``__launch_bounds__`` / ``.maxntid`` / ``.reqntid`` when the cubin has one.
    """
    from kernelpilot.isa.ptxas import parse_ptxas_report, parse_res_usage
    from kernelpilot.toolchain import nv_binary
    from kernelpilot.toolchain.nvcc import assemble_ptx, compile_cuda
    from kernelpilot.toolchain.run import ensure_file

    p = ensure_file(path)
    label = source_label or str(path)
    suffix = p.suffix.lower()
    with tempfile.TemporaryDirectory(prefix="kpilot-nv-") as tmp:
        work = Path(tmp)
        report: dict[str, NvidiaResources] = {}
        if suffix in (".cu", ".cuh"):
            if arch is None:
                from kernelpilot.errors import UsageError

                raise UsageError(f"{p}: compiling CUDA C++ needs an arch, such as sm_90a.")
            build = compile_cuda(p, arch=arch, defines=defines, extra_flags=list(extra_flags), workdir=work)
            cubins = [build.cubin_path]
            report = parse_ptxas_report(build.ptxas_report, arch=arch)
        elif suffix == ".ptx":
            build = assemble_ptx(p, arch=arch, extra_flags=list(extra_flags), workdir=work)
            arch = build.arch
            cubins = [build.cubin_path]
            report = parse_ptxas_report(build.ptxas_report, arch=arch)
        else:
            cubins = nv_binary.extract_cubins(p, arch=arch, workdir=work)
        out: list[KernelISA] = []
        seen: set[str] = set()
        for cubin in cubins:
            cubin_arch = nv_binary.cubin_arch(cubin)
            usage = parse_res_usage(nv_binary.resource_usage(cubin))
            resources: dict[str, NvidiaResources] = {}
            for name in set(usage) | set(report):
                if name in report:
                    resources[name] = _merge(report[name], usage.get(name))
                else:
                    resources[name] = usage[name]
            bounds = nv_binary.launch_bounds_info(cubin)
            text = nv_binary.disassemble_sass(cubin)
            for k in parse_sass(text, source=label, arch=cubin_arch, resources=resources):
                if k.name in seen or not k.instructions:
                    continue
                seen.add(k.name)
                b = bounds.get(k.name)
                if b is not None and b.block_size is not None:
                    k.block_size = b.block_size
                    k.block_size_source = b.source
                if b is not None and b.max_registers is not None:
                    k.metadata["max_registers"] = b.max_registers
                out.append(k)
        return out
