"""AMD side of the ISA path: HIP compile (real clang), .s parsing, code object reading and disassembly
(real llvm-objdump), Triton's gfx942 output. No output here is mocked or hand-written."""

from __future__ import annotations

import re
import shutil
import sys
from collections import Counter
from pathlib import Path

import pytest
import yaml

from conftest import EXAMPLES, in_ci, require_module, require_tool
from kernelpilot.errors import CompileError, InputFormatError, KernelpilotError, ToolError
from kernelpilot.isa.amdgcn import parse_amdgcn_asm, parse_amdgcn_objdump
from kernelpilot.isa.analyze import analyze
from kernelpilot.isa.model import AmdResources, KernelISA
from kernelpilot.toolchain.amd_binary import (
    code_object_arch,
    disassemble_code_object,
    read_code_object_metadata,
)
from kernelpilot.toolchain.hip import compile_hip

KERNELS = EXAMPLES / "kernels"
VARIANTS = ("bpermute", "dpp", "readlane")


def _hip_tools() -> None:
    require_tool("clang++")
    if not Path("/usr/include/hip/hip_runtime.h").is_file() and not Path("/opt/rocm/include/hip").is_dir():
        import os

        if not (os.environ.get("ROCM_PATH") and Path(os.environ["ROCM_PATH"], "include", "hip").is_dir()):
            if in_ci():
                pytest.fail("CI must have HIP headers (libamdhip64-dev)")
            pytest.skip("HIP headers not installed (libamdhip64-dev or ROCm)")


def _llvm_mc() -> Path:
    """llvm-mc beside llvm-objdump: assembles a .s into a code object (no lld needed)."""
    objdump = require_tool("llvm-objdump")
    mc = objdump.with_name(objdump.name.replace("objdump", "mc"))
    if mc.is_file():
        return mc
    found = shutil.which("llvm-mc")
    if found:
        return Path(found)
    if in_ci():
        pytest.fail(f"CI must have llvm-mc beside {objdump}")
    pytest.skip("llvm-mc not installed")


def _assemble(asm_path: Path, arch: str, out: Path) -> Path:
    from kernelpilot.toolchain.run import run_tool

    mc = _llvm_mc()
    run_tool([mc, "-triple=amdgcn-amd-amdhsa", f"-mcpu={arch}", "-filetype=obj", "-o", out, asm_path], tool="llvm-mc")
    return out


def _yaml_metadata(asm_text: str) -> dict:
    """The .amdgpu_metadata block, read independently of the parser."""
    m = re.search(r"^\s*\.amdgpu_metadata\n(.*?)^\s*\.end_amdgpu_metadata", asm_text, re.S | re.M)
    assert m, "no .amdgpu_metadata block"
    return yaml.safe_load(m.group(1))


def _comment(asm_text: str, key: str) -> int:
    m = re.search(rf"^; {key}: (\d+)", asm_text, re.M)
    assert m, f"no '; {key}:' comment"
    return int(m.group(1))


def _only(kernels: list[KernelISA]) -> KernelISA:
    assert len(kernels) == 1, [k.name for k in kernels]
    return kernels[0]


def _ops(k: KernelISA) -> Counter:
    return Counter(i.opcode for i in k.instructions)


@pytest.fixture(scope="module")
def builds(tmp_path_factory):
    _hip_tools()
    out = tmp_path_factory.mktemp("hip")
    result = {}
    for arch in ("gfx942", "gfx90a"):
        for v in VARIANTS:
            b = compile_hip(KERNELS / f"wave_argmax_{v}.hip", arch=arch, workdir=out)
            result[(v, arch)] = (b, _only(parse_amdgcn_asm(b.asm_text, source=str(b.asm_path))))
    return result


# --- the three examples ------------------------------------------------------------------------------


@pytest.mark.parametrize("arch", ["gfx942", "gfx90a"])
def test_bpermute_variant_goes_through_lds(builds, arch):
    b, k = builds[("bpermute", arch)]
    ops = _ops(k)
    assert k.name == "wave_argmax_bpermute" and k.vendor == "amd" and k.arch == arch
    # six butterfly steps, value and index each: __shfl_xor is ds_bpermute_b32 on gfx9
    assert ops["ds_bpermute_b32"] >= 6
    assert not [i for i in k.instructions if i.opcode.endswith("_dpp")]
    assert b.unresolved_calls == [] and b.warnings == []


