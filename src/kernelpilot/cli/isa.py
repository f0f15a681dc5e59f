"""`kpilot isa analyze` and `kpilot isa diff`."""

from __future__ import annotations

from pathlib import Path

import click

from kernelpilot.cli.output import echo, emit_json, table
from kernelpilot.errors import UsageError
from kernelpilot.isa.model import AmdResources, KernelReport
from kernelpilot.tools import call

__all__ = ["isa"]


@click.group()
def isa() -> None:
    """Compile a kernel, read its ISA, and say what matters (no GPU needed)."""


def _defines(values: tuple[str, ...]) -> dict[str, str]:
    out = {}
    for v in values:
        name, eq, val = v.partition("=")
        if not name or not name.replace("_", "a").isalnum() or name[0].isdigit():
            raise UsageError(f"-D {v!r}: expected NAME=VALUE or NAME.")
        out[name] = val if eq else "1"
    return out


def _common(f):
    opts = [
        click.option("--arch", "-a", help="Target: sm_80, sm_89, sm_90, sm_90a, sm_100, gfx90a, gfx942, gfx950, or a GPU name (H200, MI300X)."),
        click.option("--kernel", "-k", help="Only this kernel (mangled or plain name; a substring also matches)."),
        click.option("-D", "defines", multiple=True, metavar="NAME=VALUE", help="Preprocessor define (C++) or constexpr value (Triton). Repeatable."),
        click.option("--block-size", type=int, help="Threads per block for occupancy (default: launch bounds, Triton num_warps, or the code object's max workgroup size)."),
        click.option("--lang", type=click.Choice(["cuda", "hip", "triton"]), help="Language of a C++ source whose suffix does not say (e.g. --lang hip for .cpp)."),
        click.option("--signature", help="Triton signature, e.g. 'x_ptr:*fp32,n:i32' (overrides the file's KPILOT_SPECS)."),
        click.option("--num-warps", type=int, help="Triton num_warps."),
        click.option("--num-stages", type=int, help="Triton num_stages."),
        click.option("--variant", help="Triton: a named variant of the file's KPILOT_SPECS declaration."),
        click.option("--flag", "extra_flags", multiple=True, metavar="FLAG", help="Extra compiler flag (repeatable), e.g. --flag=-maxrregcount=32."),
        click.option("--keep", "keep", type=click.Path(file_okay=False, path_type=Path), help="Keep the compiler's outputs (binary, assembly, report) in this folder."),
        click.option("--json", "as_json", is_flag=True, help="Machine-readable output (kernelpilot.isa/1)."),
    ]
    for o in reversed(opts):
        f = o(f)
    return f


def _tool_args(kw: dict) -> dict:
    """The CLI's options as the isa tools' arguments (tools.py)."""
    args = {"arch": kw["arch"], "kernel": kw["kernel"], "defines": _defines(kw["defines"]) or None,
            "block_size": kw["block_size"], "lang": kw["lang"], "signature": kw["signature"],
            "num_warps": kw["num_warps"], "num_stages": kw["num_stages"], "variant": kw["variant"],
            "flags": list(kw["extra_flags"]) or None, "keep": str(kw["keep"]) if kw["keep"] else None}
    return {k: v for k, v in args.items() if v is not None}


def _analyze(source: str, kw: dict) -> list[KernelReport]:
    from kernelpilot.isa.analyze import analyze

    return analyze(
        source,
        arch=kw["arch"],
        kernel=kw["kernel"],
        defines=_defines(kw["defines"]),
        block_size=kw["block_size"],
        lang=kw["lang"],
        signature=kw["signature"],
        num_warps=kw["num_warps"],
        num_stages=kw["num_stages"],
        variant=kw["variant"],
        extra_flags=list(kw["extra_flags"]),
        workdir=kw["keep"],
    )


@isa.command("analyze")
@click.argument("sources", nargs=-1, required=True, metavar="SOURCE...")
@_common
@click.option("--all-opcodes", is_flag=True, help="List every opcode, not only the most frequent.")
def analyze_cmd(sources: tuple[str, ...], all_opcodes: bool, **kw) -> None:
    """Analyze every kernel in each SOURCE for ARCH (all with the same options).

    SOURCE: a .cu, .hip (or --lang hip), FILE.py:KERNEL (Triton), .ptx, .cubin, .s (AMDGCN from clang or
    Triton) or .hsaco/.co file. With several, --json gives one list of kernels, each naming its source.

    \b
    Examples:
      kpilot isa analyze kernel.cu --arch sm_90
      kpilot isa analyze argmax.hip --arch gfx942 --json
      kpilot isa analyze softmax.py:softmax_kernel --arch gfx942 -D BLOCK=1024
      kpilot isa analyze a.hip b.hip --arch gfx942
    """
    if kw["as_json"]:
        results = [call("isa_analyze", {"source": source, **_tool_args(kw)}) for source in sources]
        emit_json({**results[0], "kernels": [k for r in results for k in r["kernels"]]})
        return
    n = 0
    for source in sources:
        for r in _analyze(source, kw):
            if n:
                echo()
            echo(render_report(r, all_opcodes=all_opcodes))
            n += 1


