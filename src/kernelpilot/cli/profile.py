"""`kpilot profile`: run a program under Nsight Compute (or read a report) and say what limits each kernel.

    kpilot profile [options] -- COMMAND ...      profile now (the .ncu-rep is kept in --out)
    kpilot profile --import REPORT               an .ncu-rep, or ncu's raw page as CSV (--details: the details page)
    kpilot profile diff A B                      compare two profiles (JSON from --json, or reports)
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from kernelpilot.cli.output import echo, emit_json, table
from kernelpilot.errors import KernelpilotError, UsageError

__all__ = ["profile_cmd"]


@click.command("profile", context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.option("--import", "import_path", type=click.Path(), help="Read this report instead of running: .ncu-rep, ncu's raw page as CSV, or rocprofv3's CSV folder.")
@click.option("--details", type=click.Path(exists=True, dir_okay=False), help="With a CSV: ncu's details page (text) for its rule messages.")
@click.option("--problem", help="Profile --candidate on one case of this problem (no command needed).")
@click.option("--candidate", "-c", help="With --problem: the candidate file.")
@click.option("--case", help="With --problem: the case (default: the first benchmark case).")
@click.option("--full", is_flag=True, help="Collect every section (ncu --set full); slower.")
@click.option("--kernel", "-k", help="Only kernels whose name matches this regular expression.")
@click.option("--launch-count", "-n", type=int, help="Profile at most this many launches.")
@click.option("--source", is_flag=True, help="Hotspots: the hottest SASS instructions of each launch, and "
              "source lines where the code has line info (-lineinfo), from ncu's warp samples.")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=Path("."), show_default=True, help="Where to keep the .ncu-rep.")
@click.option("--name", default="profile", show_default=True, help="The report's file name (NAME.ncu-rep).")
@click.option("--gpu", help="The GPU to take peaks and limits from, when the report's device is not known.")
@click.option("--tool", type=click.Choice(["ncu", "rocprofv3", "torch"]), default="ncu", show_default=True, help="rocprofv3: AMD GPUs (untested on live hardware); torch: kernel times from the PyTorch profiler (Python commands; no counters needed).")
@click.option("--pmc", "counters", multiple=True, help="With --tool rocprofv3: a hardware counter to collect (repeatable), e.g. FETCH_SIZE.")
@click.option("--bytes", "bytes_per_launch", type=float, help="Bytes each profiled launch moves, for bandwidth without counters.")
@click.option("--metrics", "with_metrics", is_flag=True, help="With --json: every raw metric of each launch.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output (kernelpilot.profile/1).")
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
def profile_cmd(import_path, details, problem, candidate, case, full, kernel, launch_count, source, out, name, gpu,
                tool, counters, bytes_per_launch, with_metrics, as_json, command) -> None:
    """Profile COMMAND's kernels and diagnose each: bottleneck class, occupancy, throughput, stalls.

    \b
    Examples:
      kpilot profile -- ./app --size 4096
      kpilot profile --kernel softmax -- python bench.py
      kpilot profile --problem examples/problems/row_softmax --candidate my_softmax.py
      kpilot profile --import run.ncu-rep --json
      kpilot profile --tool torch --bytes 2.1e9 -- python bench.py
      kpilot profile diff before.json after.json
    """
    from kernelpilot.tools import call

    if command and command[0] == "diff" and not import_path:
        return _diff(list(command[1:]), as_json)
    if import_path and command:
        raise UsageError("give either --import REPORT or a command after `--`, not both.")
    if not import_path and not command and not problem:
        raise UsageError("nothing to profile: put the command after `--` (kpilot profile -- ./app), give "
                         "--problem and --candidate, or read a report with --import.")
    args = {"report": import_path, "details": details, "command": list(command) or None, "full": full or None,
            "problem": problem, "candidate": candidate, "case": case,
            "kernel": kernel, "launch_count": launch_count, "source": source or None, "out": str(out), "name": name,
            "gpu": gpu, "tool": tool, "pmc": list(counters) or None, "bytes_per_launch": bytes_per_launch,
            "metrics": with_metrics or None}
    if import_path:
        for k in ("out", "name", "tool"):
            args.pop(k)
    d = call("profile", {k: v for k, v in args.items() if v is not None})
    if as_json:
        emit_json(d)
        return
    _print(d)


def _pct(v: Any) -> str:
    return "-" if v is None else f"{v:g}%"


def _print(p: dict[str, Any]) -> None:
    from kernelpilot.profile.ncu_mix import shares

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


def _load_any(path: str) -> dict[str, Any]:
    from kernelpilot.profile.load import load_profile
    from kernelpilot.profile.model import SCHEMA

    p = Path(path)
    if p.suffix == ".json" and p.is_file():
        try:
            d = json.loads(p.read_bytes().decode("utf-8"))
        except UnicodeDecodeError as e:
            raise KernelpilotError(f"{p}: not JSON (not UTF-8 text: {e.reason} at byte {e.start}).") from None
        except json.JSONDecodeError as e:
            raise KernelpilotError(f"{p}: not JSON ({e.msg}, line {e.lineno}).") from None
        if not isinstance(d, dict) or d.get("schema") != SCHEMA:
            raise KernelpilotError(f"{p}: not a kernelpilot profile (expected \"schema\": \"{SCHEMA}\").")
        if not isinstance(d.get("kernels"), list) or not all(isinstance(k, dict) for k in d["kernels"]):
            raise KernelpilotError(f"{p}: not a kernelpilot profile (\"kernels\" must be a list of objects).")
        return d
    return load_profile(p).to_json()


def _diff(args: list[str], as_json: bool) -> None:
    from kernelpilot.profile.diff import diff_profiles

    if len(args) != 2:
        raise UsageError("kpilot profile diff A B: two profiles (JSON from `kpilot profile --json`, or reports).")
    d = diff_profiles(_load_any(args[0]), _load_any(args[1]))
    if as_json:
        emit_json(d)
        return
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
