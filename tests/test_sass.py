"""NVIDIA side of `kpilot isa analyze`: nvcc/ptxas builds, cubin handling, ptxas/res-usage/SASS parsers.

The first half parses checked-in real tool output (tests/data/nvidia, made by capture.sh there) and needs
no tools; the second half compiles the kernels in examples/kernels with the real nvcc and reads the cubins
with the real cuobjdump/nvdisasm (skipped locally where missing, failing in CI).
"""

from __future__ import annotations

import re
import subprocess
from collections import Counter
from pathlib import Path

import pytest

from conftest import EXAMPLES, ROOT, require_tool
from kernelpilot.errors import CompileError, InputFormatError, UsageError
from kernelpilot.isa.model import Control, KernelISA, NvidiaResources
from kernelpilot.isa.ptxas import (
    parse_launch_bounds,
    parse_ptxas_report,
    parse_ptxas_report_full,
    parse_res_usage,
)
from kernelpilot.isa.sass import decode_control, load_nvidia_kernels, parse_sass

DATA = ROOT / "tests" / "data" / "nvidia"
KERNELS = EXAMPLES / "kernels"
# sm_90 and sm_100a (a newer ELF ABI) in the default suite; the other archs repeat them (marker golden).
ARCHS = [pytest.param(a, marks=() if a in ("sm_90", "sm_100a") else pytest.mark.golden)
         for a in ("sm_80", "sm_86", "sm_89", "sm_90", "sm_90a", "sm_100", "sm_100a")]


def fixture(name: str) -> str:
    return (DATA / name).read_text()


def opcounts(k: KernelISA) -> Counter:
    return Counter(i.base for i in k.instructions)


def back_edges(k: KernelISA) -> list[tuple[int, int]]:
    return [(i.index, i.target) for i in k.instructions
            if i.base == "BRA" and i.target is not None and i.target < i.index]