@isa.command("diff")
@click.argument("a")
@click.argument("b")
@_common
def diff_cmd(a: str, b: str, **kw) -> None:
    """What changed from kernel A to kernel B: resources, occupancy, families, findings.

    Both are built with the same options.

    \b
    Example:
      kpilot isa diff argmax_bpermute.hip argmax_dpp.hip --arch gfx942
    """
    from kernelpilot.isa.diff import diff_reports

    if kw["as_json"]:
        emit_json(call("isa_diff", {"a": a, "b": b, **_tool_args(kw)}))
        return
    diffs, only_a, only_b = diff_reports(_analyze(a, kw), _analyze(b, kw))
    for d in diffs:
        echo(render_diff(d))
    if only_a:
        echo(f"only in {a}: {', '.join(only_a)}")
    if only_b:
        echo(f"only in {b}: {', '.join(only_b)}")


# ------------------------------------------------------------------ rendering


def _fmt_bytes(n: int | None) -> str:
    return "?" if n is None else f"{n} B"


def _resources_line(r, dynamic_shared: int = 0) -> str:
    if isinstance(r, AmdResources):
        parts = [f"vgpr {r.vgpr}", f"sgpr {r.sgpr}", f"agpr {r.agpr}", f"lds {_fmt_bytes(r.lds_bytes)}",
                 f"scratch {_fmt_bytes(r.scratch_bytes)}", f"spills vgpr {r.vgpr_spill} / sgpr {r.sgpr_spill}"]
    else:
        parts = [f"registers {r.registers}", f"spill stores {_fmt_bytes(r.spill_store_bytes)}",
                 f"spill loads {_fmt_bytes(r.spill_load_bytes)}", f"stack {_fmt_bytes(r.stack_bytes)}",
                 f"shared {_fmt_bytes(r.shared_bytes)}", f"local {_fmt_bytes(r.local_bytes)}", f"barriers {r.barriers}"]
    if dynamic_shared:
        parts.append(f"{'lds' if isinstance(r, AmdResources) else 'shared'} {dynamic_shared} B at launch (Triton)")
    src = f"   (from {r.source})" if r.source else ""
    return ", ".join(parts) + src


_FAMILY_ORDER = ("global", "shared", "local", "constant", "generic", "async", "tensor", "crosslane", "sync",
                 "transcendental", "control", "nop")


def _families_block(fams: dict[str, int]) -> list[str]:
    lines = []
    for head in _FAMILY_ORDER:
        members = sorted(f for f in fams if f == head or f.startswith(head + "."))
        if not members:
            continue
        parts = []
        for f in members:
            parts.append(f"{f} {fams[f]}")
        lines.append("    " + ", ".join(parts))
    return lines


