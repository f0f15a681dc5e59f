"""The evaluation tools: ``check`` (correct on every case, secret seeds, guards), ``bench`` (timed as a careful
engineer would, against baselines) and ``eval`` (check, then bench when correct). One options class serves all
three; each offers the options it takes (``only`` in ``evaluate.runner.EvalOptions``)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from kernelpilot.evaluate.runner import EvalOptions
from kernelpilot.options import param
from kernelpilot.tools.fields import problem_option, target_option
from kernelpilot.tools.registry import ToolContext, register
from kernelpilot.tools.shapes import array_of, shape

__all__ = ["EvalRequest"]


@dataclass(frozen=True, kw_only=True)
class EvalRequest(EvalOptions):
    problem: Path = problem_option(required=True)
    candidate: Path = param("The candidate file (native: defines the entry function; KernelBench: ModelNew; GPU "
                            "MODE: custom_kernel).", short="-c", path=True, required=True)
    target: str | None = target_option()


_RESULT = shape("kernelpilot.eval/1", optional=("gpu", "error", "correct", "speedup"),
                problem="string", candidate="string", device="string", passed="boolean",
                correct={"type": ["boolean", "null"]}, error={"type": ["string", "null"]},
                cases=array_of(), bench=array_of(), flags=array_of(), notes=array_of("string"))


def _run(kind: str, opts: EvalRequest, ctx: ToolContext):
    from kernelpilot.evaluate import runner
    from kernelpilot.evaluate.result import EvalResult
    from kernelpilot.targets.dispatch import local_info, run_remote

    if opts.target not in (None, "local"):
        return EvalResult.from_json(run_remote(opts.target, "eval" if kind == "evaluate" else kind, opts,
                                               ctx.on_event))
    if ctx.pool is not None or ctx.on_event is not None:
        opts = opts.replace(pool=ctx.pool or opts.pool, progress=ctx.on_event or opts.progress)
    with ctx.evaluating:
        result = getattr(runner, kind)(opts.problem, opts.candidate, opts)
    result.target = local_info(result.device)
    return result


@register("check", """Check a candidate's correctness against the problem's reference on every case
    (hidden shape variants included) with secret seeds, in an isolated process: per case max and relative
    error, the worst elements, and guard flags for tricks (input mutation, lazy outputs, patched timers, side
    streams, library fallback...). `correct` and `passed` say whether it may be benchmarked.""", EvalRequest,
          _RESULT)
def check(opts: EvalRequest, ctx: ToolContext):
    return _run("check", opts, ctx)


@register("bench", """Time a candidate on the problem's benchmark cases as a careful engineer would (CUDA
    events, L2 flushed, new inputs every call, repeated until the median is stable, timed outputs re-checked)
    and compare with baselines (eager PyTorch, torch.compile, or other files); also the roofline floor and
    the fraction of it reached. Needs a GPU (device cpu gives CPU wall-clock times).""", EvalRequest, _RESULT)
def bench(opts: EvalRequest, ctx: ToolContext):
    return _run("bench", opts, ctx)


@register("eval", """Check a candidate, then benchmark it when it is correct and no guard rejected it: the
    usual step after changing a kernel. Returns correctness per case, timing, speedups over the baselines,
    and guard flags.""", EvalRequest, _RESULT)
def evaluate(opts: EvalRequest, ctx: ToolContext):
    return _run("evaluate", opts, ctx)
