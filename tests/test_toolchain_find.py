"""Finding the compilers and disassemblers: an LLVM too old for AMD's current GPUs (a system LLVM 14 first on
PATH) is passed over for a newer one, and named with its version where it is all there is. Uses the real
binaries: a Debian LLVM 14 (the system LLVM of Debian 12) and LLVM 17 or newer."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import EXAMPLES, ROOT, in_ci, require_tool

from kernelpilot.errors import ToolNotFoundError
from kernelpilot.toolchain import find


def _old_llvm(tool: str) -> Path:
    """A real ``tool`` of LLVM 16 or older, from its versioned name or Debian's /usr/lib/llvm-N."""
    for v in ("14", "15", "16"):
        for p in (shutil.which(f"{tool}-{v}"), f"/usr/lib/llvm-{v}/bin/{tool}"):
            if p and Path(p).is_file():
                return Path(p)
    if in_ci():
        pytest.fail(f"CI must have an LLVM older than 17 ({tool}-14, Debian's llvm-14) for this test")
    pytest.skip(f"no {tool} of LLVM 16 or older installed")


@pytest.fixture()
def path_of(tmp_path, monkeypatch):
    """Make PATH exactly the given folders (each {name: binary} becomes symlinks), and forget earlier finds."""

    def make(*folders: dict[str, Path]) -> str:
        dirs = []
        for i, links in enumerate(folders):
            d = tmp_path / f"bin{i}"
            d.mkdir()
            for name, target in links.items():
                (d / name).symlink_to(target)
            dirs.append(str(d))
        path = os.pathsep.join(dirs)
        monkeypatch.setenv("PATH", path)
        monkeypatch.setenv("ROCM_PATH", str(tmp_path / "no-rocm"))
        for name in ("KPILOT_LLVM_OBJDUMP", "KPILOT_CLANGXX", "KPILOT_LLVM_READELF"):
            monkeypatch.delenv(name, raising=False)
        find.find_tool.cache_clear()
        find.find_tools.cache_clear()
        return path

    yield make
    find.find_tool.cache_clear()
    find.find_tools.cache_clear()


def test_an_old_llvm_first_on_path_is_passed_over(path_of, tmp_path):
    new = require_tool("llvm-objdump").resolve()
    old = _old_llvm("llvm-objdump")
    path_of({"llvm-objdump": old}, {"llvm-objdump": new})
    assert find.find_tool("llvm-objdump") == tmp_path / "bin1" / "llvm-objdump"
    assert find.find_tools("llvm-objdump") == (tmp_path / "bin1" / "llvm-objdump",)


def test_only_an_old_llvm_is_named_with_its_version(path_of, tmp_path):
    path_of({"llvm-objdump": _old_llvm("llvm-objdump")})
    with pytest.raises(ToolNotFoundError) as e:
        find.find_tool("llvm-objdump")
    message = str(e.value)
    assert "LLVM 17 or newer" in message and str(tmp_path / "bin0" / "llvm-objdump") in message
    assert "17 or newer is needed" in message and "(LLVM 1" in message


def test_a_gfx942_kernel_is_analyzed_with_an_old_llvm_first_on_path(path_of):
    """The whole path: clang++ builds the HIP kernel for gfx942, and the disassembler that reads it is the new
    one, though an LLVM 14 llvm-objdump comes first on PATH."""
    clang = require_tool("clang++").resolve()
    new = {n: require_tool(n).resolve() for n in ("llvm-objdump", "llvm-readelf")}
    old = {n: _old_llvm(n) for n in ("llvm-objdump", "llvm-readelf")}
    path = path_of(old, {"clang++": clang, **new})
    env = {**os.environ, "PATH": path, "PYTHONPATH": str(ROOT / "src")}
    r = subprocess.run([sys.executable, "-m", "kernelpilot", "isa", "analyze",
                        str(EXAMPLES / "kernels" / "wave_argmax_dpp.hip"), "--arch", "gfx942"],
                       capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 0, r.stderr
    assert "gfx942" in r.stdout and "instructions" in r.stdout


def test_cuda_sources_are_analyzed_with_pypis_nvidia_tools_alone(tmp_path):
    """No CUDA toolkit (CUDA_HOME names nothing, PATH only the system's folders): nvcc, ptxas and the
    disassemblers come from PyPI's NVIDIA wheels (the `cuda` extra), and a .cu is compiled and read."""
    env = {**os.environ, "CUDA_HOME": str(tmp_path / "no-cuda"), "PATH": "/usr/bin:/bin",
           "PYTHONPATH": str(ROOT / "src")}
    for name in ("KPILOT_NVCC", "KPILOT_PTXAS", "KPILOT_CUOBJDUMP", "KPILOT_NVDISASM"):
        env.pop(name, None)
    where = subprocess.run([sys.executable, "-c", "from kernelpilot.toolchain.find import find_tool as f\n"
                            "for t in ('nvcc', 'cuobjdump', 'nvdisasm'):\n"
                            "    try: print(t, f(t))\n"
                            "    except Exception as e: print(t, 'missing', e)"],
                           capture_output=True, text=True, env=env, timeout=120).stdout
    found = dict(line.split(" ", 1) for line in where.splitlines())
    if not found.get("nvcc", "").endswith("/nvidia/cu13/bin/nvcc"):
        if in_ci():
            pytest.fail(f"CI must have PyPI's nvidia-cuda-nvcc (the cuda extra): {where}")
        pytest.skip(f"PyPI's nvidia-cuda-nvcc is not installed: {where}")
    assert "/nvidia/cu13/bin/" in found["cuobjdump"] and "/nvidia/cu13/bin/" in found["nvdisasm"], where
    # the tensor-core example includes cuda_fp16.h and mma.h, which need CCCL's headers (nvidia-cuda-cccl)
    r = subprocess.run([sys.executable, "-m", "kernelpilot", "isa", "analyze", str(EXAMPLES / "kernels" / "hmma_wmma.cu"),
                        "--arch", "sm_90", "--json"], capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 0, r.stderr
    kernel = json.loads(r.stdout)["kernels"][0]
    assert kernel["instruction_count"] > 10 and any(op.startswith("HMMA") for op in kernel["opcodes"]), kernel["opcodes"]