@pytest.mark.parametrize("arch", ["gfx942", "gfx90a"])
def test_dpp_variant_uses_dpp_and_one_readlane(builds, arch):
    _, k = builds[("dpp", arch)]
    ops = _ops(k)
    assert ops["ds_bpermute_b32"] == 0
    assert ops["v_readlane_b32"] == 1
    dpp_operands = " | ".join(i.operands for i in k.instructions if i.opcode.endswith("_dpp"))
    for modifier in ("quad_perm:[1,0,3,2]", "quad_perm:[2,3,0,1]", "row_shr:4", "row_shr:8", "row_bcast:15",
                     "row_bcast:31", "row_mask:0xa", "row_mask:0xc", "bank_mask:0xf"):
        assert modifier in dpp_operands, modifier
    # comments never leak into operands
    assert all(";" not in i.operands and "//" not in i.operands for i in k.instructions)


@pytest.mark.parametrize("arch", ["gfx942", "gfx90a"])
def test_readlane_variant_has_a_readlane_chain(builds, arch):
    _, k = builds[("readlane", arch)]
    ops = _ops(k)
    assert ops["v_readlane_b32"] >= 4
    assert ops["ds_bpermute_b32"] == 0
    lanes = sorted({int(i.operands.rsplit(",", 1)[1]) for i in k.instructions if i.opcode == "v_readlane_b32"})
    assert lanes == [15, 31, 47, 63]
    assert any(i.opcode == "v_mov_b32_dpp" and "row_shr:8" in i.operands for i in k.instructions)


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("arch", ["gfx942", "gfx90a"])
def test_resources_match_metadata_and_comments(builds, variant, arch):
    b, k = builds[(variant, arch)]
    md = next(e for e in _yaml_metadata(b.asm_text)["amdhsa.kernels"] if e[".name"] == k.name)
    r = k.resources
    assert isinstance(r, AmdResources)
    assert (r.vgpr, r.sgpr, r.agpr) == (md[".vgpr_count"], md[".sgpr_count"], md[".agpr_count"])
    assert (r.vgpr_spill, r.sgpr_spill) == (md[".vgpr_spill_count"], md[".sgpr_spill_count"])
    assert (r.lds_bytes, r.scratch_bytes) == (md[".group_segment_fixed_size"], md[".private_segment_fixed_size"])
    assert r.wavefront_size == md[".wavefront_size"] == 64
    assert r.vgpr == _comment(b.asm_text, "NumVgprs")
    assert r.sgpr == _comment(b.asm_text, "NumSgprs")       # NumSgprs counts VCC/XNACK/flat scratch too
    assert r.total_vgpr == _comment(b.asm_text, "TotalNumVgprs")
    assert r.accum_offset == _comment(b.asm_text, "AccumOffset")
    assert r.scratch_bytes == _comment(b.asm_text, "ScratchSize")
    assert "metadata" in r.source
    assert k.compiler_occupancy == _comment(b.asm_text, "Occupancy")
    assert k.metadata["sgpr_numbered"] <= r.sgpr
    assert k.metadata["code_bytes"] == int(re.search(r"codeLenInByte = (\d+)", b.asm_text).group(1))
    # __launch_bounds__(256) in the source
    assert k.block_size == 256 and k.block_size_source == "max_flat_workgroup_size"


@pytest.mark.parametrize("variant", VARIANTS)
def test_labels_and_branch_targets_resolve(builds, variant):
    _, k = builds[(variant, "gfx942")]
    branches = [i for i in k.instructions if i.opcode == "s_branch" or i.opcode.startswith("s_cbranch_")]
    assert branches
    for i in branches:
        label = i.operands.split()[0]
        assert i.target is not None and i.target == k.labels[label], i
        assert 0 <= i.target < len(k.instructions)
    assert all(i.index == n for n, i in enumerate(k.instructions))
    # the loop over rows: its back edge points backwards
    assert any(i.target < i.index for i in branches)
    assert k.instructions[-1].opcode == "s_endpgm"


