"""`kpilot target`: the places jobs run (this machine, SSH hosts, Ray clusters)."""

from __future__ import annotations

import click

from kernelpilot.cli.output import Output, table
from kernelpilot.cli.spec import command
from kernelpilot.tools import ToolContext, run

__all__ = ["target"]


@click.group("target")
def target() -> None:
    """Where check, bench, eval and profile run (--target NAME): list, add, remove, setup, test."""


@command("target_list", name="list", examples="kpilot target list --json")
def list_cmd(opts, out: Output) -> None:
    out.result(run("target_list", opts), lambda d, paint: table(
        [[t["name"], t["kind"], t["url"], t["python"] if t["kind"] == "ssh" else "", t["origin"]]
         for t in d["targets"]], ["name", "kind", "url", "python", "kept in"]))


@command("target_add", name="add", examples="""
    kpilot target add h200 ssh://me@gpu-box --identity ~/.ssh/id_ed25519 --python /opt/venv/bin/python
    kpilot target add cluster ray://head:10001 --user""")
def add_cmd(opts, out: Output) -> None:
    out.result(run("target_add", opts), lambda d, paint: f"target {d['target']['name']} ({d['target']['url']}) "
                                                        f"kept in {d['config']}")


@command("target_remove", name="remove", examples="kpilot target remove h200")
def remove_cmd(opts, out: Output) -> None:
    out.result(run("target_remove", opts), lambda d, paint: f"removed {d['removed']} from {d['config']}")


@command("target_setup", name="setup", examples="kpilot target setup h200")
def setup_cmd(opts, out: Output) -> None:
    out.result(run("target_setup", opts, ToolContext(on_event=out.progress)),
               lambda d, paint: f"target {d['target']}: kernelpilot {d['build']} in {d['site']} (Python {d['python']})")


@command("target_test", name="test", examples="kpilot target test h200 --json")
def test_cmd(opts, out: Output) -> None:
    out.result(run("target_test", opts), lambda d, paint: (
        f"target {d['target']}: host {d['host']}, kernelpilot {d['build']}, device {d['device'] or 'cpu or unknown (no NVIDIA driver)'}, "
        f"{d['gpus']} GPU(s); connected in {d['connect_s']:.2f} s"))


for _cmd in (list_cmd, add_cmd, remove_cmd, setup_cmd, test_cmd):
    target.add_command(_cmd)


@command("eval_batch", name="eval-batch", examples="""
    kpilot eval-batch KernelBench/KernelBench runs/my_model --target box --json
    kpilot eval-batch problems/ candidates/ --workers 2 --device cpu
    kpilot eval-batch problems/ candidates/ --resume 4""")
def eval_batch_cmd(opts, out: Output) -> None:
    out.result(run("eval_batch", opts, ToolContext(on_event=out.progress)), _batch_text)


def _batch_text(d, paint) -> str:
    rows = [[r["key"], "yes" if r["correct"] else "no", f"{r['speedup']:.3g}x" if r["speedup"] else "-",
             f"{r['median_us']:.2f}" if r["median_us"] else "-", (r["target"] or {}).get("host", "-"),
             (r["error"] or "")[:60]] for r in d["rows"]]
    lines = [table(rows, ["candidate", "correct", "speedup", "us", "host", "error"]), "",
             f"run {d['run']}: {d['evaluated']} evaluated now on {d['workers']} worker(s) in {d['wall_s']} s; "
             f"{len(d['rows'])} of {d['jobs']} recorded"]
    lines.append("  ".join(f"{k} {v:.2f}" for k, v in d["fast_p"].items()))
    if d["orphans"]:
        lines.append(f"no problem for: {', '.join(d['orphans'][:10])}")
    return "\n".join(lines)
