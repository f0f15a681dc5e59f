"""Entry point of `kpilot`. Command groups live in their own modules and are registered here."""

from __future__ import annotations

import os
import sys

import click

from kernelpilot import __version__
from kernelpilot.errors import KernelpilotError

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


def main(argv: list[str] | None = None) -> None:
    """Run the CLI. kernelpilot's own errors print one line (plus diagnostics) and exit non-zero;
    a traceback appears only with KPILOT_DEBUG=1."""
    _register()
    try:
        cli.main(args=argv, prog_name="kpilot", standalone_mode=False)
    except KernelpilotError as e:
        if os.environ.get("KPILOT_DEBUG"):
            raise
        click.echo(f"error: {e}", err=True)
        details = e.details()
        if details:
            click.echo(details, err=True)
        sys.exit(e.exit_code)
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        sys.exit(130)
    except click.ClickException as e:
        e.show()
        sys.exit(e.exit_code)
    except KeyboardInterrupt:
        click.echo("interrupted", err=True)
        sys.exit(130)
    sys.exit(0)
