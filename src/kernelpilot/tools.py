"""One registry of the tools an agent can call: each with a description written for a model, a JSON schema
for its arguments, and a JSON result. The CLI's ``--json`` output, the LLM proposer and the MCP server all
go through ``call``.

    >>> from kernelpilot.tools import call, REGISTRY
    >>> call("isa_analyze", {"source": "examples/kernels/wave_argmax_dpp.hip", "arch": "gfx942"})["kernels"][0]["findings"]
    >>> [t.to_anthropic() for t in REGISTRY.values()]       # or t.to_openai()

Bad arguments raise ``ToolArgumentError`` (a UsageError: one line saying which argument and why); a tool's
own failure raises the KernelpilotError it met. Neither is ever a crash of the caller.
"""

from __future__ import annotations

import json
import re
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from kernelpilot.errors import KernelpilotError, UsageError

__all__ = ["Tool", "ToolContext", "ToolArgumentError", "REGISTRY", "call", "validate", "eval_options"]


class ToolArgumentError(UsageError):
    """A tool was called with arguments its schema does not allow."""


@dataclass
class ToolContext:
    """What a tool may touch: candidate files are read and written only under ``workspace``; with ``confined`` (a
    client of the MCP server, a model in the optimization loop; not the CLI, whose user can run anything) every
    path argument too, and compiler flags only of the allowed forms (``allowed_flags``). ``evaluating`` is
    held by every check, bench and eval: they run one at a time (timings on a shared GPU would disturb each
    other, and a pool's reference worker serves one job at a time)."""

    workspace: Path = field(default_factory=Path.cwd)
    pool: Any = None                      # an evaluate.isolation.WorkerPool to take workers from
    confined: bool = False
    also: tuple[Path, ...] = ()           # with confined: what outside the workspace may be named (a run's problem)
    evaluating: Any = field(default_factory=threading.Lock)


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    parameters: dict[str, Any]            # JSON schema (type object)
    fn: Callable[[dict[str, Any], ToolContext], dict[str, Any]]

    def to_anthropic(self) -> dict[str, Any]:
        return {"name": self.name, "description": self.description, "input_schema": self.parameters}

    def to_openai(self) -> dict[str, Any]:
        return {"type": "function", "function": {"name": self.name, "description": self.description,
                                                 "parameters": self.parameters}}


REGISTRY: dict[str, Tool] = {}


def _register(name: str, description: str, properties: dict[str, Any], required: tuple[str, ...] = ()):
    schema = {"type": "object", "properties": properties, "required": list(required), "additionalProperties": False}

    def wrap(fn: Callable[[dict[str, Any], ToolContext], dict[str, Any]]):
        REGISTRY[name] = Tool(name, " ".join(description.split()), schema, fn)
        return fn

    return wrap


def call(name: str, args: dict[str, Any] | None = None, ctx: ToolContext | None = None) -> dict[str, Any]:
    """Validate ``args`` against the tool's schema and run it."""
    tool = REGISTRY.get(name)
    if tool is None:
        raise ToolArgumentError(f"no tool named {name!r}; tools: {', '.join(sorted(REGISTRY))}.")
    args = dict(args or {})
    validate(tool.parameters, args, name)
    ctx = ctx or ToolContext()
    return tool.fn(confine(tool.parameters, args, ctx, name) if ctx.confined else args, ctx)


def confine(schema: dict[str, Any], args: dict[str, Any], ctx: ToolContext, where: str) -> dict[str, Any]:
    """``args`` with every path argument (``"format": "path"``, alone or in an array) made absolute against the
    workspace; one outside it (``..``, an absolute path elsewhere, a symbolic link leading out), and outside what
    ``ctx.also`` names, is refused. A tool's caller (an MCP client, a model) reaches its workspace's files only."""
    out = dict(args)
    for key, spec in schema.get("properties", {}).items():
        value = args.get(key)
        if value is None:
            continue
        if spec.get("format") == "path":
            out[key] = str(_within(ctx.workspace, value, f"{where}.{key}", ctx.also))
        elif spec.get("type") == "array" and (spec.get("items") or {}).get("format") == "path":
            out[key] = [str(_within(ctx.workspace, v, f"{where}.{key}[{i}]", ctx.also)) for i, v in enumerate(value)]
    return out