def test_source_lines_from_loc(tmp_path):
    _hip_tools()
    src = KERNELS / "wave_argmax_dpp.hip"
    b = compile_hip(src, arch="gfx942", extra_flags=["-g"], workdir=tmp_path)
    k = _only(parse_amdgcn_asm(b.asm_text, source=str(b.asm_path)))
    readlane = next(i for i in k.instructions if i.opcode == "v_readlane_b32")
    expected = next(n for n, line in enumerate(src.read_text().splitlines(), 1) if "readlane(key, 63)" in line)
    assert readlane.line == expected
    assert readlane.file and readlane.file.endswith("wave_argmax_dpp.hip")


def test_defines_reach_the_compiler(builds, tmp_path):
    b = compile_hip(KERNELS / "wave_argmax_dpp.hip", arch="gfx942", defines={"EXPERTS": "256"}, workdir=tmp_path)
    assert "-DEXPERTS=256" in b.command
    k = _only(parse_amdgcn_asm(b.asm_text, source=str(b.asm_path)))
    # four floats per lane: one 16-byte load instead of the 8-byte load of EXPERTS=128
    assert _ops(k)["global_load_dwordx4"] >= 1
    assert _ops(builds[("dpp", "gfx942")][1])["global_load_dwordx4"] == 0


# --- more kernels: defaults, several kernels, calls, spills -------------------------------------------

_TWO_KERNELS = r"""
#include <hip/hip_runtime.h>
__device__ __attribute__((noinline)) float twice(float x) { return 2.0f * x; }
extern "C" __global__ void no_bounds(float* y) { y[__builtin_amdgcn_workitem_id_x()] = 1.0f; }
extern "C" __global__ __launch_bounds__(128) void bounded(float* y) {
  unsigned t = __builtin_amdgcn_workitem_id_x();
  y[t] = twice(y[t]);
}
extern "C" __global__ void uses_thread_idx(float* y) { y[threadIdx.x] = 3.0f; }
"""


def test_several_kernels_default_block_size_and_calls(tmp_path):
    _hip_tools()
    src = tmp_path / "two.hip"
    src.write_text(_TWO_KERNELS)
    b = compile_hip(src, arch="gfx942", workdir=tmp_path, device_shim=False)
    kernels = {k.name: k for k in parse_amdgcn_asm(b.asm_text, source=str(src))}
    assert set(kernels) == {"no_bounds", "bounded", "uses_thread_idx"}    # the device function is not a kernel
    assert kernels["no_bounds"].block_size == 1024
    assert "default" in kernels["no_bounds"].block_size_source
    assert kernels["bounded"].block_size == 128
    assert kernels["bounded"].block_size_source == "max_flat_workgroup_size"
    assert "_Z5twicef" in kernels["bounded"].metadata["calls"]
    # threadIdx is a device-library call that -nogpulib leaves unresolved: say so
    assert "__ockl_get_local_id" in kernels["uses_thread_idx"].metadata["calls"]
    assert "__ockl_get_local_id" in b.unresolved_calls
    assert any("__builtin_amdgcn_workitem_id_x" in w for w in b.warnings)
    md = {e[".name"]: e for e in _yaml_metadata(b.asm_text)["amdhsa.kernels"]}
    for k in kernels.values():
        assert k.instructions[-1].opcode == "s_endpgm"
        assert (k.resources.vgpr, k.resources.sgpr) == (md[k.name][".vgpr_count"], md[k.name][".sgpr_count"])


_SPILL = r"""
#include <hip/hip_runtime.h>
// 48 live accumulators under a 24-VGPR budget: the register allocator must spill to scratch.
extern "C" __global__ void __attribute__((amdgpu_num_vgpr(24)))
spills(const float* __restrict__ x, float* __restrict__ y, int n) {
  int t = __builtin_amdgcn_workitem_id_x() + __builtin_amdgcn_workgroup_id_x() * 256;
  float acc[48];
#pragma unroll
  for (int i = 0; i < 48; ++i) acc[i] = x[t + i * n];
  for (int k = 0; k < n; ++k) {
#pragma unroll
    for (int i = 0; i < 48; ++i) acc[i] = acc[i] * acc[(i + 1) % 48] + x[k + i];
  }
  float s = 0;
#pragma unroll
  for (int i = 0; i < 48; ++i) s += acc[i];
  y[t] = s;
}
"""


