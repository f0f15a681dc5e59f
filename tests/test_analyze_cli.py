"""`kpilot isa analyze` and `kpilot isa diff` end to end, with the real compilers: the cases the tool
was built for, and every kind of bad input (one clear message, non-zero exit, no traceback)."""

from __future__ import annotations

import json
import os
import site
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import EXAMPLES, ROOT, require_module, require_tool

K = EXAMPLES / "kernels"


def kpilot(*args: str, env: dict | None = None, check: bool = True) -> subprocess.CompletedProcess:
    e = dict(os.environ)
    e.pop("KPILOT_DEBUG", None)
    if env:
        e.update(env)
    p = subprocess.run([sys.executable, "-m", "kernelpilot", *args], capture_output=True, text=True, env=e,
                       timeout=600)
    if check and p.returncode != 0:
        raise AssertionError(f"kpilot {' '.join(args)} exited {p.returncode}:\n{p.stderr}")
    return p


def analyze_json(*args: str) -> dict:
    out = json.loads(kpilot("isa", "analyze", *args, "--json").stdout)
    assert out["schema"] == "kernelpilot.isa/1"
    return out


def finding_ids(kernel: dict) -> set[str]:
    return {f["id"] for f in kernel["findings"]}


def assert_clean_failure(p: subprocess.CompletedProcess, *needles: str) -> None:
    assert p.returncode != 0
    assert "Traceback" not in p.stderr and "Traceback" not in p.stdout
    first = p.stderr.strip().splitlines()[0]
    assert first.startswith("error: "), p.stderr
    for n in needles:
        assert n in p.stderr, (n, p.stderr)


# ------------------------------------------------------------------ the seed's case, on gfx942


def test_hip_bpermute_gets_the_dpp_finding_and_dpp_variant_does_not():
    require_tool("clang++")
    bp = analyze_json(str(K / "wave_argmax_bpermute.hip"), "--arch", "gfx942")["kernels"][0]
    dpp = analyze_json(str(K / "wave_argmax_dpp.hip"), "--arch", "gfx942")["kernels"][0]
    assert "amd.lds-crosslane" in finding_ids(bp)
    f = next(f for f in bp["findings"] if f["id"] == "amd.lds-crosslane")
    assert f["evidence"]["ds_bpermute"] == bp["opcodes"]["ds_bpermute_b32"] > 0
    assert f["evidence"]["at"] and "DPP" in f["suggestion"]
    assert "amd.lds-crosslane" not in finding_ids(dpp)
    assert "amd.readlane-chain" not in finding_ids(dpp)
    assert dpp["families"].get("crosslane.ds_bpermute", 0) == 0
    assert dpp["families"]["crosslane.dpp.row_bcast:15"] >= 1
    assert dpp["families"]["crosslane.dpp.row_bcast:31"] >= 1
    assert dpp["families"]["crosslane.dpp.row_shr"] >= 1
    assert dpp["families"]["crosslane.readlane"] == 1
    # Occupancy beside the compiler's own number, and they agree here.
    assert bp["occupancy"]["compiler"] == bp["occupancy"]["active"]


def test_readlane_chain_found_with_lanes():
    require_tool("clang++")
    k = analyze_json(str(K / "wave_argmax_readlane.hip"), "--arch", "gfx942")["kernels"][0]
    f = next(f for f in k["findings"] if f["id"] == "amd.readlane-chain")
    assert f["evidence"]["chain_length"] >= 4
    assert {15, 31, 47, 63} <= set(f["evidence"]["lanes"])
    assert "row_bcast" in f["suggestion"]


