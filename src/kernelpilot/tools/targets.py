"""The target operations: list, add, remove, set up and test the places jobs run (``targets/``). Adding, removing
and setting up a target reach other machines with the user's keys: they are the CLI's only, not an agent's."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kernelpilot.evaluate.runner import EvalOptions
from kernelpilot.options import Options, param
from kernelpilot.runs.store import store_option
from kernelpilot.tools.fields import target_option
from kernelpilot.tools.registry import ToolContext, register
from kernelpilot.tools.shapes import array_of, shape

__all__ = ["TargetListRequest", "TargetAddRequest", "TargetNameRequest", "BatchRequest"]


@dataclass(frozen=True, kw_only=True)
class TargetListRequest(Options):
    """Nothing to choose: every target there is."""


@dataclass(frozen=True, kw_only=True)
class TargetNameRequest(Options):
    name: str = param("The target's name (`kpilot target list`).", argument=True, required=True)


@dataclass(frozen=True, kw_only=True)
class TargetAddRequest(TargetNameRequest):
    url: str = param("ssh://[user@]host[:port]; ray://host:port (Ray Client), ray:HOST:PORT (a cluster's GCS "
                     "address, from one of its nodes) or ray:auto.", argument=True, required=True)
    identity: str | None = param("SSH: the private key to log in with (as ssh -i takes it).")
    python: str | None = param("SSH: the Python interpreter there (default python3); it needs torch and Triton "
                               "for GPU jobs.")
    dir: str | None = param("SSH: the folder there for kernelpilot's files: its install, jobs and their files "
                            "(default ~/.kpilot).")
    user: bool = param("Keep it in your own config (every project sees it) instead of the project's "
                       ".kpilot/config.toml.", False)


@register("target_list", """The targets jobs can run on: local (this machine), and each added one with its URL,
    kind (ssh, ray) and the config file it is kept in.""", TargetListRequest, shape(targets=array_of()))
def target_list(opts: TargetListRequest, ctx: ToolContext) -> dict[str, Any]:
    from kernelpilot.targets.config import load_targets

    return {"targets": [t.to_json() for t in load_targets().values()]}


@register("target_add", """Add a target (or replace one of the same name): a host over SSH or a Ray cluster.""",
          TargetAddRequest, shape(target="object", config="string"), agents=False)
def target_add(opts: TargetAddRequest, ctx: ToolContext) -> dict[str, Any]:
    from kernelpilot.targets.config import parse_url, project_config, save_target, user_config

    path = user_config() if opts.user else project_config()
    spec = parse_url(opts.name, opts.url, identity=opts.identity, python=opts.python, dir=opts.dir, origin=str(path))
    save_target(spec, path)
    return {"target": spec.to_json(), "config": str(path)}


@register("target_remove", """Remove an added target from the project's config (or, failing that, the user's).""",
          TargetNameRequest, shape(removed="string", config="string"), agents=False)
def target_remove(opts: TargetNameRequest, ctx: ToolContext) -> dict[str, Any]:
    from kernelpilot.errors import UsageError
    from kernelpilot.targets.config import project_config, remove_target, user_config

    for path in (project_config(), user_config()):
        if remove_target(opts.name, path):
            return {"removed": opts.name, "config": str(path)}
    raise UsageError(f"no added target named {opts.name!r} (`kpilot target list`).")


@register("target_setup", """Install this kernelpilot on an SSH target (a wheel built here, installed with the
    target's pip into a folder of its own) and check that its Python has what jobs need.""", TargetNameRequest,
          shape(target="string", build="string", site="string", python="string"), agents=False)
def target_setup(opts: TargetNameRequest, ctx: ToolContext) -> dict[str, Any]:
    from kernelpilot.errors import UsageError
    from kernelpilot.targets.config import get_target
    from kernelpilot.targets.ssh import setup

    spec = get_target(opts.name)
    if spec.kind != "ssh":
        raise UsageError(f"target {spec.name} is a {spec.kind} target: setup installs on SSH targets (a Ray "
                         "cluster's workers need kernelpilot installed as its other packages are).")
    return setup(spec, say=lambda line: ctx.on_event({"event": "progress", "what": line}) if ctx.on_event else None)


@register("target_test", """Connect to a target and say what is there: host, kernelpilot build, default device,
    GPU count, and how long a round trip takes.""", TargetNameRequest,
          shape(target="string", host="string", build="string", device="string", gpus="integer",
                connect_s="number"))
def target_test(opts: TargetNameRequest, ctx: ToolContext) -> dict[str, Any]:
    from kernelpilot.targets.config import get_target
    from kernelpilot.targets.dispatch import open_channels

    spec = get_target(opts.name)
    t0 = time.perf_counter()
    (channel,) = open_channels(spec, slots=1)
    took = time.perf_counter() - t0
    channel.close()
    r = channel.remote
    assert r is not None
    return {"target": spec.name, "host": r.host, "build": r.build, "device": r.device, "gpus": r.gpus,
            "connect_s": round(took, 3)}


@dataclass(frozen=True, kw_only=True)
class BatchRequest(EvalOptions):
    problems: Path = param("The problems: LEVEL/PROBLEM_ID_NAME.py (KernelBench) or LEVEL/PROBLEM/ folders.",
                           argument=True, path=True, required=True)
    candidates: Path = param("The candidates, KernelBench's generations layout: LEVEL/PROBLEM_ID/SAMPLE.py.",
                             argument=True, path=True, required=True)
    target: str | None = target_option()
    workers: int | None = param("Jobs at once (default: one per GPU of the target, or one).", minimum=1)
    store: Path = store_option("The run store (SQLite) the batch is recorded in.")
    resume: int | None = param("Carry on this batch run: the candidates it recorded are not run again.", minimum=1)


@register("eval_batch", """Evaluate a folder of candidates (KernelBench's layout, LEVEL/PROBLEM_ID/SAMPLE.py)
    against their problems, spread over a target's workers, each against eager PyTorch; every result recorded in
    the run store as it finishes (resume a stopped batch), and KernelBench's fast_p (the fraction correct and more
    than p times faster than eager) for p = 0, 1, 1.5, 2.""", BatchRequest,
          shape(run="integer", jobs="integer", evaluated="integer", workers="integer", wall_s="number",
                fast_p="object", rows=array_of(), orphans=array_of("string")))
def eval_batch(opts: BatchRequest, ctx: ToolContext) -> dict[str, Any]:
    from kernelpilot.options import params
    from kernelpilot.targets.batch import evaluate_batch
    from kernelpilot.targets.bundle import make_bundle
    from kernelpilot.targets.dispatch import remote_options
    from kernelpilot.tools.evaluate import EvalRequest

    evaluation = {p.name: getattr(opts, p.name) for p in params(EvalOptions)}
    evaluation["baselines"] = ("eager",)

    def job_args(job):
        request = EvalRequest(problem=job.problem, candidate=job.candidate, **evaluation)
        bundle = make_bundle(job.problem, job.candidate)
        return remote_options("eval", request, bundle), bundle

    return evaluate_batch(opts.problems, opts.candidates, job_args, target=opts.target, workers=opts.workers,
                          store_path=opts.store, resume=opts.resume, device=opts.device, on_event=ctx.on_event)
