"""hip_device_shim.h: ordinary HIP code (threadIdx, blockDim, __syncthreads, rsqrtf, half math, ...) compiled
with Debian's HIP headers and -nogpulib gives the ISA a ROCm build gives, not calls into a device library
that is not there. Real clang, real headers; nothing here is mocked."""

from __future__ import annotations

import os
import re
from collections import Counter
from pathlib import Path

import pytest
import yaml

from conftest import EXAMPLES, in_ci, require_tool
from kernelpilot.isa.amdgcn import parse_amdgcn_asm
from kernelpilot.isa.model import KernelISA
from kernelpilot.toolchain.hip import SHIM_HEADER, HipBuild, compile_hip, device_libs_dir, rocm_root

ARCHS = ("gfx942", pytest.param("gfx90a", marks=pytest.mark.golden))   # gfx90a repeats gfx942's checks


def _hip_tools() -> Path:
    require_tool("clang++")
    try:
        root = rocm_root()
    except Exception as e:  # noqa: BLE001 - ToolNotFoundError
        if in_ci():
            pytest.fail(f"CI must have HIP headers (libamdhip64-dev): {e}")
        pytest.skip(str(e))
    if device_libs_dir(root, "gfx942") is not None:
        pytest.skip(f"{root} has ROCm's device libraries: the shim is not used there")
    return root


def _build(tmp_path: Path, source: str, arch: str = "gfx942", name: str = "k", **kw) -> HipBuild:
    src = tmp_path / f"{name}.hip"
    src.write_text(source)
    out = tmp_path / f"{name}-{kw.get('device_shim', True)}-{arch}"
    return compile_hip(src, arch=arch, workdir=out, **kw)


def _kernels(b: HipBuild) -> dict[str, KernelISA]:
    return {k.name: k for k in parse_amdgcn_asm(b.asm_text, source=str(b.asm_path))}


def _ops(k: KernelISA) -> Counter:
    return Counter(i.opcode for i in k.instructions)


def _listing(k: KernelISA) -> list[tuple[str, str]]:
    return [(i.opcode, i.operands) for i in k.instructions]


def _metadata(b: HipBuild, kernel: str) -> dict:
    m = re.search(r"^\s*\.amdgpu_metadata\n(.*?)^\s*\.end_amdgpu_metadata", b.asm_text, re.S | re.M)
    assert m, "no .amdgpu_metadata block"
    return next(k for k in yaml.safe_load(m.group(1))["amdhsa.kernels"] if k[".name"] == kernel)


ORDINARY = r"""
#include <hip/hip_runtime.h>
extern "C" __global__ void relu2(const float* x, float* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = fmaxf(x[i], 0.f) * 2.f;
}
"""

# the same kernel written with clang's own builtins: __builtin_amdgcn_workgroup_size_x() reads the
# code-object-v5 hidden argument group_size_x, exactly what ROCm's ockl does for blockDim.x
ORDINARY_BUILTINS = r"""
#include <hip/hip_runtime.h>
extern "C" __global__ void relu2(const float* x, float* y, int n) {
  int i = __builtin_amdgcn_workgroup_id_x() * __builtin_amdgcn_workgroup_size_x() + __builtin_amdgcn_workitem_id_x();
  if (i < n) y[i] = fmaxf(x[i], 0.f) * 2.f;
}
"""