def _within(workspace: Path, path: str, where: str, also: tuple[Path, ...] = ()) -> Path:
    """``path`` resolved against ``workspace``, if it lies inside it or inside one of ``also``."""
    root = workspace.resolve()
    p = (root / path).resolve()          # an absolute path stays itself; symbolic links are followed
    for allowed in (root, *(a.resolve() for a in also)):
        if p == allowed or allowed in p.parents:
            return p
    raise ToolArgumentError(f"{where}: {path} is outside the workspace {root}; tools reach only its files "
                            "(start the server with --workspace on the folder that holds them).")


_TYPES = {"string": str, "integer": int, "number": (int, float), "boolean": bool, "array": list, "object": dict}


def validate(schema: dict[str, Any], args: dict[str, Any], where: str) -> None:
    """The subset of JSON schema the registry uses: types, enums, minimum, items, required, no extras."""
    if not isinstance(args, dict):
        raise ToolArgumentError(f"{where}: arguments must be a JSON object, not {type(args).__name__}.")
    props = schema.get("properties", {})
    extra = sorted(set(args) - set(props))
    if extra and schema.get("additionalProperties") is False:
        raise ToolArgumentError(f"{where}: unknown argument(s) {', '.join(extra)}; it takes {', '.join(props)}.")
    missing = [k for k in schema.get("required", []) if args.get(k) is None]
    if missing:
        raise ToolArgumentError(f"{where}: missing required argument(s) {', '.join(missing)}.")
    for key, value in args.items():
        if value is not None and key in props:
            _check(props[key], value, f"{where}.{key}")


def _check(spec: dict[str, Any], value: Any, where: str) -> None:
    kind = spec.get("type")
    py = _TYPES.get(kind)
    if py is not None and (not isinstance(value, py) or (kind in ("integer", "number") and isinstance(value, bool))):
        raise ToolArgumentError(f"{where} must be {'an' if kind[0] in 'aeiou' else 'a'} {kind}, not {value!r}.")
    if "enum" in spec and value not in spec["enum"]:
        raise ToolArgumentError(f"{where} must be one of {', '.join(map(str, spec['enum']))}, not {value!r}.")
    if "minimum" in spec and value < spec["minimum"]:
        raise ToolArgumentError(f"{where} must be at least {spec['minimum']}, not {value!r}.")
    if kind == "array" and "items" in spec:
        for i, item in enumerate(value):
            _check(spec["items"], item, f"{where}[{i}]")
    if kind == "object" and "additionalProperties" in spec and isinstance(spec["additionalProperties"], dict):
        for k, v in value.items():
            _check(spec["additionalProperties"], v, f"{where}.{k}")


def _str(desc: str, **kw) -> dict[str, Any]:
    return {"type": "string", "description": desc, **kw}


def _path(desc: str) -> dict[str, Any]:
    """A path argument (``"format": "path"``): ``call`` resolves it against the workspace and refuses it outside."""
    return {"type": "string", "format": "path", "description": desc}


def _int(desc: str, minimum: int = 0) -> dict[str, Any]:
    return {"type": "integer", "description": desc, "minimum": minimum}


# ------------------------------------------------------------------ architecture and ISA

