"""`kpilot profile`: run a program under Nsight Compute (or read a report) and say what limits each kernel.

    kpilot profile [options] -- COMMAND ...      profile now (the .ncu-rep is kept in --out)
    kpilot profile --import REPORT               an .ncu-rep, or ncu's raw page as CSV (--details: the details page)
    kpilot profile diff A B                      compare two profiles (JSON from --json, or reports)
"""

from __future__ import annotations

from typing import Any

import click

from kernelpilot.cli.output import Output, table
from kernelpilot.cli.spec import command
from kernelpilot.tools import run

__all__ = ["profile_cmd"]


class _ProfileGroup(click.Group):
    """`kpilot profile ...` profiles; `kpilot profile diff A B` compares two profiles. Anything but the word
    `diff` first goes to the profiling command, so `kpilot profile -- ./app` and `kpilot profile --import R`
    work as they read."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if not args or args[0] not in self.commands or args[0] == "run":
            args = ["run", *args]
        return super().parse_args(ctx, args)

    def format_help(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        self.commands["run"].format_help(ctx, formatter)
        formatter.write("\nCompare two profiles: kpilot profile diff A B (see kpilot profile diff --help).\n")


@click.group("profile", cls=_ProfileGroup)
def profile_cmd() -> None:
    """Profile a program's kernels (or read a report) and diagnose each; `profile diff A B` compares two."""