@pytest.mark.parametrize("arch", ARCHS)
def test_ordinary_kernel_compiles_as_with_rocm(tmp_path, arch):
    _hip_tools()
    b = _build(tmp_path, ORDINARY, arch)
    assert b.shim == SHIM_HEADER and b.device_libs is None
    assert "-nogpulib" in b.command and b.command[b.command.index("-include") + 1] == str(SHIM_HEADER)
    assert "-D__KPILOT_SHIM_ABI_VERSION=500" in b.command
    assert b.unresolved_calls == [] and b.warnings == []
    assert "s_swappc_b64" not in b.asm_text
    k = _kernels(b)["relu2"]
    md = _metadata(b, "relu2")
    # 22 (gfx942) / 26 (gfx90a) instructions, 4 VGPRs, 11 SGPRs, no stack (without the shim: 66/70
    # instructions, 3 calls, 43 VGPRs, 51 SGPRs and a dynamic stack)
    assert k.resources.vgpr == md[".vgpr_count"] <= 4
    assert k.resources.sgpr == md[".sgpr_count"] <= 12
    assert k.resources.scratch_bytes == md[".private_segment_fixed_size"] == 0
    assert md.get(".uses_dynamic_stack", False) is False
    assert len(k.instructions) <= 26
    # the work-item id is the v0 the hardware loads, read before anything writes it
    first_v0 = next(i for i in k.instructions if re.search(r"\bv0\b", i.operands))
    assert re.search(r"\bv0\b", first_v0.operands.split(",", 1)[1]), first_v0
    # blockDim.x: the 16-bit hidden argument group_size_x of the kernarg segment (code object v5), loaded
    # through the kernarg pointer (s[0:1] on gfx942, s[4:5] after gfx90a's private segment buffer);
    # HIP's uniform work-group size folds the block_count compare and the partial-group remainder away
    kernarg = "s[4:5]" if re.search(r"\.amdhsa_user_sgpr_private_segment_buffer\s+1", b.asm_text) else "s[0:1]"
    offset = next(a[".offset"] for a in md[".args"] if a[".value_kind"] == "hidden_group_size_x")
    load = next(i for i in k.instructions
                if i.opcode == "s_load_dword" and i.operands.endswith(f"{kernarg}, {offset & ~3:#x}"))
    reg = load.operands.split(",")[0]
    assert any(i.opcode == "s_and_b32" and i.operands.startswith(f"{reg}, {reg}, 0xffff")
               for i in k.instructions), "group_size_x is the low half of the loaded dword"
    hidden = {a[".value_kind"]: a[".offset"] for a in md[".args"]}
    for i in k.instructions:
        m = re.fullmatch(r"s_load_dword(?:x(\d+))?", i.opcode)
        if m:
            start = int(i.operands.rsplit(",", 1)[1], 0)
            covered = range(start, start + 4 * int(m.group(1) or 1))
            assert hidden["hidden_block_count_x"] not in covered and hidden["hidden_remainder_x"] not in covered
    assert _ops(k)["v_max_f32_e32"] >= 1 and _ops(k)["global_store_dword"] == 1
    # and it is exactly the code of the kernel written with clang's builtins
    ref = _build(tmp_path, ORDINARY_BUILTINS, arch, name="builtins", device_shim=False)
    assert _listing(k) == _listing(_kernels(ref)["relu2"])


@pytest.mark.parametrize("arch", ARCHS)
def test_without_the_shim_the_calls_stay(tmp_path, arch):
    """What the shim removes: device_shim=False keeps the old -nogpulib behaviour."""
    _hip_tools()
    b = _build(tmp_path, ORDINARY, arch, device_shim=False)
    assert b.shim is None and "-include" not in b.command
    assert set(b.unresolved_calls) == {"__ockl_get_group_id", "__ockl_get_local_size", "__ockl_get_local_id"}
    assert b.asm_text.count("s_swappc_b64") == 3
    k = _kernels(b)["relu2"]
    assert k.resources.vgpr >= 32 and _metadata(b, "relu2")[".uses_dynamic_stack"] is True
    assert any("__builtin_amdgcn_workitem_id_x" in w for w in b.warnings)


@pytest.mark.parametrize("arch", ARCHS)
def test_shfl_xor_is_still_ds_bpermute(tmp_path, arch):
    _hip_tools()
    src = EXAMPLES / "kernels" / "wave_argmax_bpermute.hip"
    with_shim = compile_hip(src, arch=arch, workdir=tmp_path / "shim")
    without = compile_hip(src, arch=arch, workdir=tmp_path / "plain", device_shim=False)
    assert with_shim.shim == SHIM_HEADER and with_shim.unresolved_calls == []
    k = _kernels(with_shim)["wave_argmax_bpermute"]
    assert _ops(k)["ds_bpermute_b32"] >= 6
    assert _listing(k) == _listing(_kernels(without)["wave_argmax_bpermute"])   # untouched by the shim