# Compiler flags a tool may pass: defines, include folders in the workspace, optimisation, language standard,
# floating-point and register settings, target arch, warnings. Never a host compiler (-ccbin), a pass-through to
# another program (-Xcompiler, -Wl,), an output path or a response file.
_FLAG_FORM = re.compile(r"""^(?:
    -[DU][A-Za-z_][A-Za-z0-9_]*(?:=.*)?
  | -O[0-3sz] | -std=[A-Za-z0-9+]+ | -lineinfo | -G | -w
  | --?use_fast_math | -f(?:no-)?fast-math | -ffp-contract=(?:on|off|fast|fast-honor-pragmas)
  | -f(?:no-)?gpu-flush-denormals-to-zero | -munsafe-fp-atomics
  | --?maxrregcount=\d+ | -ftz=(?:true|false) | -prec-(?:div|sqrt)=(?:true|false) | -fmad=(?:true|false)
  | -m(?:no-)?cumode | -mwavefrontsize(?:32|64) | -mno-wavefrontsize64
  | --?(?:arch|gpu-architecture|gpu-code|offload-arch)=[A-Za-z0-9_,.:+-]+
  | -gencode=arch=compute_\d+[af]?,code=(?:sm|compute)_\d+[af]?
  | -W(?!l,|p,|a,)[A-Za-z0-9=+-]+
)$""", re.X)
FLAG_FORMS_TEXT = ("-DNAME[=VALUE], -UNAME, -IDIR (a folder in the workspace), -O0..-O3/-Os, -std=..., -lineinfo, "
                   "-G, fast-math and denormal settings, -maxrregcount=N, -arch=/--offload-arch=/-gencode=, "
                   "-mwavefrontsize64/-mcumode, -Wwarning")


def allowed_flags(flags: list[str], ctx: ToolContext, where: str) -> list[str]:
    """``flags`` if every one has an allowed form (``_FLAG_FORM``, or ``-IDIR`` with DIR in the workspace, made
    absolute); else one error naming the first that has not."""
    out = []
    for i, flag in enumerate(flags):
        if flag.startswith("-I") and len(flag) > 2:
            out.append("-I" + str(_within(ctx.workspace, flag[2:], f"{where}[{i}]")))
        elif _FLAG_FORM.match(flag):
            out.append(flag)
        else:
            raise ToolArgumentError(f"{where}[{i}]: the compiler flag {flag!r} is not allowed through a tool; "
                                    f"allowed: {FLAG_FORMS_TEXT}.")
    return out


_ISA_PROPS = {
    "arch": _str("Target: sm_80, sm_89, sm_90, sm_90a, sm_100, gfx90a, gfx942, gfx950, or a GPU name (H200, MI300X); "
                 "needed to compile a source, read from the file for a binary."),
    "kernel": _str("Only this kernel (a substring of its name matches)."),
    "defines": {"type": "object", "additionalProperties": {"type": "string"},
                "description": "Preprocessor defines (C++) or constexpr values (Triton), NAME -> VALUE."},
    "block_size": _int("Threads per block, for occupancy.", 1),
    "lang": _str("Language of a C++ source whose suffix does not say.", enum=["cuda", "hip", "triton"]),
    "signature": _str("Triton signature, e.g. 'x_ptr:*fp32,n:i32'."),
    "num_warps": _int("Triton num_warps.", 1),
    "num_stages": _int("Triton num_stages.", 1),
    "variant": _str("Triton: a named variant of the file's KPILOT_SPECS declaration."),
    "flags": {"type": "array", "items": {"type": "string"}, "description": "Extra compiler flags, of these forms "
              "only: " + FLAG_FORMS_TEXT + "."},
    "keep": _path("Keep the compiler's outputs (binary, assembly, report) in this folder."),
}


def _analyze(source: str, a: dict[str, Any], ctx: ToolContext):
    from kernelpilot.isa.analyze import analyze

    return analyze(source, arch=a.get("arch"), kernel=a.get("kernel"), defines=dict(a.get("defines") or {}),
                   block_size=a.get("block_size"), lang=a.get("lang"), signature=a.get("signature"),
                   num_warps=a.get("num_warps"), num_stages=a.get("num_stages"), variant=a.get("variant"),
                   extra_flags=(allowed_flags(list(a.get("flags") or []), ctx, "flags") if ctx.confined
                                else list(a.get("flags") or [])),
                   workdir=Path(a["keep"]) if a.get("keep") else None)


@_register("arch_info", """Facts about a GPU or ISA (SM/CU count, registers and shared memory/LDS per SM,
    warp size, bandwidth, peak FLOP/s, cache sizes), each with its source. Without a name, the list of known
    GPUs. Use it to reason about occupancy, rooflines and what an arch supports.""",
           {"name": _str("A product (H200, MI300X) or an ISA (sm_90a, gfx942); omit for the list.")})
