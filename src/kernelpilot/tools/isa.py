"""The ISA tools: ``isa_analyze`` and ``isa_diff`` (compile or read a kernel, analyze its machine code), and the
compiler flags a confined caller may pass."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from kernelpilot.isa.analyze import AnalyzeOptions
from kernelpilot.options import param
from kernelpilot.tools.registry import ToolArgumentError, ToolContext, register, within
from kernelpilot.tools.shapes import array_of, shape

__all__ = ["AnalyzeRequest", "DiffRequest", "LanesRequest", "allowed_flags", "FLAG_FORMS_TEXT"]

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


def allowed_flags(flags: tuple[str, ...], ctx: ToolContext, where: str) -> tuple[str, ...]:
    """``flags`` if every one has an allowed form (``_FLAG_FORM``, or ``-IDIR`` with DIR in the workspace, made
    absolute); else one error naming the first that has not."""
    out = []
    for i, flag in enumerate(flags):
        if flag.startswith("-I") and len(flag) > 2:
            out.append("-I" + str(within(ctx.workspace, flag[2:], f"{where}[{i}]")))
        elif _FLAG_FORM.match(flag):
            out.append(flag)
        else:
            raise ToolArgumentError(f"{where}[{i}]: the compiler flag {flag!r} is not allowed through a tool; "
                                    f"allowed: {FLAG_FORMS_TEXT}.")
    return tuple(out)


@dataclass(frozen=True, kw_only=True)
class AnalyzeRequest(AnalyzeOptions):
    sources: tuple[Path, ...] = param("The kernel sources or binaries: .cu, .hip (or lang hip), FILE.py:KERNEL "
                                      "(Triton), .ptx, .cubin, .s (AMDGCN from clang or Triton), .hsaco/.co; all "
                                      "built with the same options.", argument=True, path=True, required=True)


@dataclass(frozen=True, kw_only=True)
class LanesRequest(AnalyzeOptions):
    sources: tuple[Path, ...] = param("The kernel sources or binaries, as for isa_analyze.", argument=True,
                                      path=True, required=True)


@dataclass(frozen=True, kw_only=True)
class DiffRequest(AnalyzeOptions):
    a: Path = param("The first version of the kernel.", argument=True, path=True, required=True)
    b: Path = param("The second version, built the same way.", argument=True, path=True, required=True)


def _reports(source: Path, opts: AnalyzeOptions, ctx: ToolContext, *, lanes: bool = False) -> list[Any]:
    """The reports of ``source``'s kernels. For a confined caller (an MCP client, a model) a Triton file is
    compiled in a box, since importing it runs it, and its reports come back as JSON (with each kernel's lane
    report when ``lanes``)."""
    from kernelpilot.errors import ToolError
    from kernelpilot.isa.analyze import analyze_kernel, detect_input, load_kernels

    if ctx.confined:
        opts = opts.replace(flags=allowed_flags(opts.flags, ctx, "flags"))
        if detect_input(str(source), opts.lang) == "triton":
            from kernelpilot.loop.prune import analyze_boxed

            out = analyze_boxed(str(source), AnalyzeOptions(**{k: getattr(opts, k) for k in _BUILD}), lanes=lanes)
            if "error" in out:
                raise ToolError("triton", ["kernelpilot.isa.offline", str(source)], 1, out.get("details") or "",
                                message=out["error"].removeprefix("does not compile: "))
            return out["kernels"]
    return [analyze_kernel(k, block_size=opts.block_size) for k in load_kernels(str(source), opts)]


_BUILD = tuple(AnalyzeOptions.__dataclass_fields__)


_KERNELS = array_of(shape(optional=("display_name",), name="string", arch="string", vendor="string",
                          resources="object", findings="array", notes="array"))


@register("isa_analyze", """Compile a kernel (CUDA .cu, HIP .hip, Triton FILE.py:KERNEL) or read a binary
    (.cubin, .ptx, .hsaco, .s) and analyze its machine code for one arch: registers, spills, shared memory/LDS,
    occupancy with its limiter, opcode families, loops, static stalls, compiler warnings, and findings (each with
    evidence and one suggestion), e.g. cross-lane reductions through LDS where DPP would do. Several sources give
    one list of kernels, each naming its source. No GPU needed.""", AnalyzeRequest,
          shape("kernelpilot.isa/1", kernels=_KERNELS))
def isa_analyze(opts: AnalyzeRequest, ctx: ToolContext):
    from kernelpilot.isa.model import Analysis

    return Analysis([r for s in opts.sources for r in _reports(s, opts, ctx)])


@register("isa_diff", """Compare the machine code of two versions of a kernel built the same way: what
    changed in resources (all of them, changed or not), occupancy, opcode families, stall estimates (with what
    they count) and findings (resolved or new). Use it to check that a change did what was intended at the ISA
    level.""", DiffRequest,
          shape("kernelpilot.isa-diff/1", a="string", b="string", kernels="array", only_in_a="array",
                only_in_b="array"))
def isa_diff(opts: DiffRequest, ctx: ToolContext):
    from kernelpilot.isa.diff import IsaDiff, diff_reports

    diffs, only_a, only_b = diff_reports(_reports(opts.a, opts, ctx, lanes=True),
                                         _reports(opts.b, opts, ctx, lanes=True))
    return IsaDiff(str(opts.a), str(opts.b), diffs, only_a, only_b)


@register("isa_lanes", """Prove what a kernel's cross-lane code computes, from its compiled ISA (no GPU needed):
    for every store or readlane of a value that crossed lanes (AMD DPP, ds_swizzle, ds_bpermute/permute,
    readlane/writelane; NVIDIA SHFL, REDUX), which source lanes reach each lane and how many times, through which
    exchanges and operations, with any conversion on the way. Findings: a lane missing or counted twice in a
    reduction that is stored, a readlane of a lane that does not hold the result, a 32-lane pattern on a 64-lane
    wave, a float converted on its way across lanes, an exchange reading an old value never written, bound_ctrl's
    0 taken into a max or min.""",
          LanesRequest, shape("kernelpilot.isa-lanes/1", kernels="array"))
def isa_lanes(opts: LanesRequest, ctx: ToolContext):
    from kernelpilot.isa.lanes import LaneAnalysis, lanes_json

    return LaneAnalysis([js for s in opts.sources for r in _reports(s, opts, ctx, lanes=True)
                         if (js := lanes_json(r)) is not None])
