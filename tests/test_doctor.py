"""`kpilot doctor`: which features the pieces found make usable (pure, with plain data), and the real command
run as a subprocess on this machine, with the tools hidden, and with a stand-in nvidia-smi."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT, in_ci
from kernelpilot.toolchain.features import (
    FEATURES,
    HIP_HEADERS,
    NCU_COUNTERS,
    NVIDIA_GPU,
    TORCH_GPU,
    TRITON_AMD,
    core_unusable,
    evaluate,
    features_using,
    module,
    tool,
)
from kernelpilot.toolchain.find import TOOLS
from kernelpilot.toolchain.inventory import (
    PYTHON_MODULES,
    CounterAccess,
    GpuInfo,
    Inventory,
    ModuleFound,
    NvidiaGpu,
    ToolFound,
    counter_access,
    parse_cap_eff,
    parse_nvidia_smi,
    parse_profiling_admin_only,
)

CORE = {"isa-cuda", "isa-triton-nvidia", "isa-hip", "isa-triton-amd"}
EVERYTHING = frozenset(k for f in FEATURES for n in f.needs + f.better_with for k in n.any_of)
PIP_CUDA = "pip install 'kernelpilot[cuda]'"
PIP_TRITON = "pip install 'kernelpilot[triton]'"


def _by_id(statuses):
    return {s.feature.id: s for s in statuses}


# --- the evaluation, with plain data -----------------------------------------------------------------


def test_the_core_features_are_the_four_isa_analyses():
    assert {f.id for f in FEATURES if f.core} == CORE
    assert len({f.id for f in FEATURES}) == len(FEATURES)


def test_everything_found_makes_every_feature_usable():
    statuses = evaluate(EVERYTHING)
    assert all(s.usable and s.fix is None and not s.optional_missing for s in statuses)
    assert core_unusable(statuses) == []


@pytest.mark.parametrize("removed, feature, fix", [
    (tool("nvcc"), "isa-cuda", PIP_CUDA),
    (tool("cuobjdump"), "isa-cuda", PIP_CUDA),
    (module("triton"), "isa-triton-nvidia", PIP_TRITON),
    (tool("ptxas"), "isa-triton-nvidia", PIP_CUDA),
    (tool("cuobjdump"), "isa-triton-nvidia", PIP_CUDA),
    (tool("clang++"), "isa-hip", "apt-get install clang-19 libamdhip64-dev"),
    (HIP_HEADERS, "isa-hip", "apt-get install libamdhip64-dev"),
    (module("triton"), "isa-triton-amd", PIP_TRITON),
    (TRITON_AMD, "isa-triton-amd", "pip install -U 'triton>=3.5'"),
])
def test_a_core_feature_missing_one_piece_is_unusable_with_its_fix(removed, feature, fix):
    statuses = _by_id(evaluate(EVERYTHING - {removed}))
    s = statuses[feature]
    assert not s.usable and len(s.missing) == 1
    assert s.fix.startswith(fix), s.fix
    assert feature in {b.feature.id for b in core_unusable(statuses.values())}


def test_each_need_of_a_core_feature_is_required():
    """Removing any one need's keys makes that core feature unusable, naming exactly that need."""
    for f in FEATURES:
        if not f.core:
            continue
        for need in f.needs:
            s = _by_id(evaluate(EVERYTHING - set(need.any_of)))[f.id]
            assert s.missing == (need.what,) and s.fix == need.fix, (f.id, need)


def test_several_missing_pieces_get_the_features_one_command():
    s = _by_id(evaluate(EVERYTHING - {module("triton"), tool("ptxas"), tool("cuobjdump")}))["isa-triton-nvidia"]
    assert len(s.missing) == 3 and s.fix == PIP_TRITON      # Triton's wheel carries ptxas and cuobjdump
    s = _by_id(evaluate(EVERYTHING - {tool("nvcc"), tool("cuobjdump")}))["isa-cuda"]
    assert s.missing == ("nvcc", "cuobjdump") and s.fix == PIP_CUDA
    s = _by_id(evaluate(EVERYTHING - {tool("ncu"), NVIDIA_GPU, NCU_COUNTERS}))["profile-nvidia"]
    assert len(s.missing) == 3
    assert "Nsight Compute" in s.fix and "NVIDIA GPU" in s.fix and "NVreg_RestrictProfilingToAdminUsers=0" in s.fix


