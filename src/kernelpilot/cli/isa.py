"""`kpilot isa analyze`, `kpilot isa diff` and `kpilot isa lanes`."""

from __future__ import annotations

from pathlib import Path

import click

from kernelpilot.cli.output import Output, table, warn
from kernelpilot.cli.spec import command
from kernelpilot.isa.model import AmdResources, KernelReport
from kernelpilot.tools import run

__all__ = ["isa"]


@click.group()
def isa() -> None:
    """Compile a kernel, read its ISA, and say what matters (no GPU needed)."""


def _analyze_text(result, paint, all_opcodes: bool = False) -> str:
    return "\n\n".join(render_report(r, all_opcodes=all_opcodes, paint=paint) for r in result.kernels)


@command("isa_analyze", name="analyze", examples="""
    kpilot isa analyze kernel.cu --arch sm_90
    kpilot isa analyze argmax.hip --arch gfx942 --json
    kpilot isa analyze softmax.py:softmax_kernel --arch gfx942 -D BLOCK=1024
    kpilot isa analyze a.hip b.hip --arch gfx942""",
         extra=(click.Option(["--all-opcodes"], is_flag=True, help="List every opcode, not only the most frequent."),
                click.Option(["--plot"], type=click.Path(file_okay=False, path_type=Path), metavar="DIR",
                             help="Write each kernel's occupancy chart (against its registers and its shared "
                                  "memory/LDS per block) into DIR as PNG (needs matplotlib).")))
def analyze_cmd(opts, out: Output, all_opcodes: bool, plot: Path | None) -> None:
    result = run("isa_analyze", opts)
    out.result(result, lambda r, paint: _analyze_text(r, paint, all_opcodes))
    if plot is not None:
        _plots(result, plot)


def _plots(result, folder: Path) -> None:
    import re

    from kernelpilot.runs.plot import occupancy_png

    folder.mkdir(parents=True, exist_ok=True)
    for k in result.kernels:
        if getattr(k, "occupancy", None) is None:
            warn(f"{k.display_name or k.name}: no occupancy to plot (no register count or block size)")
            continue
        name = re.sub(r"[^\w.-]+", "_", k.display_name or k.name)[:80]
        warn(f"wrote {occupancy_png(k, folder / f'{name}-{k.arch}-occupancy.png')}")


@command("isa_diff", name="diff", examples="""
    kpilot isa diff argmax_bpermute.hip argmax_dpp.hip --arch gfx942""")
def diff_cmd(opts, out: Output) -> None:
    out.result(run("isa_diff", opts), render_isa_diff)


@command("isa_lanes", name="lanes", examples="""
    kpilot isa lanes row_sum.hip --arch gfx942
    kpilot isa lanes warp_sum.cu --arch sm_90 --kernel warp_sum --json""")
def lanes_cmd(opts, out: Output) -> None:
    out.result(run("isa_lanes", opts), render_lanes)


isa.add_command(analyze_cmd)
isa.add_command(diff_cmd)
isa.add_command(lanes_cmd)


def render_lanes(result, paint=lambda t, k: t) -> str:
    from kernelpilot.isa.lanes import sink_line

    out = []
    for k in result.kernels:
        out.append(f"kernel {k['kernel']}  [{k['arch']}, {k['wave_size']} lanes]  from {k['source']}")
        if not k["sinks"]:
            out.append("  no value that crossed lanes is stored or read by a readlane")
        for sink in k["sinks"]:
            out.append("  " + sink_line(sink))
            if sink["missing"] or sink["uneven"]:
                out.append(f"      best lane {sink['best_lane']}: missing {_short(sink['missing'])}, "
                           f"counted more often {_short(sink['uneven'])}")
            for f in sink["findings"]:
                out.append("    " + paint(f"[{f['severity']}]", _SEVERITY.get(f["severity"], "info"))
                           + f" {f['id']}: {f['title']}")
                out.append(f"        suggestion: {f['suggestion']}")
        for note in k["notes"]:
            out.append(f"  note: {note}")
        out.append("")
    return "\n".join(out).rstrip()


def render_isa_diff(d, paint=lambda t, k: t) -> str:
    lines = [render_diff(k, paint) for k in d.kernels]
    if d.only_in_a:
        lines.append(f"only in {d.a}: {', '.join(d.only_in_a)}")
    if d.only_in_b:
        lines.append(f"only in {d.b}: {', '.join(d.only_in_b)}")
    return "\n".join(lines)


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


def render_report(r: KernelReport, *, all_opcodes: bool = False, paint=lambda t, k: t) -> str:
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
            out.append("    " + paint(f"[{f.severity}]", _SEVERITY.get(f.severity, "info")) + f" {f.id}: {f.title}")
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


_SEVERITY = {"high": "bad", "error": "bad", "medium": "warn", "warning": "warn", "low": "info", "info": "info"}


def render_diff(d, paint=lambda t, k: t) -> str:
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
        out.append("  " + paint("resolved", "good") + f"  {f['id']}: {f['title']}")
    for f in d.findings_appeared:
        out.append("  " + paint("appeared", "bad") + f"  {f['id']}: {f['title']}")
    if d.findings_kept:
        out.append(f"  unchanged findings: {', '.join(d.findings_kept)}")
    if d.lanes[0] or d.lanes[1]:
        out.append("  lanes (isa lanes)")
        for side, lines in (("a", d.lanes[0]), ("b", d.lanes[1])):
            for line in lines or ["no value that crossed lanes is stored"]:
                out.append(f"    {side}: {line}")
    return "\n".join(out)
