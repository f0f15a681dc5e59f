"""Problem formats: each module has ``detect(path) -> bool``, ``load(path) -> Problem`` and
``runtime(problem) -> ProblemRuntime`` (the last runs only inside worker processes)."""

from __future__ import annotations

from pathlib import Path

from kernelpilot.errors import UsageError
from kernelpilot.evaluate.problem import Problem, ProblemRuntime

__all__ = ["detect_and_load", "runtime_for", "torch_compiled"]


FORMATS = ("native", "gpumode", "kernelbench")


def _module(name: str):
    import importlib

    return importlib.import_module(f"kernelpilot.evaluate.formats.{name}")


def detect_and_load(path: Path) -> Problem:
    if not path.exists():
        raise UsageError(f"{path}: no such problem (a folder with problem.toml, a GPU MODE folder with "
                         "reference.py and task.yml, or a KernelBench .py file).")
    for name in FORMATS:
        mod = _module(name)
        if mod.detect(path):
            return mod.load(path)
    raise UsageError(
        f"{path}: not a problem kernelpilot knows: expected a folder with problem.toml (native), a folder with "
        "reference.py and task.yml (GPU MODE), or a .py file defining Model, get_inputs and get_init_inputs "
        "(KernelBench)."
    )


def runtime_for(problem: Problem) -> ProblemRuntime:
    return _module(problem.format).runtime(problem)


def torch_compiled(fn):
    """``torch.compile(fn)`` as a baseline: PyTorch's defaults (shapes made dynamic once they change), with
    room for every case's recompile. Past Dynamo's default limit of 8 it would run the rest eagerly and time
    eager code as torch.compile; if a baseline still hits the raised limit, it fails instead.

    Inductor compiles its kernels in this process (``compile_threads = 1``), not in its pool of compile
    workers: in the box, the workers the pool starts again after it quiesces (at the end of a compile, and
    after 60 s idle) found no GPU backend ("Could not find an active GPU backend"), so every shape compiled
    after the first ones failed and the baseline could not be timed on them. The kernels are the same; only
    the compile, which is not timed, takes longer."""
    import torch
    import torch._dynamo.config as dynamo
    import torch._inductor.config as inductor

    for name, value in (("recompile_limit", 256), ("accumulated_recompile_limit", 4096),
                        ("fail_on_recompile_limit_hit", True)):
        if hasattr(dynamo, name):
            setattr(dynamo, name, value)
    inductor.compile_threads = 1
    return torch.compile(fn)