def test_spilling_kernel_reports_spills_and_scratch(tmp_path):
    _hip_tools()
    src = tmp_path / "spills.hip"
    src.write_text(_SPILL)
    b = compile_hip(src, arch="gfx942", workdir=tmp_path)
    k = _only(parse_amdgcn_asm(b.asm_text, source=str(src)))
    md = _yaml_metadata(b.asm_text)["amdhsa.kernels"][0]
    assert k.resources.vgpr_spill == md[".vgpr_spill_count"] > 0
    assert k.resources.scratch_bytes == md[".private_segment_fixed_size"] == _comment(b.asm_text, "ScratchSize") > 0
    assert any(i.opcode.startswith("scratch_store_") for i in k.instructions)
    # and the same numbers from the code object
    co = _assemble(b.asm_path, "gfx942", tmp_path / "spills.o")
    kb = _only(parse_amdgcn_objdump(disassemble_code_object(co), read_code_object_metadata(co), source=str(co),
                                    arch="gfx942"))
    assert (kb.resources.vgpr_spill, kb.resources.scratch_bytes) == (k.resources.vgpr_spill, k.resources.scratch_bytes)


_SGPR_SPILL = r"""
#include <hip/hip_runtime.h>
// 40 uniform values (scalar loads) live across a loop under a 32-SGPR budget: the SGPRs spill into VGPR lanes.
extern "C" __global__ void __attribute__((amdgpu_num_sgpr(32)))
sgpr_spills(const float* __restrict__ c, float* __restrict__ y, int n) {
  int t = __builtin_amdgcn_workitem_id_x() + __builtin_amdgcn_workgroup_id_x() * 256;
  float u[40];
#pragma unroll
  for (int i = 0; i < 40; ++i) u[i] = c[i];
  float v = y[t];
  for (int k = 0; k < n; ++k) {
#pragma unroll
    for (int i = 0; i < 40; ++i) v = v * u[i] + u[(i + 7) % 40];
  }
  y[t] = v;
}
"""


def test_sgpr_spills_into_vgpr_lanes_are_told_apart_from_scratch(tmp_path):
    """SGPRs spilled with no scratch go to VGPR lanes (v_writelane): the finding says so and ranks it low, where
    VGPR spills to scratch rank high."""
    _hip_tools()
    from kernelpilot.isa import analyze

    src = tmp_path / "sgpr_spills.hip"
    src.write_text(_SGPR_SPILL)
    (k,) = analyze(str(src), arch="gfx942")
    assert k.resources.sgpr_spill > 0 and not k.resources.vgpr_spill and not k.resources.scratch_bytes
    assert k.opcodes.get("v_writelane_b32", 0) > 0 and k.opcodes.get("v_readlane_b32", 0) > 0
    (f,) = [f for f in k.findings if f.id == "amd.spills"]
    assert f.severity == "low" and "VGPR lanes" in f.title and "not to scratch" in f.suggestion
    src.write_text(_SPILL)
    (k,) = analyze(str(src), arch="gfx942")
    (f,) = [f for f in k.findings if f.id == "amd.spills"]
    assert f.severity == "high" and "scratch memory" in f.suggestion


# --- code objects: the same kernel read from the binary ----------------------------------------------


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("arch", ["gfx942", "gfx90a"])
def test_code_object_matches_its_asm(builds, variant, arch, tmp_path):
    b, ka = builds[(variant, arch)]
    co = _assemble(b.asm_path, arch, tmp_path / f"{variant}.o")
    assert code_object_arch(co) == arch
    md = read_code_object_metadata(co)
    text = disassemble_code_object(co)
    kb = _only(parse_amdgcn_objdump(text, md, source=str(co), arch=arch))
    assert kb.name == ka.name and kb.arch == arch and kb.vendor == "amd"
    assert [i.opcode for i in kb.instructions] == [i.opcode for i in ka.instructions]
    assert [i.target for i in kb.instructions] == [i.target for i in ka.instructions]
    non_branch = [(a.operands, o.operands) for a, o in zip(ka.instructions, kb.instructions)
                  if not (a.opcode == "s_branch" or a.opcode.startswith("s_cbranch_"))]
    assert all(x == y for x, y in non_branch)
    ra, rb = ka.resources, kb.resources
    for field in ("vgpr", "sgpr", "agpr", "vgpr_spill", "sgpr_spill", "lds_bytes", "scratch_bytes",
                  "wavefront_size", "accum_offset", "total_vgpr"):
        assert getattr(ra, field) == getattr(rb, field), field
    assert kb.block_size == ka.block_size
    assert kb.metadata["code_bytes"] == ka.metadata["code_bytes"]
    addrs = [i.address for i in kb.instructions]
    assert all(a is not None for a in addrs) and addrs == sorted(addrs)