def test_isa_diff_shows_lds_ops_gone():
    require_tool("clang++")
    a, b = str(K / "wave_argmax_bpermute.hip"), str(K / "wave_argmax_dpp.hip")
    d = json.loads(kpilot("isa", "diff", a, b, "--arch", "gfx942", "--json").stdout)
    assert d["schema"] == "kernelpilot.isa-diff/1"
    kd = d["kernels"][0]
    assert kd["opcodes"]["ds_bpermute_b32"]["a"] > 0 and kd["opcodes"]["ds_bpermute_b32"]["b"] == 0
    assert kd["families"]["shared.crosslane"]["b"] == 0
    assert {"id": "amd.lds-crosslane"}.items() <= kd["findings"]["resolved"][0].items()
    # every resource, changed or not, and what the stall estimate counts
    assert {"vgpr", "sgpr", "lds_bytes", "scratch_bytes"} <= set(kd["resources"])
    assert kd["resources"]["lds_bytes"] == {"a": 0, "b": 0} and "lds_bytes" not in kd["resources_changed"]
    assert "vgpr" in kd["resources_changed"] and "memory latency not modelled" in kd["stall_method"]
    text = kpilot("isa", "diff", a, b, "--arch", "gfx942").stdout
    assert "ds_bpermute_b32: 12 -> 0" in text or "ds_bpermute_b32:" in text
    assert "resolved  amd.lds-crosslane" in text
    assert "unchanged: " in text and "lds_bytes 0" in text and "(what it counts: " in text


def test_readlane_diff_shows_readlanes_reduced():
    require_tool("clang++")
    a, b = str(K / "wave_argmax_readlane.hip"), str(K / "wave_argmax_dpp.hip")
    d = json.loads(kpilot("isa", "diff", a, b, "--arch", "gfx942", "--json").stdout)["kernels"][0]
    rl = d["opcodes"]["v_readlane_b32"]
    assert rl["a"] >= 4 and rl["b"] == 1
    assert any(f["id"] == "amd.readlane-chain" for f in d["findings"]["resolved"])


# ------------------------------------------------------------------ Triton on both vendors


@pytest.mark.parametrize("arch,expect", [("sm_90", "crosslane.shfl"), ("gfx942", "crosslane.dpp")])
def test_one_triton_file_for_nvidia_and_amd(arch, expect):
    require_module("triton")
    k = analyze_json(f"{K / 'softmax_triton.py'}:softmax_kernel", "--arch", arch)["kernels"][0]
    assert k["arch"] == arch and k["families"][expect] > 0
    assert k["occupancy"]["block_size_source"].startswith("Triton num_warps")
    assert k["instruction_count"] > 20


def test_triton_matmul_uses_wgmma_on_sm90_and_mfma_on_gfx942():
    require_module("triton")
    spec = f"{K / 'matmul_triton.py'}:matmul_kernel"
    nv = analyze_json(spec, "--arch", "sm_90")["kernels"][0]
    amd = analyze_json(spec, "--arch", "gfx942")["kernels"][0]
    assert nv["families"].get("tensor.hgmma", 0) > 0
    assert "nvidia.hmma-on-hopper" not in finding_ids(nv)
    assert amd["families"].get("tensor.mfma", 0) > 0
    # Triton's dynamic shared memory is part of the occupancy computation.
    assert nv["occupancy"]["limiter"] in ("registers", "shared_memory", "warps")