def render_report(r: KernelReport, *, all_opcodes: bool = False) -> str:
    name = r.display_name or r.name
    out = [f"kernel {name}  [{r.arch}, {r.vendor}]  from {r.source}"]
    if r.display_name and r.display_name != r.name:
        out.append(f"  symbol       {r.name}")
    out.append(f"  resources    {_resources_line(r.resources, r.dynamic_shared_bytes())}")
    o = r.occupancy
    if o is not None:
        unit = {"warps_per_sm": "warps per SM", "waves_per_simd": "waves per SIMD"}.get(o.unit, o.unit)
        line = f"  occupancy    {o.active}/{o.max} {unit} ({o.percent:.0f}%), limited by {o.limiter}; block {o.block_size}"
        if o.block_size_source:
            line += f" ({o.block_size_source})"
        out.append(line)
        if o.compiler is not None:
            out.append(f"               compiler's own estimate: {o.compiler} waves per SIMD")
    else:
        out.append("  occupancy    unknown (no register count or block size)")
    loops_in = sum(lp.instruction_count for lp in r.loops if lp.depth == 1)
    out.append(f"  instructions {r.instruction_count}" + (f", {loops_in} inside {len(r.loops)} loop(s)" if r.loops else ", no loops"))
    top = list(r.opcodes.items()) if all_opcodes else list(r.opcodes.items())[:12]
    out.append("  opcodes      " + ", ".join(f"{k} {v}" for k, v in top) + ("" if all_opcodes or len(r.opcodes) <= 12 else f", ... ({len(r.opcodes)} kinds)"))
    fam_lines = _families_block(r.families)
    if fam_lines:
        out.append("  families")
        out.extend(fam_lines)
    if r.loops:
        rows = []
        for n, lp in enumerate(r.loops, 1):
            span = (f"0x{lp.start_address:04x}-0x{lp.end_address:04x}" if lp.start_address is not None
                     else f"#{lp.start}-#{lp.end}")
            key = [f"{k} {v}" for k, v in lp.families.items()
                   if k in ("global.load", "global.store", "shared.load", "shared.store", "local.load", "local.store",
                            "tensor", "crosslane", "sync.barrier", "sync.wait", "sync.wait.vmcnt0", "transcendental")]
            rows.append([f"#{n}", span, lp.depth, lp.instruction_count, lp.stall_cycles, ", ".join(key)])
        out.append("  loops")
        out.append(table(rows, ["loop", "span", "depth", "instr", "stall cyc", "notable"], indent=4))
    s = r.stalls
    sl = f"  stalls       {s.method}: "
    bits = []
    if s.total_cycles is not None:
        bits.append(f"{s.total_cycles} cycles total")
    if s.in_loops_cycles is not None and r.loops:
        bits.append(f"{s.in_loops_cycles} in loops")
    bits.append(f"{s.barrier_waits} {'scoreboard waits' if r.vendor == 'nvidia' else 's_waitcnt'}")
    if s.full_memory_waits:
        bits.append(f"{s.full_memory_waits} full memory waits")
    if s.nops:
        bits.append(f"{s.nops} nops")
    out.append(sl + ", ".join(bits))
    if r.findings:
        out.append(f"  findings ({len(r.findings)})")
        for f in r.findings:
            out.append(f"    [{f.severity}] {f.id}: {f.title}")
            ev = ", ".join(f"{k}={_short(v)}" for k, v in f.evidence.items())
            out.append(f"        evidence: {ev}")
            out.append(f"        suggestion: {f.suggestion}")
    else:
        out.append("  findings     none")
    for note in r.notes:
        out.append(f"  note: {note}")
    return "\n".join(out)


def _short(v) -> str:
    if isinstance(v, list):
        return "[" + ", ".join(str(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{k}: {x}" for k, x in v.items()) + "}"
    return str(v)


def render_diff(d) -> str:
    out = [f"kernel {d.a}" + (f" -> {d.b}" if d.b != d.a else "") + f"  [{d.arch[0]}" + (f" -> {d.arch[1]}" if d.arch[1] != d.arch[0] else "") + "]"]
    ic = d.instruction_count
    out.append(f"  instructions {ic[0]} -> {ic[1]} ({ic[1] - ic[0]:+d})")
    same = []
    for k, (x, y) in d.resources.items():
        if x != y:
            out.append(f"  {k}: {x} -> {y}")
        elif x is not None:
            same.append(f"{k} {x}")
    if same:
        out.append(f"  unchanged: {', '.join(same)}")
    for k, (x, y) in d.occupancy.items():
        out.append(f"  occupancy {k}: {x} -> {y}")
    if d.stall_cycles[0] != d.stall_cycles[1]:
        out.append(f"  stall cycles: {d.stall_cycles[0]} -> {d.stall_cycles[1]} (what it counts: {d.stall_method})")
    if d.loops[0] != d.loops[1]:
        out.append(f"  loops: {d.loops[0]} -> {d.loops[1]}")
    if d.families:
        out.append("  families")
        for k, (x, y) in sorted(d.families.items()):
            out.append(f"    {k}: {x} -> {y}")
    if d.opcodes:
        changed = sorted(d.opcodes.items(), key=lambda kv: -abs(kv[1][1] - kv[1][0]))
        out.append("  opcodes")
        for k, (x, y) in changed[:20]:
            out.append(f"    {k}: {x} -> {y}")
        if len(changed) > 20:
            out.append(f"    ... {len(changed) - 20} more")
    for f in d.findings_resolved:
        out.append(f"  resolved  {f['id']}: {f['title']}")
    for f in d.findings_appeared:
        out.append(f"  appeared  {f['id']}: {f['title']}")
    if d.findings_kept:
        out.append(f"  unchanged findings: {', '.join(d.findings_kept)}")
    return "\n".join(out)