def check_controls(k: KernelISA) -> None:
    stalls = [i.control.stall for i in k.instructions]
    assert all(0 <= s <= 15 for s in stalls)
    assert any(stalls), "all stall counts are zero: the control bits are not being decoded"
    # Most instructions stall only a few cycles; a wrong bit offset gives noise instead.
    assert sorted(stalls)[len(stalls) // 2] <= 6
    for i in k.instructions:
        c = i.control
        assert c.write_barrier is None or 0 <= c.write_barrier <= 5
        assert c.read_barrier is None or 0 <= c.read_barrier <= 5
        assert 0 <= c.wait_mask < 64


# ------------------------------------------------------------------------------------------------
# Control words


def test_decode_control_known_words():
    # NVIDIA's NOP padding: CuAssembler prints its control 0x7e0 as [B------:R-:W-:Y:S00].
    assert decode_control(0x000FC00000000000) == Control(
        stall=0, yield_=True, write_barrier=None, read_barrier=None, wait_mask=0, reuse=0)
    # EXIT / BRA: stall 5, no yield.
    c = decode_control(0x000FEA0003800000)
    assert (c.stall, c.yield_, c.write_barrier, c.read_barrier, c.wait_mask) == (5, False, None, None, 0)
    # LDG.E.CONSTANT in loop_reduce sets scoreboard 2 on write; the FADD that uses it waits on 2.
    assert decode_control(0x000EA2000C1E9900).write_barrier == 2
    assert decode_control(0x004FD80000000000).wait_mask == 0b000100
    # Reuse flags sit above the wait mask (bits 58..61).
    assert decode_control(1 << 58).reuse == 1 and decode_control(0xF << 58).reuse == 0xF


# ------------------------------------------------------------------------------------------------
# SASS parser on captured output


def test_parse_nvdisasm_sample():
    text = fixture("loop_reduce.sm_90.nvdisasm.sass")
    (k,) = parse_sass(text, source="loop_reduce.cu")
    assert k.name == "_Z15grid_stride_sumPKfPfi"
    assert k.arch == "sm_90" and k.vendor == "nvidia" and k.source == "loop_reduce.cu"
    assert k.metadata["disassembler"] == "nvdisasm" and k.metadata["entry"] is True
    listed = len(re.findall(r"^\s*/\*[0-9a-f]{4}\*/", text, re.MULTILINE))
    assert len(k.instructions) + k.metadata["padding"] == listed
    assert k.metadata["padding"] > 0 and k.instructions[-1].base != "NOP"
    assert [i.index for i in k.instructions] == list(range(len(k.instructions)))
    assert all(i.address == 16 * i.index for i in k.instructions)
    ops = Counter(i.opcode for i in k.instructions)
    assert ops["SHFL.BFLY"] == 5 and ops["LDG.E.CONSTANT"] == 1 and ops["EXIT"] >= 1
    assert any(i.opcode.startswith("REDG.E.ADD.F32") for i in k.instructions)
    # Predicates, operands without the trailing ';'
    exits = [i for i in k.instructions if i.opcode == "EXIT"]
    assert exits[0].predicate == "@P0" and exits[0].operands == ""
    bra = [i for i in k.instructions if i.base == "BRA"]
    assert {b.predicate for b in bra} == {"@P0", "@!P0"}
    assert all(not i.operands.endswith(";") for i in k.instructions)
    # The grid-stride loop: a backward branch to the label .L_x_2 (the LDG's address computation).
    (edge,) = back_edges(k)
    assert k.labels[".L_x_2"] == edge[1]
    assert k.instructions[edge[1]].address == 0xF0
    # BSSY names its reconvergence point.
    bssy = next(i for i in k.instructions if i.base == "BSSY")
    assert k.instructions[bssy.target].address == 0x160
    # Source lines from -lineinfo; inlined intrinsics map back to the kernel's own line.
    assert all(i.line is not None and i.file.endswith("loop_reduce.cu") for i in k.instructions)
    shfl = [i for i in k.instructions if i.base == "SHFL"]
    assert {i.line for i in shfl} == {11}
    check_controls(k)
    ldg = next(i for i in k.instructions if i.base == "LDG")
    fadd = next(i for i in k.instructions[ldg.index:] if i.base == "FADD")
    assert fadd.control.wait_mask & (1 << ldg.control.write_barrier)
    assert k.resources == NvidiaResources(source="none")


def test_cuobjdump_and_nvdisasm_agree():
    for name in ("loop_reduce", "branches"):
        (a,) = parse_sass(fixture(f"{name}.sm_90.nvdisasm.sass"), source="x", demangle_names=False)
        (b,) = parse_sass(fixture(f"{name}.sm_90.cuobjdump.sass"), source="x", demangle_names=False)
        assert b.metadata["disassembler"] == "cuobjdump"
        assert a.name == b.name and a.arch == b.arch
        assert len(a.instructions) == len(b.instructions) > 0
        for x, y in zip(a.instructions, b.instructions):
            assert (x.address, x.opcode, x.predicate, x.control) == (y.address, y.opcode, y.predicate, y.control)
            if y.target is not None:            # cuobjdump's absolute addresses
                assert x.target == y.target
        assert all(i.line is None for i in b.instructions)


def test_branches_sample():
    (k,) = parse_sass(fixture("branches.sm_90.nvdisasm.sass"), source="branches.cu")
    brx = [i for i in k.instructions if i.base == "BRX"]
    assert len(brx) >= 1
    for i in brx:
        targets = k.metadata["branch_targets"][i.index]
        assert i.target == targets[0] and all(t is not None for t in targets)
    # Every label reference resolved.
    for i in k.instructions:
        if "`(" in i.operands:
            assert i.target is not None, i
    assert back_edges(k)
    # cuobjdump cannot resolve BRX (relative, register-indexed) but resolves every BRA and BSSY.
    (c,) = parse_sass(fixture("branches.sm_90.cuobjdump.sass"), source="branches.cu")
    for i in c.instructions:
        if i.base in ("BRA", "BSSY"):
            assert i.target is not None, i
        if i.base == "BRX":
            assert i.target is None


def test_fatbin_sass_selects_arch():
    text = fixture("vector_add.fatbin.cuobjdump.sass")
    all_ = parse_sass(text, source="va")
    assert sorted(k.arch for k in all_) == ["sm_80", "sm_90a"]
    (k,) = parse_sass(text, source="va", arch="sm_90a")
    assert k.arch == "sm_90a" and k.name == "vector_add" and k.display_name is None
    assert opcounts(k)["LDG"] == 2


def test_parse_garbage_is_empty():
    assert parse_sass("", source="x") == []
    assert parse_sass("hello\nworld ;\n/* nothing */\n", source="x") == []
    assert parse_ptxas_report("nvcc warning : nothing") == {}
    assert parse_res_usage("") == {}
    assert parse_launch_bounds("") == {}


def test_resources_attached():
    res = {"_Z15grid_stride_sumPKfPfi": NvidiaResources(registers=12, source="ptxas -v")}
    (k,) = parse_sass(fixture("loop_reduce.sm_90.nvdisasm.sass"), source="x", resources=res)
    assert k.resources.registers == 12


# ------------------------------------------------------------------------------------------------
# ptxas -v, cuobjdump -res-usage, launch bounds (captured output)


def test_ptxas_report_sm80():
    full = parse_ptxas_report_full(fixture("device_fn.sm_80.ptxas.txt"))
    r = full.kernels
    assert set(r) == {"_Z2k3Pf", "_Z2k2ILi256EEvPf", "_Z2k2ILi128EEvPf", "_Z2k1Pfi"}
    assert set(full.device_functions) == {"_Z6helperPfi"}
    assert full.arch_of["_Z2k3Pf"] == "sm_80"
    k2 = r["_Z2k2ILi256EEvPf"]
    assert (k2.registers, k2.barriers, k2.shared_bytes, k2.constant_bytes) == (10, 1, 1024, 360)
    assert (k2.stack_bytes, k2.spill_store_bytes, k2.spill_load_bytes) == (0, 0, 0)
    assert r["_Z2k2ILi128EEvPf"].shared_bytes == 512
    k1 = r["_Z2k1Pfi"]
    assert (k1.registers, k1.stack_bytes, k1.constant_bytes) == (32, 64, 364)
    assert full.cumulative_stack["_Z2k1Pfi"] == 64
    assert r["_Z2k3Pf"].shared_bytes == 0 and r["_Z2k3Pf"].source == "ptxas -v"


def test_ptxas_report_sm90_has_no_cmem_and_spills():
    r = parse_ptxas_report(fixture("device_fn.sm_90.ptxas.txt"))
    assert r["_Z2k2ILi256EEvPf"].constant_bytes is None
    assert r["_Z2k2ILi256EEvPf"].shared_bytes == 1024
    s = parse_ptxas_report(fixture("spill.sm_90.ptxas.txt"))["spill_kernel"]
    assert (s.registers, s.stack_bytes, s.spill_store_bytes, s.spill_load_bytes) == (32, 464, 1056, 1092)
    # Only the asked arch's entries survive.
    assert parse_ptxas_report(fixture("spill.sm_90.ptxas.txt"), arch="sm_80") == {}


def test_res_usage_matches_ptxas():
    for arch in ("sm_80", "sm_90"):
        p = parse_ptxas_report(fixture(f"device_fn.{arch}.ptxas.txt"))
        u = parse_res_usage(fixture(f"device_fn.{arch}.res_usage.txt"), arch=arch)
        assert set(u) == set(p)
        for name in p:
            assert u[name].registers == p[name].registers
            assert u[name].stack_bytes == p[name].stack_bytes
            assert u[name].shared_bytes == p[name].shared_bytes, (arch, name)
            assert u[name].spill_store_bytes is None and u[name].source == "cuobjdump -res-usage"
    # sm_90+: cuobjdump counts the reserved kilobyte of shared memory, ptxas does not.
    raw = parse_res_usage(fixture("device_fn.sm_90.res_usage.txt"))
    assert raw["_Z2k2ILi256EEvPf"].shared_bytes == 2048
    big_p = parse_ptxas_report(fixture("smem_heavy.sm_100a.ptxas.txt"))
    big_u = parse_res_usage(fixture("smem_heavy.sm_100a.res_usage.txt"), arch="sm_100a")
    (name,) = big_p
    assert big_p[name].shared_bytes == big_u[name].shared_bytes == 49152


def test_res_usage_fatbin_sections():
    text = fixture("vector_add.fatbin.res_usage.txt")
    assert parse_res_usage(text, arch="sm_80")["vector_add"].constant_bytes == 380
    assert parse_res_usage(text, arch="sm_90a")["vector_add"].constant_bytes == 556


def test_launch_bounds_from_elf():
    b = parse_launch_bounds(fixture("device_fn.sm_90.elf.txt"))
    assert set(b) == {"_Z2k3Pf", "_Z2k2ILi256EEvPf", "_Z2k2ILi128EEvPf", "_Z2k1Pfi"}
    assert b["_Z2k3Pf"].max_threads == (128, 1, 1)
    assert b["_Z2k3Pf"].block_size == 128 and b["_Z2k3Pf"].source == "launch_bounds"
    assert b["_Z2k3Pf"].max_registers == 128          # 65536 / (128 threads * 4 blocks)
    assert b["_Z2k1Pfi"].block_size is None and b["_Z2k1Pfi"].max_registers == 255


# ------------------------------------------------------------------------------------------------
# Real builds


@pytest.fixture(scope="module")
def sm90():
    """Every example kernel built for sm_90 (spill.cu with -maxrregcount=32), by file stem."""
    require_tool("nvcc")
    require_tool("cuobjdump")
    require_tool("nvdisasm")
    out = {}
    for stem in sorted(EXPECTED_EXAMPLES):
        flags = ["-maxrregcount=32"] if stem == "spill" else []
        out[stem] = load_nvidia_kernels(KERNELS / f"{stem}.cu", arch="sm_90", extra_flags=flags)
    return out


EXPECTED_EXAMPLES = {"vector_add", "vector_add_vec4", "spill", "local_array", "hmma_wmma", "smem_heavy",
                     "reg_heavy", "loop_reduce"}


def test_examples_present():
    for stem in EXPECTED_EXAMPLES:
        p = KERNELS / f"{stem}.cu"
        assert p.read_text().lstrip().startswith("//"), f"{p.name} must say what it demonstrates"


# spill (spills, stack) and smem_heavy (shared memory, a barrier) in the default suite; the rest repeat them.
@pytest.mark.parametrize("stem", [pytest.param(s, marks=() if s in ("spill", "smem_heavy") else pytest.mark.golden)
                                  for s in sorted(EXPECTED_EXAMPLES)])
def test_ptxas_numbers_agree_with_res_usage(tmp_path, stem):
    from kernelpilot.toolchain import nv_binary
    from kernelpilot.toolchain.nvcc import compile_cuda

    require_tool("nvcc")
    require_tool("cuobjdump")
    flags = ["-maxrregcount=32"] if stem == "spill" else []
    build = compile_cuda(KERNELS / f"{stem}.cu", arch="sm_90", extra_flags=flags, workdir=tmp_path / stem)
    assert build.cubin_path.is_file() and "-lineinfo" in build.command and "-arch=sm_90" in build.command
    p = parse_ptxas_report(build.ptxas_report)
    text = nv_binary.resource_usage(build.cubin_path)
    assert text.startswith("arch = sm_90\n")        # added so the parser knows the arch
    u = parse_res_usage(text)
    assert u == parse_res_usage(text, arch="sm_90")
    assert set(p) == set(u) and p, stem
    for name in p:
        # The report's own lines, read independently of the parser.
        used = re.search(rf"Function properties for {re.escape(name)}\n\s*(\d+) bytes stack frame, (\d+) bytes "
                         rf"spill stores, (\d+) bytes spill loads\n.*Used (\d+) registers, used (\d+) barriers",
                         build.ptxas_report)
        assert used, build.ptxas_report
        stack, sst, sld, regs, bars = map(int, used.groups())
        r = p[name]
        assert (r.stack_bytes, r.spill_store_bytes, r.spill_load_bytes, r.registers, r.barriers) == \
            (stack, sst, sld, regs, bars)
        assert (u[name].registers, u[name].stack_bytes, u[name].shared_bytes) == \
            (r.registers, r.stack_bytes, r.shared_bytes), stem


def test_example_resources(sm90):
    (spill,) = sm90["spill"]
    assert spill.resources.spill_store_bytes > 0 and spill.resources.spill_load_bytes > 0
    assert spill.resources.registers <= 32
    assert "ptxas -v" in spill.resources.source
    (local,) = sm90["local_array"]
    assert local.resources.spill_store_bytes == 0 and local.resources.stack_bytes >= 128
    (smem,) = sm90["smem_heavy"]
    assert smem.resources.shared_bytes == 48 * 1024 and smem.resources.barriers == 1
    (reg,) = sm90["reg_heavy"]
    assert 96 <= reg.resources.registers <= 128 and reg.resources.spill_store_bytes == 0
    assert reg.block_size == 256 and reg.block_size_source == "launch_bounds"
    (va,) = sm90["vector_add"]
    assert va.resources.constant_bytes and va.resources.barriers == 0 and va.block_size is None


def test_launch_bounds_of_cubins(tmp_path):
    from kernelpilot.toolchain import nv_binary
    from kernelpilot.toolchain.nvcc import assemble_ptx, compile_cuda

    require_tool("nvcc")
    require_tool("cuobjdump")
    cubin = compile_cuda(DATA / "device_fn.cu", arch="sm_90", workdir=tmp_path).cubin_path
    assert nv_binary.launch_bounds(cubin) == {"_Z2k3Pf": 128}
    info = nv_binary.launch_bounds_info(cubin)
    assert info["_Z2k3Pf"].max_threads == (128, 1, 1) and info["_Z2k1Pfi"].block_size is None
    ptx = tmp_path / "bounds.ptx"
    body = "{ .reg .b64 %rd<3>; .reg .b32 %r<2>; ld.param.u64 %rd1, [p]; cvta.to.global.u64 %rd2, %rd1;" \
           " mov.u32 %r1, %tid.x; st.global.u32 [%rd2], %r1; ret; }"
    ptx.write_text(".version 8.0\n.target sm_90\n.address_size 64\n"
                   f".visible .entry req(.param .u64 p) .reqntid 64, 2, 1\n{body}\n"
                   f".visible .entry mx(.param .u64 p) .maxntid 256, 1, 1\n{body}\n")
    build = assemble_ptx(ptx, workdir=tmp_path)
    assert nv_binary.launch_bounds(build.cubin_path) == {"req": 128, "mx": 256}
    kernels = {k.name: k for k in load_nvidia_kernels(ptx)}
    assert (kernels["req"].block_size, kernels["req"].block_size_source) == (128, "reqntid")
    assert (kernels["mx"].block_size, kernels["mx"].block_size_source) == (256, "launch_bounds")


def test_example_sass(sm90):
    (va,) = sm90["vector_add"]
    (v4,) = sm90["vector_add_vec4"]
    loads = [i.opcode for i in va.instructions if i.base == "LDG"]
    assert len(loads) == 2 and not any(".64" in o or ".128" in o for o in loads)
    loads4 = [i.opcode for i in v4.instructions if i.base == "LDG"]
    assert len(loads4) == 2 and all("128" in o.split(".") for o in loads4)
    assert any(i.opcode.startswith("STG.E.128") for i in v4.instructions)
    (spill,) = sm90["spill"]
    assert opcounts(spill)["STL"] > 0 and opcounts(spill)["LDL"] > 0 and len(spill.instructions) > 1000
    (local,) = sm90["local_array"]
    assert opcounts(local)["STL"] > 0 and opcounts(local)["LDL"] > 0
    (mma,) = sm90["hmma_wmma"]
    assert any(i.opcode.startswith("HMMA.") for i in mma.instructions)
    assert mma.display_name is None or mma.display_name.startswith("wmma_gemm(")
    (loop,) = sm90["loop_reduce"]
    assert back_edges(loop)
    assert opcounts(loop)["SHFL"] == 5
    for ks in sm90.values():
        for k in ks:
            assert k.arch == "sm_90" and k.vendor == "nvidia"
            assert k.instructions and k.instructions[-1].base != "NOP"
            check_controls(k)
            # Built with -lineinfo: every instruction maps to a source line.
            assert all(i.line is not None for i in k.instructions), k.name


@pytest.mark.parametrize("arch", ARCHS)
def test_every_arch(arch, tmp_path):
    from kernelpilot.toolchain import nv_binary
    from kernelpilot.toolchain.nvcc import compile_cuda

    require_tool("nvcc")
    require_tool("nvdisasm")
    require_tool("cuobjdump")
    with compile_cuda(KERNELS / "loop_reduce.cu", arch=arch) as build:
        assert nv_binary.cubin_arch(build.cubin_path) == arch
        # The arch the ELF says agrees with cuobjdump's own reading of it.
        header = nv_binary.elf_dump(build.cubin_path).split("\n", 3)[1]
        assert re.search(rf"\bsm={arch[3:]}\b", header), header
        (k,) = parse_sass(nv_binary.disassemble_sass(build.cubin_path), source="x",
                          resources=parse_ptxas_report(build.ptxas_report))
        assert k.arch == arch and k.resources.registers and back_edges(k)
        check_controls(k)
        workdir = build.workdir
    assert not workdir.exists()


def test_ptx_input(tmp_path):
    from kernelpilot.toolchain.nvcc import assemble_ptx

    nvcc = require_tool("nvcc")
    require_tool("ptxas")
    ptx = tmp_path / "vector_add_vec4.ptx"
    subprocess.run([str(nvcc), "-ptx", "-arch=sm_90", "-lineinfo", "-o", str(ptx),
                    str(KERNELS / "vector_add_vec4.cu")], check=True)
    build = assemble_ptx(ptx, workdir=tmp_path)          # arch from the module's .target
    assert build.arch == "sm_90" and build.cubin_path.is_file()
    assert parse_ptxas_report(build.ptxas_report)["vector_add_vec4"].registers > 0
    (k,) = load_nvidia_kernels(ptx)
    assert k.arch == "sm_90" and k.resources.spill_store_bytes == 0
    assert any(".128" in i.opcode for i in k.instructions if i.base == "LDG")
    (k100,) = load_nvidia_kernels(ptx, arch="sm_100a")
    assert k100.arch == "sm_100a"
    ptx_a = tmp_path / "va_90a.ptx"
    ptx_a.write_text(ptx.read_text().replace(".target sm_90", ".target sm_90a"))
    with pytest.raises(CompileError) as e:
        assemble_ptx(ptx_a, arch="sm_80", workdir=tmp_path)
    assert ".target" in e.value.stderr and e.value.source == str(ptx_a)


def test_syntax_error_is_compile_error(tmp_path):
    from kernelpilot.toolchain.nvcc import compile_cuda

    require_tool("nvcc")
    bad = tmp_path / "bad.cu"
    bad.write_text("__global__ void k(float* p) { p[threadIdx.x] = undefined_thing; }\n")
    with pytest.raises(CompileError) as e:
        compile_cuda(bad, arch="sm_90", workdir=tmp_path)
    err = e.value
    assert "undefined_thing" in err.stderr and "error" in err.stderr
    assert err.tool == "nvcc" and err.returncode != 0 and str(bad) in err.message
    assert "nvcc" in err.command[0] and str(bad) in err.command
    with pytest.raises(CompileError):
        load_nvidia_kernels(bad, arch="sm_90")


def test_defines_and_bad_arguments(tmp_path):
    from kernelpilot.toolchain.nvcc import compile_cuda

    require_tool("nvcc")
    src = tmp_path / "d.cu"
    src.write_text("#ifndef N\n#error N missing\n#endif\n__global__ void k(float* p) { p[threadIdx.x] = N; }\n")
    build = compile_cuda(src, arch="sm_80", defines={"N": "3"}, workdir=tmp_path)
    assert "-DN=3" in build.command
    with pytest.raises(CompileError) as e:
        compile_cuda(src, arch="sm_80", workdir=tmp_path)
    assert "N missing" in e.value.stderr
    with pytest.raises(UsageError):
        compile_cuda(src, arch="sm_80", defines={"1bad": "x"}, workdir=tmp_path)
    with pytest.raises(UsageError):
        compile_cuda(src, arch="gfx942", workdir=tmp_path)
    with pytest.raises(UsageError):
        load_nvidia_kernels(src)                          # .cu needs an arch


def test_bad_binaries_raise_input_format_error(tmp_path):
    from kernelpilot.toolchain import nv_binary
    from kernelpilot.toolchain.nvcc import compile_cuda

    require_tool("nvcc")
    require_tool("cuobjdump")
    require_tool("nvdisasm")
    text = tmp_path / "notes.cubin"
    text.write_text("this is not a cubin\n")
    good = compile_cuda(KERNELS / "vector_add.cu", arch="sm_90", workdir=tmp_path).cubin_path
    data = good.read_bytes()
    truncated = tmp_path / "truncated.cubin"
    truncated.write_bytes(data[: len(data) // 3])
    # Intact section table, garbage instructions.
    garbled = tmp_path / "garbled.cubin"
    info = bytearray(data)
    for name, _t, off, size in nv_binary._sections(good, data):
        if name.startswith(b".text."):
            info[off:off + size] = bytes((i * 37 + 11) % 256 for i in range(size))
    garbled.write_bytes(bytes(info))
    empty = tmp_path / "empty.cubin"
    empty.write_bytes(b"")
    host = Path("/bin/sh")
    for bad in (text, truncated, empty, host):
        for fn in (nv_binary.cubin_arch, nv_binary.disassemble_sass, nv_binary.resource_usage):
            with pytest.raises(InputFormatError) as e:
                fn(bad)
            assert "not a CUDA binary" in str(e.value) and e.value.path == str(bad)
        with pytest.raises(InputFormatError):
            load_nvidia_kernels(bad, arch="sm_90")
    with pytest.raises(InputFormatError) as e:
        nv_binary.disassemble_sass(garbled)
    assert "nvdisasm" in e.value.what


def test_multi_arch_containers(tmp_path):
    from kernelpilot.toolchain import nv_binary

    nvcc = require_tool("nvcc")
    require_tool("cuobjdump")
    require_tool("nvdisasm")
    src = KERNELS / "loop_reduce.cu"
    gencode = ["-gencode", "arch=compute_80,code=sm_80", "-gencode", "arch=compute_90a,code=sm_90a"]
    obj = tmp_path / "lr.o"
    # One compile: the object, and the fatbin it embeds, kept among nvcc's intermediate files.
    subprocess.run([str(nvcc), "-c", *gencode, "-o", str(obj), "--keep", "--keep-dir", str(tmp_path), str(src)],
                   check=True)
    fatbin = tmp_path / "loop_reduce.fatbin"
    for f, kind in ((fatbin, "fatbin"), (obj, "host")):
        assert nv_binary.classify(f) == kind
        assert sorted(e.arch for e in nv_binary.list_cubins(f)) == ["sm_80", "sm_90a"]
        for arch in ("sm_80", "sm_90a"):
            (k,) = load_nvidia_kernels(f, arch=arch)
            assert k.arch == arch and k.name == "_Z15grid_stride_sumPKfPfi"
            assert k.resources.source == "cuobjdump -res-usage" and k.resources.spill_store_bytes is None
            assert k.resources.registers and back_edges(k)
        with pytest.raises(UsageError, match="sm_80, sm_90a"):
            load_nvidia_kernels(f)                        # two archs: the caller must choose
        with pytest.raises(UsageError, match="no cubin for sm_90"):
            load_nvidia_kernels(f, arch="sm_90")          # sm_90 is not sm_90a
        with pytest.raises(InputFormatError):
            nv_binary.cubin_arch(f)                       # not a single cubin
    # A plain cubin: the arch must match when one is asked for.
    (c,) = nv_binary.extract_cubins(fatbin, arch="sm_90a", workdir=tmp_path / "x")
    assert nv_binary.cubin_arch(c) == "sm_90a"
    assert nv_binary.extract_cubins(c, arch=None, workdir=tmp_path) == [c]
    with pytest.raises(UsageError):
        nv_binary.extract_cubins(c, arch="sm_80", workdir=tmp_path)
    (k,) = load_nvidia_kernels(c)
    assert k.arch == "sm_90a"
    assert nv_binary.select_cubin(fatbin, arch="sm_80", workdir=tmp_path / "y").name.endswith(".sm_80.cubin")


def test_executable_with_runtime_cubins(tmp_path):
    """An executable also carries code-less cubins (from the CUDA runtime): select_cubin skips them."""
    from kernelpilot.toolchain import nv_binary

    nvcc = require_tool("nvcc")
    require_tool("cuobjdump")
    require_tool("nvdisasm")
    main = tmp_path / "main.cu"
    main.write_text(f'#include "{KERNELS / "vector_add.cu"}"\nint main() {{ return 0; }}\n')
    exe = tmp_path / "prog"
    subprocess.run([str(nvcc), "-gencode", "arch=compute_90,code=sm_90", "-o", str(exe), str(main)], check=True)
    assert nv_binary.classify(exe) == "host"
    cubin = nv_binary.select_cubin(exe, arch="sm_90", workdir=tmp_path / "x")
    assert "vector_add" in nv_binary.read_cubin_info(cubin).functions
    (k,) = load_nvidia_kernels(exe, arch="sm_90")
    assert k.name == "vector_add" and opcounts(k)["LDG"] == 2


def test_triton_ptxas_cubins():
    """Triton compiles with its own ptxas (12.9: ELF ABI 7, where sm_90a is a flag in e_flags) and
    ptxas-blackwell (13.x) for sm_100+: their cubins must read the same."""
    from conftest import require_module
    from kernelpilot.toolchain import nv_binary

    triton = require_module("triton")
    nvcc = require_tool("nvcc")
    require_tool("cuobjdump")
    require_tool("nvdisasm")
    bindir = Path(triton.__file__).parent / "backends" / "nvidia" / "bin"
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        t = Path(tmp)
        for exe, arch in (("ptxas", "sm_90a"), ("ptxas-blackwell", "sm_100a")):
            if not (bindir / exe).is_file():
                pytest.skip(f"this Triton has no {exe}")
            ptx = t / f"lr.{arch}.ptx"
            subprocess.run([str(nvcc), "-ptx", f"-arch={arch}", "-o", str(ptx), str(KERNELS / "loop_reduce.cu")],
                           check=True)
            # Triton's ptxas 12.9 accepts PTX ISA 8.7 at most; loop_reduce needs nothing newer.
            ptx.write_text(re.sub(r"^\.version .*$", ".version 8.7", ptx.read_text(), flags=re.MULTILINE))
            cubin = t / f"lr.{arch}.cubin"
            subprocess.run([str(bindir / exe), "-v", f"-arch={arch}", "-o", str(cubin), str(ptx)], check=True,
                           capture_output=True)
            assert nv_binary.cubin_arch(cubin) == arch
            (k,) = load_nvidia_kernels(cubin)
            assert k.arch == arch and back_edges(k) and k.resources.registers
            check_controls(k)


def test_a_float_shuffled_through_an_int_is_a_conversion_finding():
    """F2I before each SHFL and I2F after it: the planted wrong warp sum; the right one is clean."""
    require_tool("nvcc")
    from kernelpilot.isa.analyze import analyze

    reports = {r.display_name or r.name: r for r in analyze(EXAMPLES / "kernels" / "warp_sum_shfl_converted.cu",
                                                            arch="sm_90")}
    bad = next(r for n, r in reports.items() if "converted" in n)
    good = next(r for n, r in reports.items() if "converted" not in n)
    (f,) = [f for f in bad.findings if f.id == "crosslane.conversion"]
    assert f.severity == "high" and {op.split(".")[0] for op in f.evidence["conversions"]} >= {"F2I", "I2FP"}
    assert f.evidence["source_lines"]
    assert not [f for f in good.findings if f.id == "crosslane.conversion"]
    for name in ("vector_add.cu", "loop_reduce.cu", "hmma_wmma.cu", "smem_heavy.cu"):
        for r in analyze(EXAMPLES / "kernels" / name, arch="sm_90"):
            assert "crosslane.conversion" not in {f.id for f in r.findings}, name
