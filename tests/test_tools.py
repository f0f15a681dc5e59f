"""The registry of agent-callable tools: schemas, argument checking, results equal to the CLI's --json, and
candidate files confined to the workspace."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest
from conftest import EXAMPLES, ROOT, require_tool

from kernelpilot.errors import KernelpilotError
from kernelpilot.tools import REGISTRY, ToolArgumentError, ToolContext, call

NAMES = {"arch_info", "isa_analyze", "isa_diff", "profile", "check", "bench", "eval", "read_candidate",
         "write_candidate"}


def test_every_tool_has_a_description_and_a_schema():
    assert set(REGISTRY) >= NAMES
    for t in REGISTRY.values():
        assert len(t.description) > 60 and "  " not in t.description
        assert t.parameters["type"] == "object" and t.parameters["additionalProperties"] is False
        assert set(t.parameters["required"]) <= set(t.parameters["properties"])
        for p in t.parameters["properties"].values():
            assert p.get("type") in ("string", "integer", "number", "boolean", "array", "object") and p.get("description")
        a, o = t.to_anthropic(), t.to_openai()
        assert a["input_schema"] is t.parameters and a["name"] == t.name
        assert o["type"] == "function" and o["function"]["parameters"] is t.parameters


@pytest.mark.parametrize("name, args, needle", [
    ("nope", {}, "no tool named 'nope'"),
    ("isa_analyze", {}, "missing required argument(s) sources"),
    ("isa_analyze", {"sources": ["x.cu"], "colour": "red"}, "unknown argument(s) colour"),
    ("isa_analyze", {"sources": "x.cu"}, "isa_analyze.sources must be an array, not 'x.cu'"),
    ("isa_analyze", {"sources": [3]}, "isa_analyze.sources[0] must be a string, not 3"),
    ("isa_analyze", {"sources": ["x.cu"], "block_size": 0}, "block_size must be at least 1"),
    ("isa_analyze", {"sources": ["x.cu"], "block_size": True}, "must be an integer"),
    ("isa_analyze", {"sources": ["x.cu"], "lang": "fortran"}, "lang must be one of cuda, hip, triton"),
    ("isa_analyze", {"sources": ["x.cu"], "defines": {"N": 4}}, "defines.N must be a string"),
    ("check", {"problem": "p", "candidate": "c", "budget": 1}, "unknown argument(s) budget"),
    ("check", {"problem": "p", "candidate": "c", "sandbox": False}, "unknown argument(s) sandbox"),
    ("bench", {"problem": "p", "candidate": "c", "timeout": float("inf")}, "timeout must be a finite number"),
    ("profile", {"command": ["a", 1]}, "command[1] must be a string"),
    ("profile", {}, "exactly one of command"),
    ("check", {"problem": "p"}, "missing required argument(s) candidate"),
])
def test_bad_arguments_say_which_and_why(name, args, needle):
    with pytest.raises(ToolArgumentError) as e:
        call(name, args)
    assert needle in str(e.value)


def test_isa_tools_find_the_dpp_change():
    require_tool("clang++")
    k = EXAMPLES / "kernels"
    before = call("isa_analyze", {"sources": [str(k / "wave_argmax_bpermute.hip")], "arch": "gfx942"})
    assert before["schema"] == "kernelpilot.isa/1"
    assert "amd.lds-crosslane" in {f["id"] for f in before["kernels"][0]["findings"]}
    d = call("isa_diff", {"a": str(k / "wave_argmax_bpermute.hip"), "b": str(k / "wave_argmax_dpp.hip"), "arch": "gfx942"})
    assert d["kernels"] and "amd.lds-crosslane" in json.dumps(d["kernels"][0])


def test_cli_json_is_the_tool_result():
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    for args, tool, targs in ((["arch", "list", "--json"], "arch_info", {}),
                              (["arch", "show", "h200", "--json"], "arch_info", {"name": "h200"})):
        out = subprocess.run([sys.executable, "-m", "kernelpilot", *args], capture_output=True, text=True, env=env,
                             timeout=60).stdout
        assert json.loads(out) == json.loads(json.dumps(call(tool, targs)))


def test_candidate_files_stay_in_the_workspace(tmp_path):
    ctx = ToolContext(workspace=tmp_path)
    w = call("write_candidate", {"path": "cands/k.py", "text": "x = 1\n"}, ctx)
    assert w == {"path": "cands/k.py", "bytes": 6}
    r = call("read_candidate", {"path": "cands/k.py"}, ctx)
    assert r["text"] == "x = 1\n" and r["lines"] == 2
    for bad in ("../outside.py", str(tmp_path.parent / "x.py"), "cands/../../x.py"):
        with pytest.raises(ToolArgumentError, match="outside the workspace"):
            call("write_candidate", {"path": bad, "text": ""}, ctx)
    with pytest.raises(KernelpilotError, match="no such file"):
        call("read_candidate", {"path": "missing.py"}, ctx)


def test_optimize_start_status_and_runs(tmp_path):
    import time

    from conftest import require_module

    require_module("triton")
    shutil.copytree(ROOT / "tests" / "data" / "problems" / "scale", tmp_path / "scale")   # tools reach the workspace
    ctx = ToolContext(workspace=tmp_path, confined=True)
    started = call("optimize_start", {"problem": "scale", "candidate": "scale/scale_tunable.py",
                                      "device": "cpu", "budget": 2}, ctx)
    assert started["run"] == 1 and started["store"].endswith("runs.db")
    deadline = time.time() + 300
    while True:
        status = call("optimize_status", {"run": 1}, ctx)
        if status["run"]["status"] != "running" or time.time() > deadline:
            break
        time.sleep(1)
    assert status["run"]["status"] == "done" and status["steps"] == 2
    assert status["last"][0]["kind"] == "start" and "code" not in status["last"][0]
    listed = call("runs", {}, ctx)["runs"]
    assert [r["id"] for r in listed] == [1] and listed[0]["strategy"] == "search"
    shown = call("runs", {"run": 1}, ctx)
    assert len(shown["steps"]) == 2 and "KPILOT_TUNE" in shown["best_code"]
    with pytest.raises(KernelpilotError, match="no run 7"):
        call("optimize_status", {"run": 7}, ctx)


def test_every_path_argument_stays_in_the_workspace(tmp_path):
    ws = tmp_path / "ws"
    (ws / "k").mkdir(parents=True)
    (ws / "k" / "a.cu").write_text("__global__ void k() {}\n")
    (ws / "out").symlink_to(tmp_path)                    # a link leading out of the workspace
    ctx = ToolContext(workspace=ws, confined=True)
    outside = str(tmp_path / "elsewhere")
    for tool, args in (("isa_analyze", {"sources": ["/etc/passwd"]}),
                       ("isa_analyze", {"sources": ["k/a.cu"], "keep": outside}),
                       ("isa_analyze", {"sources": ["k/a.cu"], "keep": "out/kept"}),
                       ("isa_diff", {"a": "k/a.cu", "b": "../b.cu"}),
                       ("check", {"problem": outside, "candidate": "k/a.cu"}),
                       ("check", {"problem": "k", "candidate": "k/a.cu", "writable": ["k", "/"]}),
                       ("eval", {"problem": "k", "candidate": "k/a.cu", "keep": "/tmp"}),
                       ("profile", {"report": "/etc/hosts"}),
                       ("optimize_start", {"problem": "k", "candidate": "../../x.py"})):
        with pytest.raises(ToolArgumentError, match="outside the workspace"):
            call(tool, args, ctx)
    # what a run's context names besides its workspace (the problem of an optimization run) may be named too
    also = ToolContext(workspace=ws, confined=True, also=(tmp_path / "problem",))
    with pytest.raises(ToolArgumentError, match="outside the workspace"):
        call("check", {"problem": str(tmp_path / "problems"), "candidate": "k/a.cu"}, also)
    with pytest.raises(KernelpilotError) as named:
        call("check", {"problem": str(tmp_path / "problem"), "candidate": "k/a.cu"}, also)
    assert "outside the workspace" not in str(named.value)     # let through; it fails on what it is (no problem)


def test_compiler_flags_through_a_tool_are_allow_listed(tmp_path):
    ctx = ToolContext(workspace=tmp_path, confined=True)
    (tmp_path / "a.cu").write_text("__global__ void k() {}\n")
    for flag in ("-ccbin", "-ccbin=/tmp/evil.sh", "--compiler-bindir=/tmp", "-Xcompiler", "-Wl,-rpath,/x",
                 "-Wp,-MD,/tmp/x", "@/tmp/response", "-o", "-fplugin=/tmp/x.so", "-include", "-I/etc"):
        with pytest.raises(ToolArgumentError, match="not allowed through a tool|outside the workspace"):
            call("isa_analyze", {"sources": ["a.cu"], "arch": "sm_90", "flags": [flag, "/tmp/evil.sh"]}, ctx)
    with pytest.raises(ToolArgumentError, match="not allowed"):
        call("isa_diff", {"a": "a.cu", "b": "a.cu", "arch": "sm_90", "flags": ["-ccbin", "/bin/sh"]}, ctx)


def test_allowed_compiler_flags_reach_the_compiler(tmp_path):
    require_tool("nvcc")
    (tmp_path / "inc").mkdir()
    (tmp_path / "inc" / "scale.h").write_text("#define SCALE 3.0f\n")
    (tmp_path / "a.cu").write_text('#include "scale.h"\n__global__ void k(float* x) { x[threadIdx.x] *= SCALE * F; }\n')
    r = call("isa_analyze", {"sources": ["a.cu"], "arch": "sm_90", "flags": ["-Iinc", "-DF=2.0f", "-O3", "-lineinfo"]},
             ToolContext(workspace=tmp_path, confined=True))
    assert r["kernels"] and r["kernels"][0]["name"].startswith("_Z1kPf")


def test_the_cli_is_not_confined(tmp_path):
    # the CLI's user names any file and any flag: the registry confines only clients and models
    src = tmp_path / "elsewhere" / "a.cu"
    src.parent.mkdir()
    src.write_text("__global__ void k(float* x) { x[0] = F; }\n")
    require_tool("nvcc")
    r = call("isa_analyze", {"sources": [str(src)], "arch": "sm_90", "flags": ["-DF=1.0f", "-Xptxas=-O3"]},
             ToolContext(workspace=tmp_path / "ws"))
    assert r["kernels"]


def test_docs_show_reads_a_passage_whole(tmp_path, monkeypatch):
    monkeypatch.setenv("KPILOT_DOCS_DB", str(tmp_path / "docs.db"))
    hit = call("docs_search", {"query": "row_bcast", "limit": 1})["hits"][0]
    shown = call("docs_show", {"citation": hit["citation"]})
    assert shown["citation"] == hit["citation"] and len(shown["text"]) > len(hit["snippet"]) and shown["sources"]
    with pytest.raises(KernelpilotError, match="no passage"):
        call("docs_show", {"citation": "builtin/amdgcn.md#nothing-here"})


def test_isa_lanes_for_a_confined_caller_compiles_triton_in_the_box(tmp_path):
    """A model's Triton file is compiled in the box, its lane report made there and returned: the same verdict as
    the caller's own analysis of the softmax's warp reductions."""
    from conftest import require_module

    require_module("triton")
    shutil.copy(EXAMPLES / "kernels" / "softmax_triton.py", tmp_path / "softmax_triton.py")
    ctx = ToolContext(workspace=tmp_path, confined=True)
    out = call("isa_lanes", {"sources": ["softmax_triton.py:softmax_kernel"], "arch": "sm_90"}, ctx)
    assert out["schema"] == "kernelpilot.isa-lanes/1"
    (kernel,) = out["kernels"]
    warp = [s for s in kernel["sinks"] if s["group"] == "warp"]
    assert len(warp) >= 2 and all(len(s["complete_lanes"]) == 32 and not s["findings"] for s in warp)
    with pytest.raises(KernelpilotError):
        call("isa_lanes", {"sources": ["/etc/passwd"]}, ctx)


def test_a_confined_caller_profiles_no_command_of_its_choosing(tmp_path):
    ctx = ToolContext(workspace=tmp_path, confined=True)
    for args in ({"command": ["python3", "-c", "print(1)"]}, {"command": ["ncu", "--version"], "tool": "torch"}):
        with pytest.raises(ToolArgumentError, match="profile.command: tools run no command"):
            call("profile", args, ctx)


_HOSTILE = """import os, sys, torch
print("key: " + os.environ.get("ANTHROPIC_API_KEY", "absent"), file=sys.stderr)
try:
    with open({outside!r}, "w") as f:
        f.write("escaped")