def test_alternatives_any_one_serves():
    no_report = EVERYTHING - {module("ncu_report"), tool("ncu")}
    assert _by_id(evaluate(no_report | {tool("ncu")}))["ncu-report"].usable
    assert _by_id(evaluate(no_report | {module("ncu_report")}))["ncu-report"].usable
    s = _by_id(evaluate(no_report))["ncu-report"]
    assert not s.usable and s.fix == "pip install 'kernelpilot[profile]'"
    no_llm = EVERYTHING - {module("anthropic"), module("openai")}
    assert _by_id(evaluate(no_llm | {module("openai")}))["llm"].usable
    assert _by_id(evaluate(no_llm | {module("anthropic")}))["llm"].usable
    assert _by_id(evaluate(no_llm))["llm"].fix == "pip install 'kernelpilot[llm]'"


def test_nvdisasm_is_optional_and_cuobjdump_is_not():
    """Every cubin is read with cuobjdump (resources, launch bounds); nvdisasm only gives better SASS."""
    s = _by_id(evaluate(EVERYTHING - {tool("nvdisasm")}))
    for fid in ("isa-cuda", "isa-triton-nvidia", "isa-ptx", "isa-cubin"):
        assert s[fid].usable and s[fid].optional_missing and "nvdisasm" in s[fid].optional_missing[0]
    s = _by_id(evaluate(EVERYTHING - {tool("cuobjdump")}))
    assert not s["isa-cuda"].usable and not s["isa-cubin"].usable


def test_non_core_features_missing_never_fail():
    core_keys = frozenset(k for f in FEATURES if f.core for n in f.needs for k in n.any_of)
    statuses = evaluate(core_keys)
    assert core_unusable(statuses) == []
    unusable = {s.feature.id for s in statuses if not s.usable}
    assert unusable == {"isa-amd-code-object", "profile-nvidia", "ncu-report", "profile-amd", "eval", "eval-gpu",
                        "llm", "mcp", "docs-pdf"}
    assert all(s.fix for s in statuses if not s.usable)


def test_every_tool_and_module_serves_some_feature():
    for name in TOOLS:
        assert features_using(tool(name)), name
    for name in PYTHON_MODULES:
        assert features_using(module(name)), name


# --- what was found, to keys ------------------------------------------------------------------------


def _inventory(**kw) -> Inventory:
    tools = {n: ToolFound(n, f"/bin/{n}") for n in TOOLS}
    modules = {n: ModuleFound(n, "1.0") for n in PYTHON_MODULES}
    base = dict(tools=tools, modules=modules, gpu=GpuInfo("/bin/nvidia-smi", (NvidiaGpu("NVIDIA H200", "580.1", "9.0"),)),
                counters=CounterAccess(False), hip_headers="/usr", triton_amd="in-process")
    base.update(kw)
    return Inventory(**base)


def test_inventory_keys():
    assert _inventory().available() == EVERYTHING - {TORCH_GPU}
    inv = _inventory(tools={n: ToolFound(n, None, install="x") for n in TOOLS},
                     modules={n: ModuleFound(n, None) for n in PYTHON_MODULES}, gpu=GpuInfo(),
                     counters=CounterAccess(True, None), hip_headers=None, triton_amd=None)
    assert inv.available() == frozenset()
    # torch's CUDA build seeing a GPU counts as an NVIDIA GPU (no nvidia-smi in the container); ROCm's does not
    cuda = _inventory(gpu=GpuInfo(torch_gpu=True, torch_build="CUDA 12.8")).available()
    assert {NVIDIA_GPU, TORCH_GPU} <= cuda
    rocm = _inventory(gpu=GpuInfo(torch_gpu=True, torch_build="ROCm 6.2")).available()
    assert TORCH_GPU in rocm and NVIDIA_GPU not in rocm


def test_restricted_counters_for_a_normal_user_make_ncu_profiling_unusable():
    inv = _inventory(counters=counter_access(True, euid=1000, cap_eff=0, driver_major=580))
    assert inv.counters.describe() == "restricted (not root)" and inv.counters.to_json()["usable"] is False
    s = _by_id(evaluate(inv.available()))
    assert not s["profile-nvidia"].usable
    assert s["profile-nvidia"].missing == ("permission to read the GPU's performance counters",)
    assert "NVreg_RestrictProfilingToAdminUsers=0" in s["profile-nvidia"].fix
    assert "https://developer.nvidia.com/ERR_NVGPUCTRPERM" in s["profile-nvidia"].fix
    assert not core_unusable(s.values())