@pytest.fixture(scope="module")
def triton_gfx942(tmp_path_factory):
    triton = require_module("triton")
    import triton.language as tl
    from triton.backends.compiler import GPUTarget

    @triton.jit
    def scaled_rowmax(x_ptr, out_ptr, n_rows, n_cols, scale, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        cols = tl.arange(0, BLOCK)
        best = tl.full([BLOCK], float("-inf"), tl.float32)
        for start in range(0, n_cols, BLOCK):       # a runtime loop: a back edge in the ISA
            x = tl.load(x_ptr + row * n_cols + start + cols, mask=start + cols < n_cols, other=float("-inf"))
            best = tl.maximum(best, x * scale)
        tl.store(out_ptr + row, tl.max(best, 0))

    src = triton.compiler.ASTSource(
        scaled_rowmax,
        signature={"x_ptr": "*fp32", "out_ptr": "*fp32", "n_rows": "i32", "n_cols": "i32", "scale": "fp32",
                   "BLOCK": "constexpr"},
        constexprs={"BLOCK": 256},
    )
    compiled = triton.compile(src, target=GPUTarget("hip", "gfx942", 64))
    out = tmp_path_factory.mktemp("triton")
    hsaco = out / "scaled_rowmax.hsaco"
    hsaco.write_bytes(compiled.asm["hsaco"])
    return compiled.asm["amdgcn"], hsaco, compiled.metadata.num_warps


def test_triton_hsaco_matches_its_asm(triton_gfx942):
    require_tool("llvm-objdump")
    asm, hsaco, num_warps = triton_gfx942
    ka = _only(parse_amdgcn_asm(asm, source="scaled_rowmax.s"))
    assert ka.arch == "gfx942"     # from Triton's ".amdgcn_target" (its own triple spelling)
    assert ka.block_size == num_warps * 64
    assert code_object_arch(hsaco) == "gfx942"
    md = read_code_object_metadata(hsaco)
    kb = _only(parse_amdgcn_objdump(disassemble_code_object(hsaco), md, source=str(hsaco), arch="gfx942"))
    assert len(kb.instructions) == len(ka.instructions)
    assert [i.opcode for i in kb.instructions] == [i.opcode for i in ka.instructions]
    assert [i.target for i in kb.instructions] == [i.target for i in ka.instructions]
    assert any(i.target is not None and i.target < i.index for i in kb.instructions)   # the loop
    for field in ("vgpr", "sgpr", "agpr", "vgpr_spill", "sgpr_spill", "lds_bytes", "scratch_bytes",
                  "wavefront_size", "accum_offset", "total_vgpr"):
        assert getattr(ka.resources, field) == getattr(kb.resources, field), field
    # Triton's LLVM writes `; TotalNumSgprs:`; the metadata's sgpr_count is that total
    assert ka.resources.sgpr == int(re.search(r"; (?:Total)?NumSgprs: (\d+)", asm).group(1))
    assert ka.compiler_occupancy is not None and kb.compiler_occupancy is None
    assert any(i.line for i in ka.instructions)          # Triton emits .loc line info


# --- errors -----------------------------------------------------------------------------------------


def test_syntax_error_raises_compile_error(tmp_path):
    _hip_tools()
    src = tmp_path / "broken.hip"
    src.write_text("#include <hip/hip_runtime.h>\n"
                   "extern \"C\" __global__ void k(float* y) { y[0] = 1.0f }\n")
    with pytest.raises(CompileError) as ei:
        compile_hip(src, arch="gfx942", workdir=tmp_path)
    e = ei.value
    assert "broken.hip:2" in e.stderr and "error:" in e.stderr and "expected ';'" in e.stderr
    assert e.source == str(src)
    assert "--offload-arch=gfx942" in e.command


def test_unsupported_arch_is_a_tool_error_not_a_compile_error(tmp_path):
    _hip_tools()
    try:
        b = compile_hip(KERNELS / "wave_argmax_dpp.hip", arch="gfx950", workdir=tmp_path)
    except CompileError:  # pragma: no cover - the failure this test guards against
        pytest.fail("an arch clang does not know must not read as a broken source")
    except ToolError as e:
        assert "gfx950" in e.message and e.hint
    else:   # clang 20 or newer
        assert _only(parse_amdgcn_asm(b.asm_text, source="x")).arch == "gfx950"


@pytest.fixture(scope="module")
def good_code_object(builds, tmp_path_factory):
    b, _ = builds[("dpp", "gfx942")]
    return _assemble(b.asm_path, "gfx942", tmp_path_factory.mktemp("co") / "dpp.o")


def test_truncated_code_object(good_code_object, tmp_path):
    data = good_code_object.read_bytes()
    for n in (len(data) // 2, 40):
        bad = tmp_path / f"cut{n}.hsaco"
        bad.write_bytes(data[:n])
        for fn in (code_object_arch, read_code_object_metadata, lambda p: disassemble_code_object(p, arch="gfx942")):
            with pytest.raises(InputFormatError, match="not an AMDGPU code object"):
                fn(bad)


def test_text_file_and_foreign_elf_are_refused(tmp_path):
    text = tmp_path / "kernel.hsaco"
    text.write_text("this is not a code object\n")
    with pytest.raises(InputFormatError, match="no ELF header"):
        disassemble_code_object(text, arch="gfx942")
    with pytest.raises(InputFormatError):
        read_code_object_metadata(text)
    native = Path(sys.executable).resolve()
    if native.read_bytes()[:4] == b"\x7fELF":
        with pytest.raises(InputFormatError, match="EM_AMDGPU"):
            code_object_arch(native)
    with pytest.raises(KernelpilotError, match="no such file"):
        code_object_arch(tmp_path / "missing.hsaco")


def test_garbage_text_section_is_refused(good_code_object, tmp_path):
    import struct

    data = bytearray(good_code_object.read_bytes())
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shnum, shstrndx = struct.unpack_from("<HH", data, 0x3C)
    stroff = struct.unpack_from("<Q", data, shoff + 64 * shstrndx + 24)[0]
    for i in range(shnum):
        name, = struct.unpack_from("<I", data, shoff + 64 * i)
        if data[stroff + name:stroff + name + 6] == b".text\0":
            off, size = struct.unpack_from("<QQ", data, shoff + 64 * i + 24)
            data[off:off + size] = b"\xff" * size
    bad = tmp_path / "garbage.o"
    bad.write_bytes(bytes(data))
    with pytest.raises(InputFormatError, match="do not decode"):
        disassemble_code_object(bad)


def test_assembly_cut_short_is_an_error_not_a_clean_kernel(builds):
    b, _ = builds[("dpp", "gfx942")]
    text = b.asm_text
    cut = text[: text.index(".Lfunc_end")]               # the file stops inside the kernel's code
    with pytest.raises(InputFormatError, match="ends inside wave_argmax_dpp's code"):
        parse_amdgcn_asm(cut, source="cut.s")
    assert parse_amdgcn_asm(text, source="whole.s")      # the whole file reads as before


@pytest.mark.parametrize("arch", ["gfx942", "gfx90a"])
def test_a_float_through_an_int_only_dpp_builtin_is_a_conversion_finding(arch):
    """The planted wrong rewrite (a float passed to __builtin_amdgcn_update_dpp) converts each value on its way
    through the exchange; the right one (its bits) is clean, and so are the other example kernels."""
    require_tool("clang++")
    reports = {r.name: r for r in analyze(EXAMPLES / "kernels" / "row_sum_dpp_converted.hip", arch=arch)}
    bad = next(r for n, r in reports.items() if "converted" in n)
    good = next(r for n, r in reports.items() if "converted" not in n)
    (f,) = [f for f in bad.findings if f.id == "crosslane.conversion"]
    assert f.severity == "high" and f.evidence["round_trips"] >= 3
    assert any(op.startswith("v_cvt_f32_i32") for op in f.evidence["conversions"])
    assert any(op.startswith("v_cvt_i32_f32") for op in f.evidence["conversions"])
    assert not [f for f in good.findings if f.id == "crosslane.conversion"]
    assert good.families.get("crosslane.dpp", 0) >= 3 and "v_add_f32_dpp" in good.opcodes
    for name in ("wave_argmax_dpp.hip", "wave_argmax_bpermute.hip", "wave_argmax_readlane.hip"):
        for r in analyze(EXAMPLES / "kernels" / name, arch=arch):
            assert "crosslane.conversion" not in {f.id for f in r.findings}, name