COMMON = r"""
#include <hip/hip_runtime.h>
#include <hip/hip_fp16.h>
extern "C" __global__ void rmsnorm(const float* x, float* y, int n) {
  __shared__ float part[256];
  unsigned t = threadIdx.x;
  float s = 0.f;
  for (int i = t; i < n; i += blockDim.x) s += x[blockIdx.x * n + i] * x[blockIdx.x * n + i];
  part[t] = s;
  __syncthreads();
  float r = rsqrtf(part[0] / n + 1e-6f);
  for (int i = t; i < n; i += blockDim.x) y[blockIdx.x * n + i] = x[blockIdx.x * n + i] * r;
}
extern "C" __global__ void halfmath(const __half* x, __half* y) {
  unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  y[i] = hexp(x[i]) + hsqrt(x[i]) + hlog(x[i]) + hrsqrt(x[i]) + hfloor(x[i]) + __habs(x[i]);
}
extern "C" __global__ void rope(const float* x, float* y) {
  unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  y[i] = x[i] * __cosf(x[i]) + x[i] * __sinf(x[i]) + __ocml_exp_f32(x[i]) + log2f(x[i]);
  __threadfence();
}
extern "C" __global__ void ids3d(unsigned* y) {
  unsigned i = (threadIdx.z * blockDim.y + threadIdx.y) * blockDim.x + threadIdx.x;
  y[i] = gridDim.x * blockDim.x + gridDim.y + gridDim.z + blockIdx.y + blockIdx.z + __umulhi(i, 7u) + __clz(i);
}
"""


@pytest.mark.parametrize("arch", ARCHS)
def test_common_device_functions_need_no_library(tmp_path, arch):
    _hip_tools()
    b = _build(tmp_path, COMMON, arch)
    assert b.unresolved_calls == [] and b.warnings == [] and "s_swappc_b64" not in b.asm_text
    ks = _kernels(b)
    for k in ks.values():
        assert k.resources.scratch_bytes == 0
    ops = _ops(ks["rmsnorm"])
    assert ops["s_barrier"] == 1 and ops["v_rsq_f32_e32"] == 1
    half = _ops(ks["halfmath"])
    assert half["v_exp_f32_e32"] == 1 and half["v_log_f32_e32"] == 1 and half["v_sqrt_f16_e32"] == 1
    assert half["v_rsq_f16_e32"] == 1 and half["v_floor_f16_e32"] == 1
    rope = _ops(ks["rope"])
    assert rope["v_sin_f32_e32"] == 1 and rope["v_cos_f32_e32"] == 1
    # ocml's exp is the accurate expansion (range reduction, v_exp_f32, v_ldexp_f32), not a bare v_exp_f32
    assert rope["v_rndne_f32_e32"] >= 1 and rope["v_ldexp_f32"] >= 1
    # __threadfence: an agent-scope fence (write back and invalidate the caches below the device scope)
    assert rope["buffer_wbl2"] >= 1 if arch == "gfx942" else rope["buffer_wbinvl1_vol"] >= 1
    # gridDim.x, gridDim.y/z and blockDim.x/y: hidden kernel arguments, no division (code object v5)
    assert not any("v_rcp" in op for op in _ops(ks["ids3d"]))