def test_who_may_read_restricted_counters():
    sys_admin, perfmon = 1 << 21, 1 << 38
    assert counter_access(True, euid=0, cap_eff=0, driver_major=None).admin == "root"
    assert counter_access(True, euid=1000, cap_eff=sys_admin, driver_major=None).admin == "CAP_SYS_ADMIN"
    assert counter_access(True, euid=1000, cap_eff=perfmon, driver_major=565).admin == "CAP_PERFMON"
    assert counter_access(True, euid=1000, cap_eff=perfmon, driver_major=550).admin is None
    assert counter_access(False, euid=1000, cap_eff=0, driver_major=None).usable
    unknown = counter_access(None, euid=1000, cap_eff=0, driver_major=None, unknown_why="no NVIDIA driver")
    assert unknown.usable and unknown.describe() == "unknown (no NVIDIA driver)"


def test_parsers():
    params = "ResmanDebugLevel: 4294967295\nRmProfilingAdminOnly: 1\nEnableMSI: 1\n"
    assert parse_profiling_admin_only(params) is True
    assert parse_profiling_admin_only(params.replace("AdminOnly: 1", "AdminOnly: 0")) is False
    assert parse_profiling_admin_only("EnableMSI: 1\n") is None
    assert parse_cap_eff("Name:\tpython\nCapEff:\t000001ffffffffff\n") == 0x1FFFFFFFFFF
    assert parse_cap_eff("Name:\tpython\n") is None
    gpus = parse_nvidia_smi("NVIDIA H200, 580.159.04, 9.0\nNVIDIA GeForce RTX 4090, 550.54.14, 8.9\n\n")
    assert gpus == (NvidiaGpu("NVIDIA H200", "580.159.04", "9.0"), NvidiaGpu("NVIDIA GeForce RTX 4090", "550.54.14", "8.9"))
    assert parse_nvidia_smi("No devices were found\n") == ()


# --- the real command -------------------------------------------------------------------------------