def test_triton_lds_allocated_at_launch_counts_in_amd_occupancy():
    """Triton on AMD allocates the matmul's LDS at launch (the code object's group segment says 0 bytes); the
    report carries Triton's amount and the occupancy counts it: 64 KiB of LDS per CU on gfx942 holds
    65536 // shared workgroups of num_warps waves, over 4 SIMDs."""
    require_module("triton")
    from kernelpilot.toolchain.triton_compile import compile_triton

    spec = f"{K / 'matmul_triton.py'}:matmul_kernel"
    shared = int(compile_triton(spec, arch="gfx942").metadata["shared"])
    amd = analyze_json(spec, "--arch", "gfx942")["kernels"][0]
    waves_per_group = amd["occupancy"]["block_size"] // 64
    assert shared > 0 and amd["resources"]["lds_bytes"] == 0
    assert amd["resources"]["dynamic_shared_bytes"] == shared
    assert amd["occupancy"]["limits"]["lds"] == min(8, 65536 // shared * waves_per_group // 4)


# ------------------------------------------------------------------ NVIDIA findings and resources


def test_spills_equal_ptxas_report_and_are_found():
    nvcc = require_tool("nvcc")
    k = analyze_json(str(K / "spill.cu"), "--arch", "sm_90", "--flag=-maxrregcount=32")["kernels"][0]
    r = k["resources"]
    # The compiler's own report for the same build:
    p = subprocess.run([str(nvcc), "-cubin", "-arch=sm_90", "-O3", "-lineinfo", "-Xptxas", "-v", "-maxrregcount=32",
                        "-o", os.devnull, str(K / "spill.cu")], capture_output=True, text=True)
    report = p.stderr
    assert f"{r['spill_store_bytes']} bytes spill stores" in report
    assert f"{r['spill_load_bytes']} bytes spill loads" in report
    assert f"Used {r['registers']} registers" in report
    assert r["spill_store_bytes"] > 0 and r["registers"] == 32
    f = next(f for f in k["findings"] if f["id"] == "nvidia.spills")
    assert f["severity"] == "high" and f["evidence"]["stl"] > 0


def test_hmma_on_hopper_and_register_limited_occupancy():
    require_tool("nvcc")
    k = analyze_json(str(K / "hmma_wmma.cu"), "--arch", "sm_90")["kernels"][0]
    assert "nvidia.hmma-on-hopper" in finding_ids(k)
    k = analyze_json(str(K / "reg_heavy.cu"), "--arch", "sm_90")["kernels"][0]
    f = next(f for f in k["findings"] if f["id"] == "occupancy.registers")
    assert f["evidence"]["registers"] == k["resources"]["registers"]
    assert "registers per thread or fewer" in f["suggestion"]


def test_shared_limited_occupancy_and_local_memory():
    require_tool("nvcc")
    k = analyze_json(str(K / "smem_heavy.cu"), "--arch", "sm_90")["kernels"][0]
    assert k["occupancy"]["limiter"] == "shared_memory"
    assert "occupancy.shared" in finding_ids(k)
    k = analyze_json(str(K / "local_array.cu"), "--arch", "sm_90")["kernels"][0]
    assert "nvidia.local-memory" in finding_ids(k)


def test_block_size_option_changes_occupancy():
    require_tool("nvcc")
    a = analyze_json(str(K / "smem_heavy.cu"), "--arch", "sm_90", "--block-size", "1024")["kernels"][0]
    assert a["occupancy"]["block_size"] == 1024 and a["occupancy"]["block_size_source"] == "--block-size"


def test_cubin_input_and_kernel_filter(tmp_path):
    require_tool("nvcc")
    keep = tmp_path / "keep"
    kpilot("isa", "analyze", str(K / "vector_add.cu"), "--arch", "sm_90", "--keep", str(keep))
    cubins = list(keep.rglob("*.cubin"))
    assert cubins
    k = analyze_json(str(cubins[0]))["kernels"]
    assert k and k[0]["arch"] == "sm_90" and k[0]["resources"]["registers"] > 0
    p = kpilot("isa", "analyze", str(cubins[0]), "--kernel", "no_such_kernel", check=False)
    assert_clean_failure(p, "no kernel named")


def test_human_report_lists_findings():
    require_tool("clang++")
    out = kpilot("isa", "analyze", str(K / "wave_argmax_bpermute.hip"), "--arch", "gfx942").stdout
    assert "[high] amd.lds-crosslane" in out and "suggestion:" in out and "occupancy" in out


def test_python_api_returns_models():
    require_tool("clang++")
    from kernelpilot.isa import KernelReport, analyze

    reps = analyze(K / "wave_argmax_dpp.hip", arch="gfx942")
    assert isinstance(reps[0], KernelReport) and reps[0].isa is not None
    assert reps[0].to_json()["vendor"] == "amd"


# ------------------------------------------------------------------ bad input


def test_syntax_error_prints_compiler_diagnostics(tmp_path):
    require_tool("nvcc")
    src = tmp_path / "broken.cu"
    src.write_text("__global__ void k(float* x) { x[0] = undefined_name + ; }\n")
    p = kpilot("isa", "analyze", str(src), "--arch", "sm_90", check=False)
    assert_clean_failure(p, "could not compile", "broken.cu")
    assert "error" in p.stderr.splitlines()[1].lower() or "undefined_name" in p.stderr


def test_hip_syntax_error(tmp_path):
    require_tool("clang++")
    src = tmp_path / "broken.hip"
    src.write_text('#include <hip/hip_runtime.h>\n__global__ void k(float* x) { x[0] = 1.0f }\n')
    p = kpilot("isa", "analyze", str(src), "--arch", "gfx942", check=False)
    assert_clean_failure(p, "could not compile", "expected ';'")


def test_triton_error(tmp_path):
    require_module("triton")
    src = tmp_path / "bad_triton.py"
    src.write_text(
        "import triton\nimport triton.language as tl\n\n@triton.jit\ndef k(x_ptr, BLOCK: tl.constexpr):\n"
        "    tl.store(x_ptr + tl.arange(0, BLOCK), tl.no_such_function(1))\n"
    )
    p = kpilot("isa", "analyze", f"{src}:k", "--arch", "sm_90", "--signature", "x_ptr:*fp32", "-D", "BLOCK=64",
               check=False)
    assert_clean_failure(p, "no_such_function")


def test_unknown_arch_lists_known_ones():
    p = kpilot("isa", "analyze", str(K / "vector_add.cu"), "--arch", "sm_999", check=False)
    assert_clean_failure(p, "unknown arch 'sm_999'", "sm_90", "gfx942")


def test_vendor_mismatch():
    p = kpilot("isa", "analyze", str(K / "vector_add.cu"), "--arch", "gfx942", check=False)
    assert_clean_failure(p, "--lang hip")


def test_missing_compiler_names_the_package(tmp_path):
    """Nothing on PATH and no CUDA toolkit: without PyPI's nvcc (the cuda extra) the error names it; with it,
    nvcc is found and the missing piece is its host compiler, g++."""
    env = {"PATH": str(tmp_path), "CUDA_HOME": str(tmp_path / "nocuda"), "ROCM_PATH": str(tmp_path / "norocm")}
    p = kpilot("isa", "analyze", str(K / "vector_add.cu"), "--arch", "sm_90", env=env, check=False)
    pypi_nvcc = any((Path(d) / "nvidia" / "cu13" / "bin" / "nvcc").is_file() for d in site.getsitepackages())
    if pypi_nvcc:
        assert_clean_failure(p, "g++ (nvcc's host compiler) not found", "apt-get install g++")
    else:
        assert_clean_failure(p, "nvcc not found", "kernelpilot[cuda]", "CUDA toolkit")
    p = kpilot("isa", "analyze", str(K / "wave_argmax_dpp.hip"), "--arch", "gfx942", env=env, check=False)
    assert_clean_failure(p, "not found", "clang-19")


def test_corrupted_binaries(tmp_path):
    require_tool("cuobjdump")
    bad = tmp_path / "junk.cubin"
    bad.write_bytes(b"\x7fELF" + os.urandom(200))
    p = kpilot("isa", "analyze", str(bad), check=False)
    assert_clean_failure(p, "not a CUDA binary")
    text = tmp_path / "notes.hsaco"
    text.write_text("this is a text file\n")
    p = kpilot("isa", "analyze", str(text), check=False)
    assert_clean_failure(p, "not an AMDGPU code object")


def test_missing_file_and_unknown_kind(tmp_path):
    p = kpilot("isa", "analyze", str(tmp_path / "nope.cu"), "--arch", "sm_90", check=False)
    assert_clean_failure(p, "no such file")
    odd = tmp_path / "kernel.txt"
    odd.write_text("hello")
    p = kpilot("isa", "analyze", str(odd), "--arch", "sm_90", check=False)
    assert_clean_failure(p, "cannot tell what this is")


def test_source_needs_arch():
    p = kpilot("isa", "analyze", str(K / "vector_add.cu"), check=False)
    assert_clean_failure(p, "--arch is required")


# ------------------------------------------------------------------ every input kind gives the same kernel


def test_built_artifacts_analyze_like_their_source(tmp_path):
    """Triton's kept outputs (.ptx, .cubin for sm_90; .s, .hsaco for gfx942) analyze to the same kernel."""
    require_module("triton")
    require_tool("cuobjdump")
    require_tool("llvm-objdump")
    spec = f"{K / 'softmax_triton.py'}:softmax_kernel"
    for arch, kinds in (("sm_90", ("ptx", "cubin")), ("gfx942", ("s", "hsaco"))):
        keep = tmp_path / arch
        src = analyze_json(spec, "--arch", arch, "--keep", str(keep))["kernels"][0]
        for kind in kinds:
            files = sorted(keep.rglob(f"*.{kind}"))
            assert files, (arch, kind, sorted(p.name for p in keep.rglob("*")))
            args = [str(files[0])] + (["--arch", arch] if kind == "ptx" else [])
            k = analyze_json(*args)["kernels"][0]
            assert k["arch"] == arch
            assert k["instruction_count"] == src["instruction_count"], (arch, kind)
            assert k["families"] == src["families"], (arch, kind)
            if arch == "gfx942":
                assert {x: k["resources"][x] for x in ("vgpr", "sgpr", "lds_bytes", "scratch_bytes")} == \
                       {x: src["resources"][x] for x in ("vgpr", "sgpr", "lds_bytes", "scratch_bytes")}
            else:
                assert k["resources"]["registers"] == src["resources"]["registers"]
            if kind == "hsaco":
                # the code object says what it was built for: another --arch is refused, not read as that arch
                p = kpilot("isa", "analyze", str(files[0]), "--arch", "gfx90a", check=False)
                assert p.returncode == 2 and p.stderr.strip().splitlines() == [
                    f"error: {files[0]} was built for gfx942, not gfx90a: its machine code is gfx942's. Give --arch "
                    "gfx942, or leave --arch out to read it from the file."]


def test_lang_hip_for_other_suffixes(tmp_path):
    require_tool("clang++")
    src = tmp_path / "argmax.cpp"
    src.write_text((K / "wave_argmax_bpermute.hip").read_text())
    k = analyze_json(str(src), "--arch", "gfx942", "--lang", "hip")["kernels"][0]
    assert "amd.lds-crosslane" in finding_ids(k)


def test_errors_under_json_are_json_on_stdout(tmp_path):
    bad_toml = tmp_path / "broken"
    bad_toml.mkdir()
    (bad_toml / "problem.toml").write_text('name = "broken\n')
    for args, code, kind, text in (
            (["isa", "analyze", str(tmp_path / "missing.cu"), "--arch", "sm_90", "--json"], 2, "UsageError",
             "no such file"),
            (["isa", "analyze", "--no-such-option", "--json"], 2, "UsageError", "No such option"),
            (["check", str(bad_toml), "-c", str(tmp_path / "missing.py"), "--json"], 1, None, "")):
        p = kpilot(*args, check=False)
        assert p.returncode == code, p.stderr
        err = json.loads(p.stdout)["error"]
        assert set(err) == {"type", "message", "hint", "details", "exit_code"} and err["exit_code"] == code
        assert (kind is None or err["type"] == kind) and text in err["message"]
        lines = p.stderr.strip().splitlines()
        assert lines[0] == f"error: {err['message']}" + (f" {err['hint']}" if err["hint"] else "")
        assert "Traceback" not in p.stderr
    # without --json: the line on stderr, nothing on stdout
    p = kpilot("isa", "analyze", str(tmp_path / "missing.cu"), "--arch", "sm_90", check=False)
    assert p.returncode == 2 and p.stdout == "" and p.stderr.startswith("error: ")


def test_a_default_block_size_is_said():
    require_tool("nvcc")
    (k,) = analyze_json(str(K / "vector_add.cu"), "--arch", "sm_90")["kernels"]
    assert any("a default (the kernel has no launch bounds): pass --block-size" in n for n in k["notes"])
    (k,) = analyze_json(str(K / "vector_add.cu"), "--arch", "sm_90", "--block-size", "128")["kernels"]
    assert not any("pass --block-size" in n for n in k["notes"]) and k["occupancy"]["block_size"] == 128


def test_several_sources_in_one_call():
    require_tool("clang++")
    a, b = str(K / "wave_argmax_dpp.hip"), str(K / "wave_argmax_bpermute.hip")
    out = analyze_json(a, b, "--arch", "gfx942")
    assert [(k["name"], k["source"]) for k in out["kernels"]] == [("wave_argmax_dpp", a), ("wave_argmax_bpermute", b)]
    text = kpilot("isa", "analyze", a, b, "--arch", "gfx942").stdout
    assert "wave_argmax_dpp" in text and "wave_argmax_bpermute" in text


def test_compiler_warnings_are_kept_with_the_analysis(tmp_path):
    require_tool("clang++")
    require_tool("nvcc")
    hip = tmp_path / "conv.hip"
    hip.write_text("#include <hip/hip_runtime.h>\n"
                   "extern \"C\" __global__ void k(float* x) {\n"
                   "    float v = x[threadIdx.x];\n"
                   "    int i = __builtin_amdgcn_update_dpp(0, v, 0x111, 0xf, 0xf, false);   // takes ints\n"
                   "    x[threadIdx.x] = i;\n}\n")
    (k,) = analyze_json(str(hip), "--arch", "gfx942", "--flag=-Wconversion")["kernels"]
    assert any(n.startswith(f"compiler warning: {hip}:4:") and "floating-point number into integer" in n
               for n in k["notes"]), k["notes"]
    cu = tmp_path / "unused.cu"
    cu.write_text("__global__ void k(float* x) { int unused; x[threadIdx.x] = 1.0f; }\n")
    (k,) = analyze_json(str(cu), "--arch", "sm_90")["kernels"]
    assert any("compiler warning:" in n and '"unused" was declared but never referenced' in n for n in k["notes"])
    # kernelpilot's own HIP header compiles warning-free, so -Werror is the user's code alone
    kpilot("isa", "analyze", str(K / "wave_argmax_dpp.hip"), "--arch", "gfx942", "--flag=-Werror", "--flag=-Wall")


def test_the_dpp_suggestion_fits_the_operation(tmp_path):
    require_tool("clang++")
    src = tmp_path / "rowsum.hip"
    src.write_text("#include <hip/hip_runtime.h>\n"
                   "extern \"C\" __global__ void __launch_bounds__(64) rowsum(const float* x, float* y) {\n"
                   "    float v = x[blockIdx.x * 64 + threadIdx.x];\n"
                   "    for (int o = 32; o > 0; o >>= 1) v += __shfl_xor(v, o);\n"
                   "    if (threadIdx.x == 0) y[blockIdx.x] = v;\n}\n")
    (k,) = analyze_json(str(src), "--arch", "gfx942")["kernels"]
    f = next(f for f in k["findings"] if f["id"] == "amd.lds-crosslane")
    assert f["evidence"]["combines_with"] == "v_add_f32"
    assert "v_add_f32_dpp" in f["suggestion"] and "v_max_f32_dpp" not in f["suggestion"]
    assert "row_bcast:31 with row_mask:0xc" in f["suggestion"] and "counted once" in f["suggestion"]
    bp = analyze_json(str(K / "wave_argmax_bpermute.hip"), "--arch", "gfx942")["kernels"][0]
    f = next(f for f in bp["findings"] if f["id"] == "amd.lds-crosslane")
    assert f["evidence"]["combines_with"] == "select" and "v_cmp/v_cndmask" in f["suggestion"]


@pytest.mark.parametrize("source, arch, tool", [("reg_heavy.cu", "sm_90", "nvcc"),
                                                ("wave_argmax_dpp.hip", "gfx942", "clang++")])
def test_occupancy_charts(tmp_path, source, arch, tool):
    """--plot DIR: each kernel's occupancy against its registers and its shared memory/LDS, as a PNG."""
    require_tool(tool)
    require_module("matplotlib")
    r = subprocess.run([sys.executable, "-m", "kernelpilot", "isa", "analyze", str(EXAMPLES / "kernels" / source),
                        "--arch", arch, "--plot", str(tmp_path), "-q"], capture_output=True, text=True, timeout=300,
                       env={**os.environ, "PYTHONPATH": str(ROOT / "src")})
    assert r.returncode == 0, r.stderr
    (png,) = tmp_path.glob(f"*-{arch}-occupancy.png")
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000 and str(png) in r.stderr