def test_a_function_left_out_is_still_reported(tmp_path):
    """logf is ocml's log, whose result depends on the link-time __oclc_unsafe_math_opt: not defined."""
    _hip_tools()
    src = ORDINARY.replace("fmaxf(x[i], 0.f) * 2.f", "logf(x[i]) + sqrtf(x[i])")
    b = _build(tmp_path, src)
    assert b.shim == SHIM_HEADER
    assert b.unresolved_calls == ["__ocml_log_f32"]
    assert len(b.warnings) == 1
    w = b.warnings[0]
    assert w.startswith("__ocml_log_f32 is a ROCm device-library function that -nogpulib leaves unresolved")
    assert "hip_device_shim.h" in w
    assert "s_swappc_b64" in b.asm_text
    assert "__ockl_" not in b.asm_text                   # threadIdx & co. are still resolved


def test_fast_math_flags_leave_the_math_out(tmp_path):
    """Under -fno-honor-nans the kernel's own copy of ocml's code would fold differently from the library:
    the ocml part is left out (and reported), the work-item part stays."""
    _hip_tools()
    src = ORDINARY.replace("fmaxf(x[i], 0.f) * 2.f", "rsqrtf(x[i])")
    b = _build(tmp_path, src, extra_flags=["-fno-honor-nans"])
    assert "-D__KPILOT_SHIM_NO_OCML=1" in b.command
    assert b.unresolved_calls == ["__ocml_rsqrt_f32"]
    plain = _build(tmp_path, src, name="plain")
    assert "-D__KPILOT_SHIM_NO_OCML=1" not in plain.command and plain.unresolved_calls == []


def test_code_object_v4_reads_the_dispatch_packet(tmp_path):
    _hip_tools()
    b = _build(tmp_path, ORDINARY, extra_flags=["-mcode-object-version=4"])
    assert "-D__KPILOT_SHIM_ABI_VERSION=400" in b.command
    assert ".amdhsa_code_object_version 4" in b.asm_text
    assert b.unresolved_calls == [] and "s_swappc_b64" not in b.asm_text
    assert re.search(r"\.amdhsa_user_sgpr_dispatch_ptr\s+1", b.asm_text)
    k = _kernels(b)["relu2"]
    # workgroup_size_x: bytes 4-5 of the dispatch packet (s[0:1] is now the dispatch pointer)
    assert any(i.opcode == "s_load_dword" and i.operands.endswith("s[0:1], 0x4") for i in k.instructions)
    assert k.resources.vgpr <= 4


def test_device_libs_dir_needs_the_targets_files(tmp_path):
    bc = tmp_path / "amdgcn" / "bitcode"
    assert device_libs_dir(tmp_path) is None
    bc.mkdir(parents=True)
    for f in ("ocml.bc", "ockl.bc", "oclc_isa_version_90a.bc"):
        (bc / f).write_bytes(b"")
    assert device_libs_dir(tmp_path) == bc
    assert device_libs_dir(tmp_path, "gfx90a:xnack-") == bc
    assert device_libs_dir(tmp_path, "gfx942") is None
    assert device_libs_dir(Path("/usr"), "gfx942") is None or Path("/usr/amdgcn/bitcode").is_dir()


def test_rocm_root_without_the_targets_libraries_falls_back_to_the_shim(tmp_path, monkeypatch):
    """A ROCm tree whose device libraries lack gfx942 (an older ROCm): still -nogpulib + shim."""
    _hip_tools()
    root = tmp_path / "rocm"
    (root / "amdgcn" / "bitcode").mkdir(parents=True)
    for f in ("ocml.bc", "ockl.bc", "oclc_isa_version_90a.bc"):
        (root / "amdgcn" / "bitcode" / f).write_bytes(b"")
    hip_include = Path("/usr/include")
    if os.environ.get("ROCM_PATH"):
        hip_include = Path(os.environ["ROCM_PATH"]) / "include"
    (root / "include").symlink_to(hip_include)
    monkeypatch.setenv("ROCM_PATH", str(root))
    b = _build(tmp_path, ORDINARY, "gfx942")
    assert b.device_libs is None and b.shim == SHIM_HEADER and f"--rocm-path={root}" in b.command
    assert b.unresolved_calls == [] and _kernels(b)["relu2"].resources.vgpr <= 4
