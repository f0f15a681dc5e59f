"""Entry point of `kpilot`. Command groups live in their own modules and are registered here."""

from __future__ import annotations

import json
import os
import sys

import click

from kernelpilot import __version__
from kernelpilot.errors import KernelpilotError, error_json

__all__ = ["cli", "main"]


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="kpilot")
def cli() -> None:
    """kernelpilot: analyze, profile, check, benchmark and optimize GPU kernels.

    Every command takes --json for machine-readable output (agents: use it).
    """


def _register() -> None:
    from kernelpilot.cli import agents as agents_cmd
    from kernelpilot.cli import arch as arch_cmd
    from kernelpilot.cli import docs as docs_cmd
    from kernelpilot.cli import doctor as doctor_cmd
    from kernelpilot.cli import eval as eval_cmd
    from kernelpilot.cli import isa as isa_cmd
    from kernelpilot.cli import optimize as optimize_cmd
    from kernelpilot.cli import profile as profile_cmd
    from kernelpilot.cli import target as target_cmd

    cli.add_command(arch_cmd.arch)
    cli.add_command(isa_cmd.isa)
    cli.add_command(doctor_cmd.doctor)
    cli.add_command(eval_cmd.check_cmd)
    cli.add_command(eval_cmd.bench_cmd)
    cli.add_command(eval_cmd.eval_cmd)
    cli.add_command(profile_cmd.profile_cmd)
    cli.add_command(optimize_cmd.optimize_cmd)
    cli.add_command(optimize_cmd.runs)
    cli.add_command(agents_cmd.mcp_cmd)
    cli.add_command(agents_cmd.skill)
    cli.add_command(docs_cmd.docs)
    cli.add_command(target_cmd.target)
    cli.add_command(target_cmd.eval_batch_cmd)


def main(argv: list[str] | None = None) -> None:
    """Run the CLI. An error prints one line on stderr (plus diagnostics) and exits non-zero: 1 a problem, setup or
    input error, 2 a usage error, 3 the candidate failed (the commands that evaluate one). With ``--json`` the
    error is also JSON on stdout, ``{"error": {"type", "message", "hint", "details", "exit_code"}}``, for a
    program to read where it reads results. An unexpected exception is an internal error, said the same way; its
    traceback appears only with KPILOT_DEBUG=1."""
    _register()
    args = list(sys.argv[1:] if argv is None else argv)
    as_json = "--json" in args[: args.index("--")] if "--" in args else "--json" in args
    try:
        cli.main(args=args, prog_name="kpilot", standalone_mode=False)
    except KernelpilotError as e:
        if os.environ.get("KPILOT_DEBUG"):
            raise
        _fail(error_json(e), as_json)
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        sys.exit(130)
    except click.ClickException as e:
        ctx = getattr(e, "ctx", None)
        hint = f"See `{ctx.command_path} --help`." if ctx is not None else None
        _fail({"type": "UsageError", "message": e.format_message(), "hint": hint, "details": None,
               "exit_code": e.exit_code}, as_json)
    except KeyboardInterrupt:
        click.echo("interrupted", err=True)
        sys.exit(130)
    except Exception as e:  # noqa: BLE001 - a bug of kernelpilot's: said in one line, not a traceback
        if os.environ.get("KPILOT_DEBUG"):
            raise
        _fail({"type": "InternalError", "message": f"internal error: {type(e).__name__}: {e}",
               "hint": "Rerun with KPILOT_DEBUG=1 for the traceback, and report it.", "details": None, "exit_code": 1},
              as_json)
    sys.exit(0)


def _fail(error: dict, as_json: bool) -> None:
    """One line on stderr (and the diagnostics after it); with ``--json`` the error as JSON on stdout too."""
    click.echo(f"error: {error['message']}" + (f" {error['hint']}" if error["hint"] else ""), err=True)
    if error["details"]:
        click.echo(error["details"], err=True)
    if as_json:
        click.echo(json.dumps({"error": error}, indent=2))
    sys.exit(error["exit_code"])
