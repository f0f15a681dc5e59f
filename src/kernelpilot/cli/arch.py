"""`kpilot arch`: the GPU facts kernelpilot knows, each with its source.

    kpilot arch list [--json]                 one row per GPU product
    kpilot arch show NAME [--json] [--sources] every fact of a product (H200) or an ISA arch (sm_90a, gfx942)
"""

from __future__ import annotations

from typing import Any

import click

from kernelpilot.arch.registry import ArchSpec, Fact, GPUSpec, list_gpus, resolve
from kernelpilot.cli.output import echo, emit_json, table

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


@arch.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print JSON (kernelpilot.arch/1).")
def list_cmd(as_json: bool) -> None:
    """List the known GPUs (peaks are dense: no sparsity).

    \b
    Example:
      kpilot arch list --json
    """
    from kernelpilot.tools import call

    if as_json:
        emit_json(call("arch_info", {}))
        return
    rows = [g.summary() for g in list_gpus()]
    echo(table(
        [[r["key"], r["name"], r["arch"], r["vendor"], r["sm_count"], r["memory_gb"], r["memory_bandwidth_tbps"],
          r["l2_cache_mib"], r["peak_bf16_tflops"]] for r in rows],
        headers=["key", "name", "arch", "vendor", "SMs/CUs", "mem GB", "BW TB/s", "L2 MiB", "BF16 TFLOP/s"],
    ))


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


@arch.command("show")
@click.argument("name")
@click.option("--json", "as_json", is_flag=True, help="Print JSON: every fact as {value, source}.")
@click.option("--sources", is_flag=True, help="Show each fact's source and notes.")
def show(name: str, as_json: bool, sources: bool) -> None:
    """Show every fact of a GPU product or an ISA arch.

    NAME is a product (h200, mi300x, "A100") or an ISA arch (sm_90, sm_90a, gfx942), any case.

    \b
    Examples:
      kpilot arch show h200 --sources
      kpilot arch show sm_90a --json
    """
    from kernelpilot.tools import call

    if as_json:
        emit_json(call("arch_info", {"name": name}))
        return
    spec, gpu = resolve(name)
    _show_text(spec, gpu, sources)


def _show_text(spec: ArchSpec, gpu: GPUSpec | None, sources: bool) -> None:
    refs: dict[str, int] = {}
    headers = ["fact", "value"] + (["source, note"] if sources else [])
    if gpu is not None:
        echo(f"{gpu.name}  ({gpu.vendor}, {spec.name}, {spec.family})")
        echo(table(_fact_rows(dict(gpu.facts), sources, refs), headers=headers, indent=2))
        echo()
    target = f", compile for {spec.target}" if spec.target != spec.name else ""
    products = ", ".join(p.key for p in spec.products) or "none"
    echo(f"{spec.name}  ({spec.vendor} {spec.family}{target}; products: {products})")
    echo(table(_fact_rows(dict(spec.facts), sources, refs), headers=headers, indent=2))
    if sources:
        echo()
        echo("sources:")
        by_key = {f.source.key: f.source for f in (*spec.facts.values(), *(gpu.facts.values() if gpu else ()))}
        for key, n in refs.items():
            src = by_key[key]
            echo(f"  [{n}] {src.title}")
            echo(f"      {src.url}")
