"""`kpilot doctor`: which compilers and disassemblers were found, and how to get the missing ones."""

from __future__ import annotations

import click

from kernelpilot.cli.output import echo, emit_json, table


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def doctor(as_json: bool) -> None:
    """List the external tools kernelpilot uses, where each was found, and its version."""
    from kernelpilot.toolchain.find import tool_versions

    info = tool_versions()
    try:
        import triton  # noqa: F401

        info["triton"] = {"path": triton.__file__, "version": triton.__version__, "install": None}
    except ImportError:
        info["triton"] = {"path": None, "version": None, "install": "pip install triton"}
    if as_json:
        emit_json({"schema": "kernelpilot.doctor/1", "tools": info})
        return
    rows = [[name, v["version"] or "-", v["path"] or f"missing: install {v['install']}"] for name, v in info.items()]
    echo(table(rows, ["tool", "version", "path"]))
