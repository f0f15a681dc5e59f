"""`kpilot mcp` (the tools as an MCP server) and `kpilot skill install` (a guide that teaches a coding agent
the optimization workflow with kpilot)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from kernelpilot.cli.output import Output, warn
from kernelpilot.cli.spec import command
from kernelpilot.errors import KernelpilotError
from kernelpilot.options import Options, param

__all__ = ["mcp_cmd", "skill"]


@dataclass(frozen=True, kw_only=True)
class McpOptions(Options):
    http: int | None = param("Serve the streamable HTTP transport on this port instead of stdio.", minimum=1)
    host: str = param("With --http: the address to bind.", "127.0.0.1")
    allow_remote: bool = param("With --http: allow a --host other than a loopback address.", False)
    workspace: Path | None = param("Folder candidate files are read from and written to (default: here).",
                                   path=True)


@command("mcp", options=McpOptions, help="""Serve kernelpilot's tools over the Model Context Protocol (stdio by
    default). Over HTTP every request needs the header 'Authorization: Bearer TOKEN': the token is
    KPILOT_MCP_TOKEN, or one made at start and printed once on stderr (with --json, as a JSON line there). Tools
    reach only the files under --workspace.""", examples="""
    claude mcp add kernelpilot -- kpilot mcp
    kpilot mcp --http 8765        (http://127.0.0.1:8765/mcp)""")
def mcp_cmd(opts: McpOptions, out: Output) -> None:
    try:
        from kernelpilot import mcp_server
        import mcp  # noqa: F401
    except ImportError:
        raise KernelpilotError("the mcp package is not installed: pip install 'kernelpilot[mcp]'.") from None
    if opts.http is None:             # stdout is the protocol's: nothing else is printed there
        mcp_server.serve_stdio(opts.workspace)
        return
    mcp_server.check_host(opts.host, opts.allow_remote)
    token, made = mcp_server.http_token()
    where = f"http://{opts.host if ':' not in opts.host else '[' + opts.host + ']'}:{opts.http}/mcp"
    if out.mode == "json":
        out.progress({"event": "serving", "url": where, **({"token": token} if made
                                                            else {"token_env": mcp_server.TOKEN_ENV})})
    elif out.mode == "human":
        warn(f"kpilot mcp: serving {where}; send 'Authorization: Bearer {token}' with every request" if made
             else f"kpilot mcp: serving {where}; requests need the token in {mcp_server.TOKEN_ENV}")
    mcp_server.serve_http(opts.http, opts.host, opts.workspace, token=token, allow_remote=opts.allow_remote)


GUIDE = """# Optimizing GPU kernels with kernelpilot (kpilot)

Use kpilot's tools instead of guessing: every number below is measured or computed from the compiled code.
Every command takes --json; read that rather than the text.

## The loop
1. Know the target: `kpilot arch show H200 --json` (SMs, registers and shared memory per SM, bandwidth, peaks).
2. Read the machine code before changing anything: `kpilot isa analyze KERNEL --arch sm_90 --json`
   (CUDA .cu, HIP .hip, Triton FILE.py:KERNEL; gfx942 for MI300X). Look at registers, spills, occupancy and
   its limiter, and the findings: each has evidence and one suggestion.
3. On a GPU, profile: `kpilot profile --problem PROBLEM --candidate FILE --json`, or `kpilot profile -- CMD`.
   The first diagnosis of each kernel is the bottleneck (launch underfill, occupancy limits, uncoalesced
   access, memory-latency stalls...), with the numbers that show it.
4. Form one hypothesis, change the kernel, then `kpilot eval PROBLEM -c FILE --baseline eager --json`: it
   checks correctness on every case with secret seeds and guards against timing tricks, then times it
   (CUDA events, L2 flushed). Never trust a speedup that `eval` did not produce; `passed` must be true.
5. Confirm the change at the ISA level: `kpilot isa diff OLD NEW --arch ARCH --json`.
6. Repeat. For a declared tuning space (KPILOT_TUNE in the candidate), let
   `kpilot optimize PROBLEM -c FILE --strategy search --arch ARCH` do it; `kpilot runs show ID` lists what
   was tried.

## Without a GPU (AMD code here, or a laptop)
`isa analyze` and `isa diff` compile offline for any target: read the ISA of a rewrite before anyone runs it.
- Keep the compiler's outputs with `--keep DIR` (binary, `.s`, the ptxas report) to read the code yourself;
  several sources in one call: `kpilot isa analyze a.hip b.hip --arch gfx942 --json`.
- Read the notes: compiler warnings are kept there (add `--flag=-Wconversion` to catch a float passed to an
  int-only builtin such as `__builtin_amdgcn_update_dpp`), and so is an occupancy that rests on a default block
  size (then pass `--block-size`).
- A finding's suggestion names the operation your code combines with; a cross-lane rewrite must still count
  every lane once: check the DPP modifiers in the `.s` against the sequence the finding gives.
- Look things up instead of recalling them: `kpilot docs search "row_bcast DPP" --json`, then
  `kpilot docs show CITATION` for the whole passage (DPP modifiers, waitcnt, stall reasons, profiler metrics).
- `crosslane.conversion` means a value is converted on its way through a DPP move or a shuffle (a float passed
  to an int-only builtin): pass the bits (`__float_as_int` / `__int_as_float`), not the value.

## Where it runs, and what happened
- GPUs elsewhere: `kpilot target list`, then `--target NAME` on check, bench, eval, profile and optimize; every
  result's `"target"` says where it ran. Many candidates at once: `kpilot eval-batch PROBLEMS CANDIDATES
  --target NAME --json` (KernelBench's layout; fast_p in the result).
- A run's story: `kpilot runs show ID --trace --json` (every message, tool call and evaluation), `kpilot runs
  export ID --html` (one page with the chart, the steps and their diffs).

## Rules
- Keep the entry point and its signature; do not modify inputs; return plain tensors.
- No side streams, threads, caching of outputs, or patched timers: the guards reject them.
- Report speedups only from `kpilot eval`/`bench` output, with the GPU and the case.
"""

TARGETS = {"claude": Path(".claude") / "skills" / "kernelpilot" / "SKILL.md", "codex": Path("AGENTS.md"),
           "cursor": Path(".cursor") / "rules" / "kernelpilot.mdc"}
FRONT = {"claude": "---\nname: kernelpilot\ndescription: Optimize GPU kernels (CUDA, HIP, Triton) with measured "
                   "evidence: ISA analysis, profiling, correctness checks and benchmarks through kpilot.\n---\n\n",
         "cursor": "---\ndescription: Optimizing GPU kernels with kpilot\nalwaysApply: false\n---\n\n", "codex": ""}


@click.group("skill")
def skill() -> None:
    """A guide that teaches a coding agent the kpilot workflow."""


@dataclass(frozen=True, kw_only=True)
class SkillOptions(Options):
    agent: str = param("The coding agent.", flag="--for", choices=tuple(sorted(TARGETS)), required=True)
    print_guide: bool = param("Print the guide instead of writing it.", False, flag="--print")
    dir: Path = param("The project folder to write it into.", Path("."), path=True)


@command("skill_install", name="install", options=SkillOptions, help="""Write the guide where the agent reads it
    (SKILL.md for Claude Code, AGENTS.md for Codex, a rule for Cursor).""",
         examples="kpilot skill install --for claude")
def install_cmd(opts: SkillOptions, out: Output) -> None:
    out.result(_install(opts.agent, opts.print_guide, opts.dir), lambda d, paint: d.get("guide") or d["message"])


def _install(agent: str, just_print: bool, root: Path) -> dict[str, Any]:
    text = FRONT[agent] + GUIDE
    if just_print:
        return {"guide": text}
    path = root / TARGETS[agent]
    path.parent.mkdir(parents=True, exist_ok=True)
    if agent == "codex" and path.exists():
        try:
            current = path.read_bytes().decode("utf-8")
        except UnicodeDecodeError as e:
            raise KernelpilotError(f"{path} is not UTF-8 text ({e.reason} at byte {e.start}); it is left as it is. "
                                   "Convert it to UTF-8, or add the guide by hand (kpilot skill install "
                                   "--print).") from None
        if GUIDE.splitlines()[0] in current:
            return {"path": str(path), "written": False, "message": f"{path} already has the kernelpilot guide"}
        text = current.rstrip() + "\n\n" + GUIDE
    path.write_text(text)
    return {"path": str(path), "written": True, "message": f"wrote {path}"}


skill.add_command(install_cmd)
