"""Offline Triton compilation (kernelpilot.toolchain.triton_compile) with the real Triton: no mocks, no GPU
(except the one test marked gpu, which checks the offline build against a real launch)."""

from __future__ import annotations

import json
import pickle
import re
import subprocess
import textwrap
from pathlib import Path

import pytest

from conftest import EXAMPLES, require_module, require_tool
from kernelpilot.errors import CompileError, UsageError

SOFTMAX = EXAMPLES / "kernels" / "softmax_triton.py"
MATMUL = EXAMPLES / "kernels" / "matmul_triton.py"
ELF = b"\x7fELF"


@pytest.fixture(scope="module")
def tc():
    require_module("triton")
    from kernelpilot.toolchain import triton_compile

    return triton_compile


@pytest.fixture(scope="module")
def builds(tc, tmp_path_factory):
    """Both examples for sm_90 and gfx942, compiled once for the module."""
    out = {}
    for spec in (f"{SOFTMAX}:softmax_kernel", f"{MATMUL}:matmul_kernel"):
        for arch in ("sm_90", "gfx942"):
            name = spec.rsplit(":", 1)[1].split("_")[0]
            out[name, arch] = tc.compile_triton(spec, arch=arch, workdir=tmp_path_factory.mktemp(f"{name}-{arch}"))
    return out


def line_of(path: Path, text: str) -> int:
    return next(i for i, line in enumerate(path.read_text().splitlines(), 1) if text in line)


def write_kernel(tmp_path: Path, body: str, name: str = "k.py") -> Path:
    p = tmp_path / name
    p.write_text("import triton\nimport triton.language as tl\n\n" + textwrap.dedent(body))
    return p


# ---------------------------------------------------------------- the two examples, both vendors


@pytest.mark.parametrize("name", ["softmax", "matmul"])
def test_nvidia_build_keeps_every_stage(builds, name):
    b = builds[name, "sm_90"]
    assert b.vendor == "nvidia" and b.arch == "sm_90" and b.binary_arch == "sm_90a"
    assert {"ttir", "ttgir", "llir", "ptx", "cubin"} <= set(b.asm)
    assert isinstance(b.asm["cubin"], bytes) and b.asm["cubin"][:4] == ELF
    assert b.binary_path.read_bytes() == b.asm["cubin"] and b.binary_path.suffix == ".cubin"
    assert b.asm_path.read_text() == b.asm["ptx"] and b.asm_path.suffix == ".ptx"
    for stage in ("ttir", "ttgir", "llir"):
        assert b.paths[stage].read_text() == b.asm[stage]
    assert b.symbol == f"{name}_kernel" and f".entry {b.symbol}(" in b.asm["ptx"]
    assert b.warp_size == 32 and b.block_size == b.num_warps * 32
    assert b.metadata["num_warps"] == b.num_warps and b.metadata["name"] == b.symbol
    assert b.metadata["target"] == {"backend": "cuda", "arch": 90, "warp_size": 32}
    json.dumps(b.to_json())                       # plain JSON values throughout
    assert json.loads(b.paths["metadata"].read_text())["name"] == b.symbol


@pytest.mark.parametrize("name", ["softmax", "matmul"])
def test_amd_build_keeps_every_stage(builds, name):
    b = builds[name, "gfx942"]
    assert b.vendor == "amd" and b.binary_arch == "gfx942" and b.ptxas_report is None
    assert {"ttir", "ttgir", "llir", "amdgcn", "hsaco"} <= set(b.asm)
    assert b.asm["hsaco"][:4] == ELF and b.binary_path.read_bytes() == b.asm["hsaco"]
    assert b.asm_path.suffix == ".s" and b.asm_path.read_text() == b.asm["amdgcn"]
    assert re.search(rf"^{b.symbol}:", b.asm["amdgcn"], re.M), "kernel label missing from the AMDGCN"
    assert f".name:           {b.symbol}" in b.asm["amdgcn"] or b.symbol in b.asm["amdgcn"]
    assert b.warp_size == 64 and b.block_size == b.num_warps * 64
    assert b.metadata["target"]["arch"] == "gfx942"
    json.dumps(b.to_json())