def _arch_info(a: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
    from kernelpilot.arch.registry import ARCH_SCHEMA, list_gpus, resolve

    if not a.get("name"):
        return {"schema": ARCH_SCHEMA, "gpus": [g.summary() for g in list_gpus()]}
    spec, gpu = resolve(a["name"])
    return {"schema": ARCH_SCHEMA, "query": a["name"], "gpu": gpu.to_json() if gpu else None, "arch": spec.to_json()}


@_register("isa_analyze", """Compile a kernel (CUDA .cu, HIP .hip, Triton FILE.py:KERNEL) or read a binary
    (.cubin, .ptx, .hsaco, .s) and analyze its machine code for one arch: registers, spills, shared memory/LDS,
    occupancy with its limiter, opcode families, loops, static stalls, and findings (each with evidence and
    one suggestion), e.g. cross-lane reductions through LDS where DPP would do. No GPU needed.""",
           {"source": _path("The kernel source or binary."), **_ISA_PROPS}, ("source",))
def _isa_analyze(a: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
    from kernelpilot.isa.model import SCHEMA

    return {"schema": SCHEMA, "kernels": [r.to_json() for r in _analyze(a["source"], a, ctx)]}


@_register("isa_diff", """Compare the machine code of two versions of a kernel built the same way: what
    changed in resources, occupancy, opcode families and findings (resolved or new). Use it to check that a
    change did what was intended at the ISA level.""",
           {"a": _path("The first version."), "b": _path("The second version."), **_ISA_PROPS}, ("a", "b"))
def _isa_diff(a: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
    from kernelpilot.isa.diff import DIFF_SCHEMA, diff_reports

    diffs, only_a, only_b = diff_reports(_analyze(a["a"], a, ctx), _analyze(a["b"], a, ctx))
    return {"schema": DIFF_SCHEMA, "a": a["a"], "b": a["b"], "kernels": [d.to_json() for d in diffs],
            "only_in_a": only_a, "only_in_b": only_b}


# ------------------------------------------------------------------ profile


@_register("profile", """Profile a program's GPU kernels (Nsight Compute on NVIDIA, rocprofv3 on AMD, or the
    PyTorch profiler without counters) or read an existing report, and diagnose each launch: duration, grid,
    waves per SM, occupancy (theoretical, achieved, limiter), throughput, DRAM bandwidth against the peak,
    warp stalls, a bottleneck class, and diagnoses such as launch underfill or uncoalesced access, each with
    evidence and one suggestion. Needs a GPU unless a report is given.""",
           {"command": {"type": "array", "items": {"type": "string"}, "description": "The program and its arguments."},
            "problem": _path("With candidate: profile this candidate on one case of this problem (no command "
                             "needed)."),
            "candidate": _path("The candidate file to profile on the problem."),
            "case": _str("With problem: the case to run (default: the first benchmark case)."),
            "report": _path("An existing report: .ncu-rep, ncu's raw page as CSV, or a rocprofv3 output folder."),
            "details": _path("With a CSV report: ncu's details page (rule messages)."),
            "kernel": _str("Only kernels whose name matches this regular expression."),
            "launch_count": _int("Profile at most this many launches.", 1),
            "full": {"type": "boolean", "description": "Collect every ncu section (slower)."},
            "tool": _str("Profiler.", enum=["ncu", "rocprofv3", "torch"]),
            "gpu": _str("The GPU, when the report does not name a known one."),
            "out": _path("Folder to keep the report in (default: the workspace)."),
            "name": _str("The report's file name (NAME.ncu-rep)."),
            "source": {"type": "boolean", "description": "Hotspots: each launch's hottest SASS instructions, and "
                       "source lines where the code has line info (-lineinfo), from ncu's warp samples; and the "
                       "instructions (lines) whose accesses are uncoalesced or bank-conflicted."},
            "pmc": {"type": "array", "items": {"type": "string"}, "description": "rocprofv3 counters to collect."},
            "metrics": {"type": "boolean", "description": "Every raw metric of each launch in the result."},
            "bytes_per_launch": {"type": "number", "description": "Bytes each launch moves (bandwidth without counters)."}})
def _profile(a: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
    from kernelpilot.profile.load import ProfileOptions, load_profile, run_profile

    from kernelpilot.evaluate.drive import command as drive_command

    if bool(a.get("problem")) != bool(a.get("candidate")):
        raise ToolArgumentError("profile: problem and candidate go together.")
    if a.get("problem"):
        if a.get("command"):
            raise ToolArgumentError("profile: give a command, or a problem and a candidate, not both.")
        a = {**a, "command": drive_command(a["problem"], a["candidate"], case=a.get("case")), "from_start": False}
    if bool(a.get("command")) == bool(a.get("report")):
        raise ToolArgumentError("profile: give exactly one of command (to run), problem and candidate, or report "
                                "(to read).")
    every = bool(a.get("metrics"))
    if a.get("report"):
        prof = load_profile(a["report"], details=a.get("details"), gpu=a.get("gpu"), all_metrics=every,
                            hotspots=bool(a.get("source")))
        return prof.to_json(metrics=every)
    opts = ProfileOptions(full=bool(a.get("full")), kernel=a.get("kernel"), launch_count=a.get("launch_count"),
                          source=bool(a.get("source")), out_dir=Path(a.get("out") or ctx.workspace),
                          name=a.get("name") or "profile", tool=a.get("tool") or "ncu",
                          bytes_per_launch=a.get("bytes_per_launch"), counters=list(a.get("pmc") or []) or None,
                          from_start=a.get("from_start", True))
    return run_profile(list(a["command"]), opts, gpu=a.get("gpu"), all_metrics=every).to_json(metrics=every)


# ------------------------------------------------------------------ correctness and timing

_EVAL_PROPS = {
    "problem": _path("The problem: a native problem folder, a KernelBench .py, or a GPU MODE folder."),
    "candidate": _path("The candidate file (native: the entry function; KernelBench: ModelNew; GPU MODE: "
                       "custom_kernel)."),
    "device": _str("Where to run (default: cuda when a GPU is present).", enum=["cuda", "cpu"]),
    "cases": {"type": "array", "items": {"type": "string"}, "description": "Only these cases."},
    "timeout": {"type": "number", "description": "Seconds each worker process may take.", "minimum": 1},
    "memory_limit_gb": {"type": "number", "description": "Host memory (GiB) a worker and what it starts may hold "
                        "before it is killed (default: 80% of the machine's).", "exclusiveMinimum": 0},
    "writable": {"type": "array", "items": _path("A folder."), "description": "Folders in the workspace the "
                 "candidate may write besides its own and the compilers' caches."},
    "keep": _path("Keep the workers' jobs, logs and tensors in this folder."),
}
_CHECK_PROPS = {"seeds": _int("Secret random seeds per case.", 1)}
_BENCH_PROPS = {
    "baselines": {"type": "array", "items": {"type": "string"}, "description": "eager, compile, or candidate files."},
    "budget": {"type": "number", "description": "Seconds of timed samples per case at most.", "minimum": 0.01},
    "graphs": {"type": "boolean", "description": "Also time CUDA-graph replays."},
    "verify": _int("Timed outputs re-checked per case.", 0),
}


def eval_options(a: dict[str, Any], ctx: ToolContext | None = None):
    """The EvalOptions the check, bench and eval tools run with, from their arguments."""
    ctx = ctx or ToolContext()
    from kernelpilot.evaluate.runner import EvalOptions

    return EvalOptions(device=a.get("device"), seeds=a.get("seeds") or 3, timeout=a.get("timeout") or 600.0,
                       baselines=list(a.get("baselines") or []), graphs=bool(a.get("graphs")),
                       cases=list(a.get("cases") or []) or None, verify=3 if a.get("verify") is None else a["verify"],
                       timing={"budget_s": a["budget"]} if a.get("budget") else {},
                       keep=Path(a["keep"]) if a.get("keep") else None, pool=ctx.pool,
                       memory_limit_gb=a.get("memory_limit_gb"), writable=list(a.get("writable") or []))


@_register("check", """Check a candidate's correctness against the problem's reference on every case
    (hidden shape variants included) with secret seeds, in an isolated process: per case max and relative
    error, the worst elements, and guard flags for tricks (input mutation, lazy outputs, patched timers, side
    streams, library fallback...). `correct` and `passed` say whether it may be benchmarked.""",
           {**_EVAL_PROPS, **_CHECK_PROPS}, ("problem", "candidate"))
def _check_tool(a: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
    from kernelpilot.evaluate.runner import check

    with ctx.evaluating:
        return check(a["problem"], a["candidate"], eval_options(a, ctx)).to_json()


@_register("bench", """Time a candidate on the problem's benchmark cases as a careful engineer would (CUDA
    events, L2 flushed, new inputs every call, repeated until the median is stable, timed outputs re-checked)
    and compare with baselines (eager PyTorch, torch.compile, or other files); also the roofline floor and
    the fraction of it reached. Needs a GPU (device cpu gives CPU wall-clock times).""",
           {**_EVAL_PROPS, **_BENCH_PROPS}, ("problem", "candidate"))
def _bench_tool(a: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
    from kernelpilot.evaluate.runner import bench

    with ctx.evaluating:
        return bench(a["problem"], a["candidate"], eval_options(a, ctx)).to_json()


@_register("eval", """Check a candidate, then benchmark it when it is correct and no guard rejected it: the
    usual step after changing a kernel. Returns correctness per case, timing, speedups over the baselines,
    and guard flags.""",
           {**_EVAL_PROPS, **_CHECK_PROPS, **_BENCH_PROPS}, ("problem", "candidate"))
def _eval_tool(a: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
    from kernelpilot.evaluate.runner import evaluate

    with ctx.evaluating:
        return evaluate(a["problem"], a["candidate"], eval_options(a, ctx)).to_json()


# ------------------------------------------------------------------ the candidate file


def _inside(ctx: ToolContext, path: str) -> Path:
    return _within(ctx.workspace, path, "path")      # candidate files: the workspace only


@_register("read_candidate", """Read a candidate (or any text) file in the workspace: the kernel to improve,
    or a previous version.""", {"path": _str("The file, relative to the workspace.")}, ("path",))
def _read_candidate(a: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
    p = _inside(ctx, a["path"])
    if not p.is_file():
        raise KernelpilotError(f"{a['path']}: no such file in the workspace.")
    text = p.read_text(errors="replace")
    return {"path": str(p.relative_to(ctx.workspace.resolve())), "text": text, "lines": text.count("\n") + 1}


@_register("write_candidate", """Write a new version of a candidate file in the workspace (the whole text).
    Check it afterwards with `check` or `eval`.""",
           {"path": _str("The file, relative to the workspace."), "text": _str("The whole new content.")},
           ("path", "text"))
def _write_candidate(a: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
    p = _inside(ctx, a["path"])
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(a["text"])
    return {"path": str(p.relative_to(ctx.workspace.resolve())), "bytes": len(a["text"].encode())}


# ------------------------------------------------------------------ optimization runs


@_register("optimize_start", """Start an optimization run in the background: `search` explores the candidate's
    declared tuning space (KPILOT_TUNE) with static pruning and successive halving; `llm` runs an agent loop
    (needs an API key in the server's environment). Returns the run id at once; follow it with
    optimize_status.""",
           {"problem": _EVAL_PROPS["problem"], "candidate": _path("The starting candidate."),
            "strategy": _str("search or llm.", enum=["search", "llm"]), "budget": _int("Evaluations at most.", 1),
            "target": {"type": "number", "description": "Stop at this speedup over the start.", "minimum": 1},
            "arch": _str("Compile variants for this arch and prune (search)."),
            "device": _EVAL_PROPS["device"], "provider": _str("llm provider.", enum=["anthropic", "openai"]),
            "model": _str("llm model."), "base_url": _str("llm endpoint.")},
           ("problem", "candidate"))
def _optimize_start(a: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
    import subprocess
    import sys
    import time as _time

    from kernelpilot.toolchain.run import kernelpilot_env

    store = ctx.workspace / ".kpilot" / "runs.db"
    log = ctx.workspace / ".kpilot" / f"optimize-{int(_time.time() * 1000)}.jsonl"
    log.parent.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "kernelpilot", "optimize", a["problem"], "-c", a["candidate"], "--json",
           "--store", str(store), "--strategy", a.get("strategy") or "search"]
    for key, flag in (("budget", "--budget"), ("target", "--target"), ("arch", "--arch"), ("device", "--device"),
                      ("provider", "--provider"), ("model", "--model"), ("base_url", "--base-url")):
        if a.get(key) is not None:
            cmd += [flag, str(a[key])]
    with open(log, "w") as out, open(log.with_suffix(".err"), "w") as err:
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, cwd=ctx.workspace, env=kernelpilot_env(),
                                start_new_session=True)
    deadline = _time.time() + 120
    while _time.time() < deadline:
        for line in log.read_text().splitlines():
            event = json.loads(line)
            if event.get("event") == "run":
                return {"run": event["run"], "pid": proc.pid, "store": str(store), "events": str(log)}
        if proc.poll() is not None:
            err_text = log.with_suffix(".err").read_text().strip().splitlines()
            raise KernelpilotError(err_text[-1] if err_text else f"kpilot optimize exited with {proc.returncode}")
        _time.sleep(0.2)
    raise KernelpilotError("the optimization run did not start within 120 s")


@_register("optimize_status", """The state of an optimization run: status, why it ended, the best step and its
    speedup, and the last steps (kind, parameters or hypothesis, correct, time, speedup, error).""",
           {"run": _int("The run id.", 1), "last": _int("How many of the latest steps (default 10).", 1)}, ("run",))
def _optimize_status(a: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
    from kernelpilot.runs.store import RunStore

    with RunStore(ctx.workspace / ".kpilot" / "runs.db", create=False) as s:
        run, steps = s.run(a["run"]), s.steps(a["run"])
    keep = ("n", "kind", "params", "hypothesis", "correct", "passed", "median_us", "speedup", "error")
    return {"run": run.to_json(), "steps": len(steps),
            "last": [{k: v for k, v in st.to_json(code=False).items() if k in keep} for st in steps[-(a.get("last") or 10):]]}


@_register("runs", """The optimization runs recorded in the workspace: id, problem, strategy, status, best
    speedup; with a run id, its whole timeline and the best step's code.""",
           {"run": _int("A run id for its timeline.", 1)})
def _runs(a: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
    from kernelpilot.runs.store import RunStore

    with RunStore(ctx.workspace / ".kpilot" / "runs.db", create=False) as s:
        if not a.get("run"):
            return {"runs": [{k: r.to_json()[k] for k in ("id", "problem", "strategy", "status", "stop_reason",
                                                             "best_step", "best_speedup")} for r in s.runs()]}
        run, steps = s.run(a["run"]), s.steps(a["run"])
    best = next((st for st in steps if st.n == run.best_step), None)
    return {"run": run.to_json(), "steps": [st.to_json(code=False) for st in steps],
            "best_code": best.code if best else None}


# ------------------------------------------------------------------ documentation


@_register("docs_search", """Search the architecture and ISA documentation (the built-in corpus: GPU execution
    models, SASS and AMDGCN instruction guides such as DPP modifiers, profiler metrics; plus documents the user
    added) for passages that explain a finding, a metric or an instruction. Each hit has a citation
    (CORPUS/DOCUMENT#ANCHOR) to quote.""",
           {"query": _str("Words to search for, e.g. 'row_bcast', 'long scoreboard stall'."),
            "corpus": _str("Only this corpus."), "limit": _int("Passages at most (default 5).", 1)}, ("query",))
def _docs_search(a: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
    from kernelpilot.docs.index import DocsIndex

    with DocsIndex() as d:
        hits = d.search(a["query"], corpus=a.get("corpus"), limit=a.get("limit") or 5)
    return {"query": a["query"], "hits": [h.to_json() for h in hits]}


@_register("docs_show", """Read one passage of the documentation whole, by the citation docs_search gave
    (CORPUS/DOCUMENT#ANCHOR): its section, text, sources and the passages next to it.""",
           {"citation": _str("CORPUS/DOCUMENT#ANCHOR, as docs_search gives it.")}, ("citation",))
def _docs_show(a: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
    from kernelpilot.docs.index import DocsIndex

    with DocsIndex() as d:
        return d.show(a["citation"])
