"""`kpilot arch`: the GPU facts kernelpilot knows, each with its source.

    kpilot arch list [--json]                 one row per GPU product
    kpilot arch show NAME [--json] [--sources] every fact of a product (H200) or an ISA arch (sm_90a, gfx942)
"""

from __future__ import annotations

from typing import Any

import click

from kernelpilot.arch.registry import ArchSpec, Fact, GPUSpec
from kernelpilot.cli.output import Output, table
from kernelpilot.cli.spec import command
from kernelpilot.errors import UsageError
from kernelpilot.tools import run

__all__ = ["arch"]


@click.group()
def arch() -> None:
    """GPU facts: products, ISA architectures and their occupancy limits, with sources.

    \b
    Examples:
      kpilot arch list
      kpilot arch show h200 --sources
      kpilot arch show gfx942 --json
    """


@command("arch_info", name="list", help="List the known GPUs (peaks are dense: no sparsity).",
         examples="kpilot arch list --json", omit=("name",))
def list_cmd(opts, out: Output) -> None:
    out.result(run("arch_info", opts), _list_text)


def _list_text(answer, paint) -> str:
    rows = [g.summary() for g in answer.gpus]
    return table(
        [[r["key"], r["name"], r["arch"], r["vendor"], r["sm_count"], r["memory_gb"], r["memory_bandwidth_tbps"],
          r["l2_cache_mib"], r["peak_bf16_tflops"]] for r in rows],
        headers=["key", "name", "arch", "vendor", "SMs/CUs", "mem GB", "BW TB/s", "L2 MiB", "BF16 TFLOP/s"],
    )


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, tuple):
        return ", ".join(str(v) for v in value)
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10000:
        return f"{value:,}"
    return str(value)


def _fact_rows(facts: dict[str, Fact], sources: bool, refs: dict[str, int]) -> list[list[str]]:
    rows = []
    for name, f in facts.items():
        row = [name, _fmt(f.value)]
        if sources:
            n = refs.setdefault(f.source.key, len(refs) + 1)
            row.append(f"[{n}]" + (f" {f.note}" if f.note else ""))
        rows.append(row)
    return rows


@command("arch_info", name="show", help="Show every fact of a GPU product or an ISA arch.",
         examples="""
    kpilot arch show h200 --sources
    kpilot arch show sm_90a --json""",
         extra=(click.Option(["--sources"], is_flag=True, help="Show each fact's source and notes."),))
def show(opts, out: Output, sources: bool) -> None:
    if not opts.name:
        raise UsageError("kpilot arch show NAME: a product (h200) or an ISA arch (gfx942); `kpilot arch list` "
                         "lists them.")
    out.result(run("arch_info", opts), lambda a, paint: _show_text(a.spec, a.gpu, sources))


arch.add_command(list_cmd)
arch.add_command(show)


def _show_text(spec: ArchSpec, gpu: GPUSpec | None, sources: bool) -> str:
    out: list[str] = []
    refs: dict[str, int] = {}
    headers = ["fact", "value"] + (["source, note"] if sources else [])
    if gpu is not None:
        out.append(f"{gpu.name}  ({gpu.vendor}, {spec.name}, {spec.family})")
        out.append(table(_fact_rows(dict(gpu.facts), sources, refs), headers=headers, indent=2))
        out.append("")
    target = f", compile for {spec.target}" if spec.target != spec.name else ""
    products = ", ".join(p.key for p in spec.products) or "none"
    out.append(f"{spec.name}  ({spec.vendor} {spec.family}{target}; products: {products})")
    out.append(table(_fact_rows(dict(spec.facts), sources, refs), headers=headers, indent=2))
    if sources:
        out.append("")
        out.append("sources:")
        by_key = {f.source.key: f.source for f in (*spec.facts.values(), *(gpu.facts.values() if gpu else ()))}
        for key, n in refs.items():
            src = by_key[key]
            out.append(f"  [{n}] {src.title}")
            out.append(f"      {src.url}")
    return "\n".join(out)