def test_declaration_supplies_everything(builds):
    soft, mm = builds["softmax", "sm_90"], builds["matmul", "gfx942"]
    assert soft.variant == "experts256" and soft.constexprs == {"BLOCK_SIZE": 256} and soft.num_warps == 4
    assert soft.signature["out_ptr"] == "*fp32:16"          # pointers get Triton's launch-time alignment
    assert soft.signature["n_cols"] == "i32:16" and soft.signature["n_rows"] == "i32"
    assert mm.num_warps == 8 and mm.num_stages == 3 and mm.block_size == 512
    # unit strides are specialized to the constant 1, as a real launch does
    assert mm.constexprs["stride_ak"] == 1 and "stride_ak" not in mm.signature


def test_ptxas_report_is_for_this_cubin(builds):
    for name in ("softmax", "matmul"):
        b = builds[name, "sm_90"]
        assert b.ptxas_report is not None, b.notes
        assert f"Compiling entry function '{b.symbol}' for 'sm_90a'" in b.ptxas_report
        assert re.search(r"Used \d+ registers", b.ptxas_report)
        assert "-v" in b.ptxas_command and "--gpu-name=sm_90a" in b.ptxas_command
        # the same ptxas with the same options reproduced Triton's cubin byte for byte
        assert b.ptxas_matches_cubin is True, b.notes
        assert b.paths["ptxas_report"].read_text().strip() == b.ptxas_report


def test_matmul_uses_the_matrix_units(builds):
    assert "wgmma.mma_async" in builds["matmul", "sm_90"].asm["ptx"]
    assert "v_mfma_f32" in builds["matmul", "gfx942"].asm["amdgcn"]
    assert builds["matmul", "sm_90"].metadata["shared"] > 0