except OSError:
    pass


def softmax(x):
    return torch.softmax(x, dim=-1)
"""


def test_a_candidate_profiled_for_a_confined_caller_runs_in_the_box(tmp_path, monkeypatch):
    """What the profile tool puts under the profiler for a confined caller, run here without one: the candidate
    driven in the box a check's worker gets, where it sees none of the caller's credentials and writes nowhere
    but its own folder (where the kernel has Landlock)."""
    from kernelpilot.evaluate import landlock
    from kernelpilot.evaluate.drive import command
    from kernelpilot.evaluate.isolation import boxed_command

    pytest.importorskip("torch")
    outside = tmp_path / "outside.txt"
    candidate = tmp_path / "hostile.py"
    candidate.write_text(_HOSTILE.format(outside=str(outside)))
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test-not-a-key")
    cmd, env = boxed_command(command(EXAMPLES / "problems" / "row_softmax", candidate, calls=1, device="cpu"),
                             tmp_path / "box")
    assert cmd[1:3] == ["-m", "kernelpilot.evaluate.supervise"] and "ANTHROPIC_API_KEY" not in env
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    assert '"exit": {"status": 0, "reason": null' in p.stdout       # the supervisor's report: the drive ran its calls
    assert "key: absent" in p.stderr
    if landlock.abi_version() > 0:
        assert not outside.exists()