def _doctor(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    base = dict(os.environ if env is None else env)
    base["PYTHONPATH"] = str(ROOT / "src")
    return subprocess.run([sys.executable, "-m", "kernelpilot", "doctor", *args], capture_output=True, text=True,
                          env=base, cwd=ROOT, timeout=300)


def _check_schema(d: dict) -> None:
    assert d["schema"] == "kernelpilot.doctor/2"
    assert set(d["tools"]) == set(TOOLS)
    for t in d["tools"].values():
        assert {"path", "version", "install", "rejected", "features", "optional_for"} <= set(t)
        assert (t["path"] is None) == (t["install"] is not None)
    assert set(d["python"]) == set(PYTHON_MODULES)
    assert {"nvidia_smi", "gpus", "error", "torch_gpu", "torch_build"} <= set(d["gpu"])
    assert d["ncu_counters"]["state"] in ("allowed", "restricted", "unknown")
    assert [f["id"] for f in d["features"]] == [f.id for f in FEATURES]
    for f in d["features"]:
        assert set(f) == {"id", "title", "core", "usable", "missing", "fix", "optional_missing"}
        assert f["usable"] == (not f["missing"]) == (f["fix"] is None)
    assert d["ok"] == all(f["usable"] for f in d["features"] if f["core"])


def test_doctor_json_on_this_machine():
    r = _doctor("--json")
    assert "Traceback" not in r.stderr, r.stderr
    d = json.loads(r.stdout)
    _check_schema(d)
    assert r.returncode == (0 if d["ok"] else 1), (r.returncode, r.stderr)
    features = {f["id"]: f for f in d["features"]}
    tools = d["tools"]
    # the features agree with the tools and modules listed beside them
    assert features["isa-cuda"]["usable"] == bool(tools["nvcc"]["path"] and tools["cuobjdump"]["path"])
    assert features["isa-hip"]["usable"] == bool(tools["clang++"]["path"] and d["hip_headers"])
    assert features["isa-triton-nvidia"]["usable"] == bool(
        d["python"]["triton"] and tools["ptxas"]["path"] and tools["cuobjdump"]["path"])
    assert features["eval"]["usable"] == (d["python"]["torch"] is not None)
    if in_ci():
        # CI installs every compiler (make setup): every core feature must be usable there
        assert d["ok"] and r.returncode == 0, [f for f in d["features"] if f["core"] and not f["usable"]]
    # the text form agrees on the exit status and ends with its verdict
    t = _doctor()
    assert t.returncode == r.returncode and "Traceback" not in t.stderr, t.stderr
    assert "Features" in t.stdout and "ncu counters: " in t.stdout and "GPU: " in t.stdout
    if d["ok"]:
        assert t.stdout.rstrip().endswith("All 4 core features are usable.") and not t.stderr
    else:
        assert t.stderr.startswith("error: ")


def test_doctor_without_tools_fails_and_names_the_fixes(tmp_path):
    """PATH empty, ROCM_PATH and CUDA_HOME pointing nowhere: the system's clang and CUDA toolkit are hidden.
    NVIDIA's PyPI wheels would still be found in site-packages, so KPILOT_NVCC and KPILOT_CUOBJDUMP name
    binaries that do not exist (find.py honours them first) to make the NVIDIA features fail here too."""
    empty = tmp_path / "bin"
    empty.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("KPILOT_")}
    env.update(PATH=str(empty), ROCM_PATH=str(tmp_path / "no-rocm"), CUDA_HOME=str(tmp_path / "no-cuda"),
               KPILOT_NVCC=str(empty / "nvcc"), KPILOT_CUOBJDUMP=str(empty / "cuobjdump"))
    r = _doctor("--json", env=env)
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    d = json.loads(r.stdout)
    _check_schema(d)
    assert d["ok"] is False
    assert d["tools"]["clang++"]["path"] is None and d["tools"]["nvcc"]["path"] is None
    bad = {f["id"]: f for f in d["features"] if f["core"] and not f["usable"]}
    assert {"isa-cuda", "isa-triton-nvidia", "isa-hip"} <= set(bad)
    assert bad["isa-cuda"]["fix"] == PIP_CUDA and bad["isa-triton-nvidia"]["fix"] in (PIP_CUDA, PIP_TRITON)
    assert bad["isa-hip"]["fix"].startswith("apt-get install clang-19 libamdhip64-dev")

    t = _doctor(env=env)
    assert t.returncode == 1 and "Traceback" not in t.stderr, t.stderr
    err = t.stderr.strip().splitlines()
    assert err[0] == f"error: {len(bad)} core features unusable: {', '.join(bad)}.", err
    for fid, f in bad.items():
        assert f"  {fid}: {f['fix']}" in err
    assert "missing: install clang 17 or newer" in t.stdout     # the tools section says what provides each one


def _fake_nvidia_smi(folder: Path, body: str) -> None:
    exe = folder / "nvidia-smi"
    exe.write_text("#!/bin/sh\n" + body)
    exe.chmod(0o755)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="a shell-script stand-in for nvidia-smi")
def test_doctor_reports_nvidia_smi_gpus_and_failures(tmp_path):
    """A stand-in nvidia-smi (as tests/test_profile.py has a stand-in ncu): its GPUs are listed and count as an
    NVIDIA GPU; when it fails, its message is reported and nothing else breaks."""
    folder = tmp_path / "bin"
    folder.mkdir()
    env = dict(os.environ, PATH=f"{folder}{os.pathsep}{os.environ.get('PATH', '')}")
    _fake_nvidia_smi(folder, 'case "$*" in *--query-gpu=name,driver_version,compute_cap*--format=csv,noheader*) '
                             'echo "NVIDIA H200, 580.159.04, 9.0";; *) exit 2;; esac\n')
    d = json.loads(_doctor("--json", env=env).stdout)
    assert d["gpu"]["gpus"] == [{"name": "NVIDIA H200", "driver": "580.159.04", "compute_cap": "9.0"}]
    assert d["gpu"]["error"] is None
    profile = next(f for f in d["features"] if f["id"] == "profile-nvidia")
    assert "an NVIDIA GPU with its driver" not in profile["missing"]

    _fake_nvidia_smi(folder, "echo \"NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\"\n"
                             "exit 9\n")
    r = _doctor(env=env)
    assert "Traceback" not in r.stderr, r.stderr
    assert "GPU: nvidia-smi failed: exit code 9: NVIDIA-SMI has failed because it couldn't communicate" in r.stdout