def test_cuobjdump_disassembles_the_cubin(builds):
    cuobjdump = require_tool("cuobjdump")
    b = builds["matmul", "sm_90"]
    out = subprocess.run([str(cuobjdump), "-sass", str(b.binary_path)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "Function : matmul_kernel" in out.stdout and "HGMMA" in out.stdout


@pytest.mark.parametrize("arch", ["sm_80", "sm_89", "sm_100", "gfx90a", "gfx950"])
def test_other_targets(tc, tmp_path, arch):
    import triton

    if arch == "sm_100" and tuple(int(x) for x in triton.__version__.split(".")[:2]) < (3, 3):
        pytest.skip("Triton 3.2's ptxas does not know sm_100")
    b = tc.compile_triton(f"{SOFTMAX}:softmax_kernel", arch=arch, workdir=tmp_path)
    assert b.binary[:4] == ELF
    if arch.startswith("sm_"):
        assert f"for '{b.binary_arch}'" in b.ptxas_report
        assert b.binary_arch == (arch + "a" if arch == "sm_100" else arch)


# ---------------------------------------------------------------- what the user gives


def test_command_line_values_override_the_file(tc, tmp_path):
    b = tc.compile_triton(f"{SOFTMAX}:softmax_kernel", arch="sm_90", workdir=tmp_path,
                          signature=tc.parse_signature("in_ptr:*fp16, n_cols:i32"),
                          constexprs={"BLOCK_SIZE": "512"}, num_warps=2)
    assert b.signature["in_ptr"] == "*fp16:16" and b.signature["out_ptr"] == "*fp32:16"   # the rest from the file
    assert b.signature["n_cols"] == "i32"
    assert b.constexprs["BLOCK_SIZE"] == 512 and b.num_warps == 2 and b.block_size == 64
    assert "!tt.ptr<f16>" in b.asm["ttir"]
    assert re.search(r"ld\.global\S*\.b16", b.asm["ptx"])


def test_signature_as_a_string_argument(tc, tmp_path):
    b = tc.compile_triton(f"{SOFTMAX}:softmax_kernel", arch="gfx942", workdir=tmp_path, signature="in_ptr:*bf16")
    assert b.signature["in_ptr"] == "*bf16:16" and "!tt.ptr<bf16>" in b.asm["ttir"]


def test_variants(tc, tmp_path):
    b = tc.compile_triton(f"{SOFTMAX}:softmax_kernel", arch="sm_90", workdir=tmp_path, variant="wide")
    assert b.variant == "wide" and b.constexprs["BLOCK_SIZE"] == 1024 and b.num_warps == 8
    with pytest.raises(UsageError, match="experts256, wide"):
        tc.compile_triton(f"{SOFTMAX}:softmax_kernel", arch="sm_90", variant="huge")


def test_parse_signature(tc):
    assert tc.parse_signature("x_ptr:*fp32,y_ptr:*fp32,n:i32") == {"x_ptr": "*fp32", "y_ptr": "*fp32", "n": "i32"}
    assert tc.parse_signature(" a : *bf16 , n:i32:16 ") == {"a": "*bf16", "n": "i32:16"}
    for bad in ("x_ptr", "x_ptr:", "1x:i32", "", "a:i32,a:i32"):
        with pytest.raises(UsageError):
            tc.parse_signature(bad)
    assert tc.parse_constexprs(["BLOCK=1024", "ACT = relu"]) == {"BLOCK": "1024", "ACT": "relu"}
    with pytest.raises(UsageError):
        tc.parse_constexprs(["BLOCK"])


def test_constexpr_strings_are_converted(tc, tmp_path):
    p = write_kernel(tmp_path, """
        @triton.jit
        def scale(x_ptr, n, BLOCK: tl.constexpr, FACTOR: tl.constexpr = 2.0, DOUBLE: tl.constexpr = False,
                  MODE: tl.constexpr = "keep"):
            offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
            x = tl.load(x_ptr + offs, mask=offs < n)
            if DOUBLE:
                x = x * FACTOR
            if MODE == "neg":
                x = -x
            tl.store(x_ptr + offs, x, mask=offs < n)
    """)
    b = tc.compile_triton(f"{p}:scale", arch="sm_80", workdir=tmp_path / "out", signature="x_ptr:*fp32,n:i32",
                          constexprs={"BLOCK": "256", "FACTOR": "3", "DOUBLE": "true", "MODE": "neg"})
    assert b.constexprs == {"BLOCK": 256, "FACTOR": 3.0, "DOUBLE": True, "MODE": "neg"}
    assert b.num_warps == 4 and b.block_size == 128               # Triton's default
    with pytest.raises(UsageError, match="FACTOR"):
        tc.compile_triton(f"{p}:scale", arch="sm_80", signature="x_ptr:*fp32,n:i32",
                          constexprs={"BLOCK": "256", "FACTOR": "big"})


def test_missing_parameters_are_named(tc, tmp_path):
    p = write_kernel(tmp_path, """
        @triton.jit
        def copy(src, dst, n, BLOCK: tl.constexpr):
            offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
            tl.store(dst + offs, tl.load(src + offs, mask=offs < n), mask=offs < n)
    """)
    with pytest.raises(UsageError) as e:
        tc.compile_triton(f"{p}:copy", arch="sm_90", signature="src:*fp32,dst:*fp32,n:i32")
    assert "BLOCK" in str(e.value) and "-D BLOCK=" in str(e.value) and "KPILOT_SPECS" in str(e.value)
    with pytest.raises(UsageError) as e:
        tc.compile_triton(f"{p}:copy", arch="sm_90", constexprs={"BLOCK": 128})
    assert "src, dst, n" in str(e.value) and "--signature" in str(e.value)
    with pytest.raises(UsageError, match="no parameter named bogus"):
        tc.compile_triton(f"{p}:copy", arch="sm_90", signature="src:*fp32,dst:*fp32,n:i32,bogus:i32",
                          constexprs={"BLOCK": 128})
    with pytest.raises(UsageError, match="unknown Triton type"):
        tc.compile_triton(f"{p}:copy", arch="sm_90", signature="src:*float,dst:*fp32,n:i32", constexprs={"BLOCK": 128})
    with pytest.raises(UsageError, match="power of two"):
        tc.compile_triton(f"{p}:copy", arch="sm_90", signature="src:*fp32,dst:*fp32,n:i32", constexprs={"BLOCK": 128},
                          num_warps=3)


def test_missing_kernel_lists_the_files_kernels(tc):
    with pytest.raises(UsageError) as e:
        tc.compile_triton(f"{MATMUL}:matmul", arch="sm_90")
    assert "matmul_kernel" in str(e.value) and "'matmul'" in str(e.value)
    with pytest.raises(UsageError, match="not a @triton.jit function.*softmax_kernel"):
        tc.compile_triton(f"{SOFTMAX}:softmax", arch="sm_90")


def test_bad_files_and_specs(tc, tmp_path):
    with pytest.raises(UsageError, match="no such file"):
        tc.compile_triton(f"{tmp_path}/absent.py:k", arch="sm_90")
    with pytest.raises(UsageError, match="path/to/file.py:kernel_name"):
        tc.compile_triton(str(SOFTMAX), arch="sm_90")
    broken = write_kernel(tmp_path, "x = 1 / 0\n", "broken.py")
    with pytest.raises(UsageError, match=rf"broken\.py:{line_of(broken, '1 / 0')}: importing the file failed: ZeroDivisionError"):
        tc.compile_triton(f"{broken}:k", arch="sm_90")
    syntax = write_kernel(tmp_path, "def f(:\n", "syntax.py")
    with pytest.raises(UsageError, match=rf"syntax\.py:{line_of(syntax, 'def f(')}: syntax error"):
        tc.compile_triton(f"{syntax}:k", arch="sm_90")
    for arch in ("hopper", "mi300x", "sm90x", "gfx942:xnack-"):
        with pytest.raises(UsageError, match="neither an NVIDIA"):
            tc.compile_triton(f"{SOFTMAX}:softmax_kernel", arch=arch)


def test_import_time_driver_use_is_explained(tc, tmp_path):
    p = write_kernel(tmp_path, """
        props = triton.runtime.driver.active.utils.get_device_properties(0)
    """)
    with pytest.raises(UsageError, match="uses the GPU driver while it is imported"):
        tc.compile_triton(f"{p}:k", arch="sm_90")


# ---------------------------------------------------------------- compile errors


@pytest.mark.parametrize("arch", ["sm_90", "gfx942"])
def test_triton_error_becomes_compile_error(tc, tmp_path, arch):
    p = write_kernel(tmp_path, """
        @triton.jit
        def helper(x):
            return x + undefined_name


        @triton.jit
        def bad_shape(x_ptr, BLOCK: tl.constexpr):
            offs = tl.arange(0, BLOCK)
            tl.store(x_ptr + offs, tl.zeros((7,), tl.float32))


        @triton.jit
        def bad_name(x_ptr, BLOCK: tl.constexpr):
            offs = tl.arange(0, BLOCK)
            tl.store(x_ptr + offs, helper(tl.load(x_ptr + offs)))
    """)
    with pytest.raises(CompileError) as e:
        tc.compile_triton(f"{p}:bad_shape", arch=arch, signature="x_ptr:*fp32", constexprs={"BLOCK": 128})
    err = e.value
    assert err.tool == "triton" and err.returncode == 1 and err.source == f"{p}:bad_shape"
    assert f"{p}:{line_of(p, 'tl.zeros((7,)')}:" in err.stderr and "tl.zeros((7,), tl.float32)" in err.stderr
    assert "must be a power of 2" in err.stderr
    assert "Traceback" not in err.stderr and "code_generator.py" not in err.stderr
    assert "compile_triton(" in err.command_line                      # a command that reproduces it
    assert pickle.loads(pickle.dumps(err)).stderr == err.stderr

    with pytest.raises(CompileError) as e:
        tc.compile_triton(f"{p}:bad_name", arch=arch, signature="x_ptr:*fp32", constexprs={"BLOCK": 128})
    # both frames, the call in the kernel and the line in the helper, then the error itself
    assert f"{p}:{line_of(p, 'helper(tl.load')}:" in e.value.stderr
    assert f"{p}:{line_of(p, 'x + undefined_name')}:" in e.value.stderr
    assert "undefined_name is not defined" in e.value.stderr


def test_compile_prints_nothing(tc, tmp_path, capfd):
    """--json output must stay parseable: Triton's warnings and C++ diagnostics do not reach stdout."""
    tc.compile_triton(f"{SOFTMAX}:softmax_kernel", arch="sm_90", workdir=tmp_path, num_warps=2)
    p = write_kernel(tmp_path, """
        @triton.jit
        def k(x_ptr, BLOCK: tl.constexpr):
            tl.store(x_ptr + tl.arange(0, BLOCK), tl.zeros((3,), tl.float32))
    """)
    with pytest.raises(CompileError):
        tc.compile_triton(f"{p}:k", arch="gfx942", signature="x_ptr:*fp32", constexprs={"BLOCK": 4})
    captured = capfd.readouterr()
    assert captured.out == ""
    assert captured.err == ""


def test_driver_is_left_as_it_was(tc, tmp_path):
    from triton.runtime import driver

    before = dict(vars(driver))
    tc.compile_triton(f"{SOFTMAX}:softmax_kernel", arch="gfx950", workdir=tmp_path)
    assert {k: id(v) for k, v in vars(driver).items()} == {k: id(v) for k, v in before.items()}


def test_autotuned_kernel_takes_the_first_config(tc, tmp_path):
    p = write_kernel(tmp_path, """
        @triton.autotune(configs=[triton.Config({"BLOCK": 64}, num_warps=2), triton.Config({"BLOCK": 256}, num_warps=8)],
                         key=["n"])
        @triton.jit
        def tuned(x_ptr, n, BLOCK: tl.constexpr):
            offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
            tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) + 1, mask=offs < n)
    """)
    b = tc.compile_triton(f"{p}:tuned", arch="gfx942", workdir=tmp_path / "out", signature="x_ptr:*fp32,n:i32")
    assert b.constexprs == {"BLOCK": 64} and b.num_warps == 2 and b.block_size == 128
    assert any("autotune" in n for n in b.notes)
    b = tc.compile_triton(f"{p}:tuned", arch="gfx942", workdir=tmp_path / "out2", signature="x_ptr:*fp32,n:i32",
                          constexprs={"BLOCK": 512}, num_warps=4)
    assert b.constexprs == {"BLOCK": 512} and b.num_warps == 4


# ---------------------------------------------------------------- against a real launch


@pytest.mark.gpu
def test_offline_build_matches_a_real_launch(tc, tmp_path):
    """On an NVIDIA GPU: the offline build for the local arch is the kernel a launch compiles, and ptxas's
    register count is the one the driver reports for it."""
    torch = require_module("torch")
    import importlib.util

    spec = importlib.util.spec_from_file_location("softmax_triton_launch", SOFTMAX)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    major, minor = torch.cuda.get_device_capability()
    build = tc.compile_triton(f"{SOFTMAX}:softmax_kernel", arch=f"sm_{major}{minor}", workdir=tmp_path)
    # n_rows = 100: not a multiple of 16, as the declaration says (i32 without :16)
    x = torch.randn(100, 256, device="cuda")
    out = torch.empty_like(x)
    kernel = mod.softmax_kernel[(100,)](out, x, x.stride(0), out.stride(0), 100, 256, BLOCK_SIZE=256, num_warps=4)
    torch.cuda.synchronize()
    torch.testing.assert_close(out, torch.softmax(x, dim=1))
    assert kernel.asm["ptx"] == build.asm["ptx"]
    assert kernel.asm["cubin"] == build.asm["cubin"]
    used = int(re.search(r"Used (\d+) registers", build.ptxas_report).group(1))
    assert kernel.n_regs == used