@command("profile", name="run", examples="""
    kpilot profile -- ./app --size 4096
    kpilot profile --kernel softmax -- python bench.py
    kpilot profile --problem examples/problems/row_softmax --candidate my_softmax.py
    kpilot profile --import run.ncu-rep --json
    kpilot profile --tool torch --bytes 2.1e9 -- python bench.py
    kpilot profile diff before.json after.json""",
         context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
def run_cmd(opts, out: Output) -> None:
    out.result(run("profile", opts), lambda r, paint: _text(r.to_json() if hasattr(r, "to_json") else r))


@command("profile_diff", name="diff", examples="""
    kpilot profile diff before.json after.json
    kpilot profile diff before.ncu-rep after.ncu-rep --json""")
def diff_cmd(opts, out: Output) -> None:
    out.result(run("profile_diff", opts), lambda d, paint: _diff_text(d))


profile_cmd.add_command(run_cmd)
profile_cmd.add_command(diff_cmd)


def _pct(v: Any) -> str:
    return "-" if v is None else f"{v:g}%"


def _text(p: dict[str, Any]) -> str:
    from kernelpilot.profile.ncu_mix import shares

    lines: list[str] = []
    echo = lines.append

    echo(f"profile ({p['tool']}): {p['source']}" + (f"   report: {p['report']}" if p.get("report") else ""))
    kernels = p["kernels"]
    if len({k["name"] for k in kernels}) > 1 or len(kernels) > 3:
        echo("\nkernels by total time:")
        echo(table([[t["name"], t["launches"], t["total_us"], t["mean_us"], f"{t['share_pct']}%"] for t in p["totals"]],
                   ["kernel", "launches", "total us", "mean us", "share"], indent=2))
    for k in kernels:
        grid = "x".join(map(str, k["grid"])) if k.get("grid") else "?"
        block = "x".join(map(str, k["block"])) if k.get("block") else "?"
        echo(f"\n#{k['id']} {k['name']}  {k['duration_us']} us  grid {grid}  block {block}  "
             f"regs {k.get('registers_per_thread')}  waves/SM {k.get('waves_per_sm')}")
        if k.get("bound"):
            echo(f"  bound: {k['bound']} ({k['bound_evidence'].get('rule', '')})")
        occ, tp = k.get("occupancy") or {}, k.get("throughput") or {}
        if occ:
            echo(f"  occupancy: theoretical {_pct(occ.get('theoretical_pct'))}, achieved {_pct(occ.get('achieved_pct'))}"
                 + (f", limited by {occ['limiter']}" if occ.get("limiter") else ""))
        line = (f"  throughput: SM {_pct(tp.get('sm_pct'))}, memory {_pct(tp.get('memory_pct'))}, "
                f"DRAM {_pct(tp.get('dram_pct'))}" if tp else "")
        if k.get("dram_bandwidth_gbps") is not None:
            line = (line or "  DRAM") + f" ({k['dram_bandwidth_gbps'] / 1000:.2f} TB/s"
            line += f" of {k['peak_bandwidth_gbps'] / 1000:g})" if k.get("peak_bandwidth_gbps") else ")"
        if line:
            echo(line)
        if k.get("l1_hit_pct") is not None or k.get("l2_hit_pct") is not None:
            echo(f"  hit rates: L1 {_pct(k.get('l1_hit_pct'))}, L2 {_pct(k.get('l2_hit_pct'))}"
                 + (f"; tensor pipes {_pct(k.get('tensor_pipe_pct'))}" if k.get("tensor_pipe_pct") else ""))
        if k.get("pipes"):
            echo("  busiest pipes: " + ", ".join(f"{p} {v:g}%" for p, v in list(k["pipes"].items())[:3]))
        if k.get("opcodes"):
            echo("  most executed: " + ", ".join(f"{op} {v:g}%" for op, v in shares(k["opcodes"]).items()))
        if k.get("stalls"):
            echo("  top stalls: " + ", ".join(f"{s['reason']} {s['pct']:g}%" for s in k["stalls"][:3]))
        for i, d in enumerate(k.get("diagnoses", []), 1):
            echo(f"  {i}. [{d['severity']}] {d['id']}: {d['title']}")
            echo(f"     -> {d['suggestion']}")
        for title, spots in (("hottest lines", k.get("hot_lines")), ("hottest instructions", k.get("hotspots"))):
            if spots:
                echo(f"  {title} (share of warp samples; their stall reasons):")
                for h in spots[:5]:
                    why = ", ".join(f"{x['reason']} {x['share_pct']:g}%" for x in h["stalls"])
                    echo(f"    {h['share_pct']:5.1f}%  {h['where']}  {h.get('sass') or ''}  ({why})")
        for title, spots in (("excess global sectors", k.get("uncoalesced_at")),
                             ("excess shared wavefronts", k.get("bank_conflicts_at"))):
            if spots:
                echo(f"  {title} (share of the launch's excess; the instruction's excess of what it moved):")
                for a in spots[:3]:
                    echo(f"    {a['share_pct']:5.1f}%  {a.get('line') or a['where']}  {a.get('sass') or ''}  "
                         f"({a['excess']:,} of {a['total']:,})")
        rules = [r for r in k.get("tool_rules", []) if r["kind"] in ("OPT", "WRN")][:3]
        for r in rules:
            est = f" (est. {'local ' if r['local'] else ''}speedup {r['est_speedup_pct']:g}%)" if r.get("est_speedup_pct") else ""
            echo(f"  ncu {r['kind']}{est}: {r['message'][:160]}")
    for n in p.get("notes", []):
        echo(f"note: {n}")
    return "\n".join(lines)


def _diff_text(d: dict[str, Any]) -> str:
    lines: list[str] = []
    echo = lines.append
    echo(f"A: {d['a']}\nB: {d['b']}")
    echo(f"total kernel time: {d['total_us']['a']} us -> {d['total_us']['b']} us"
         + (f" ({d['speedup']:g}x)" if d.get("speedup") else ""))
    rows = []
    for k in d["kernels"]:
        ch = k["changes"]
        name = f"{k['name_a']} -> {k['name']}" if k.get("name_a") else k["name"]
        rows.append([f"{name} #{k['launch']}", ch.get("duration_us", {}).get("a"), ch.get("duration_us", {}).get("b"),
                     f"{k['speedup']:g}x" if k.get("speedup") else "-", f"{k['bound']['a']} -> {k['bound']['b']}",
                     ", ".join(k["diagnoses_resolved"]) or "-", ", ".join(k["diagnoses_new"]) or "-"])
    echo(table(rows, ["kernel", "A us", "B us", "speedup", "bound", "resolved", "new"]))
    for side in ("only_in_a", "only_in_b"):
        if d[side]:
            echo(f"{side.replace('_', ' ')}: {', '.join(d[side])}")
    return "\n".join(lines)
