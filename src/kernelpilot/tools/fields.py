"""Options that several tools take, each declared once: the problem, where to run, a run's id."""

from __future__ import annotations

from typing import Any

from kernelpilot.options import param

__all__ = ["problem_option", "target_option", "run_id_option"]


def problem_option(*, required: bool = False) -> Any:
    return param("The problem: a native problem folder, a KernelBench .py, or a GPU MODE folder.", argument=True,
                 path=True, required=required)


def target_option() -> Any:
    return param("Where to run: a target's name (`kpilot target list`); default: here.", short="-t")


def run_id_option() -> Any:
    return param("The run id.", argument=True, minimum=1, required=True)
