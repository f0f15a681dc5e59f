"""How fast `kpilot isa analyze` is.

1. Analysis alone (compile and disassembly excluded) of kernels of 5,000+ instructions, for SASS and
   AMDGCN: parsing the disassembler's text plus the whole analysis. Target: under 1 s.
2. Compile plus analysis of every example kernel, as `kpilot isa analyze` runs it.

Writes benchmarks/results/isa_speed.json (latest) and appends to isa_speed.jsonl.
Run: python benchmarks/isa_speed.py   (or `make bench`)
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import best_of, write_results  # noqa: E402

from kernelpilot.errors import KernelpilotError  # noqa: E402
from kernelpilot.isa.analyze import analyze, analyze_kernel  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
K = ROOT / "examples" / "kernels"

BIG_CUDA = r"""
// A long straight-line kernel: N unrolled load-multiply-add steps (benchmark input only).
extern "C" __global__ void big_kernel(const float* __restrict__ x, float* __restrict__ y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    float a = 0.f, b = 1.f;
#pragma unroll
    for (int j = 0; j < STEPS; ++j) {
        float v = x[(i + j * 97) & (n - 1)];
        a = fmaf(a, v, b);
        b = b * v + (float)j;
    }
    y[i] = a + b;
}
"""

BIG_HIP = r"""
// A long straight-line kernel for gfx942 (benchmark input only).
extern "C" __global__ void big_kernel(const float* __restrict__ x, float* __restrict__ y, int n) {
    int i = __builtin_amdgcn_workgroup_id_x() * 256 + __builtin_amdgcn_workitem_id_x();
    float a = 0.f, b = 1.f;
#pragma unroll
    for (int j = 0; j < STEPS; ++j) {
        float v = x[(i + j * 97) & (n - 1)];
        a = __builtin_fmaf(a, v, b);
        b = b * v + (float)j;
    }
    y[i] = a + b;
}
"""


def big_nvidia(tmp: Path) -> dict:
    from kernelpilot.isa.ptxas import parse_ptxas_report
    from kernelpilot.isa.sass import parse_sass
    from kernelpilot.toolchain import nv_binary
    from kernelpilot.toolchain.nvcc import compile_cuda

    src = tmp / "big.cu"
    src.write_text(BIG_CUDA)
    t = time.perf_counter()
    build = compile_cuda(src, arch="sm_90", defines={"STEPS": "1600"}, workdir=tmp)
    compile_s = time.perf_counter() - t
    t = time.perf_counter()
    text = nv_binary.disassemble_sass(build.cubin_path)
    disasm_s = time.perf_counter() - t
    res = parse_ptxas_report(build.ptxas_report)

    def run():
        ks = parse_sass(text, source=str(src), arch="sm_90", resources=res)
        return [analyze_kernel(k) for k in ks]

    secs, reports = best_of(run)
    return {"vendor": "nvidia", "arch": "sm_90", "instructions": reports[0].instruction_count,
            "parse_and_analyze_s": round(secs, 4), "disassemble_s": round(disasm_s, 3),
            "compile_s": round(compile_s, 3), "sass_chars": len(text)}


def big_amd(tmp: Path) -> dict:
    from kernelpilot.isa.amdgcn import parse_amdgcn_asm
    from kernelpilot.toolchain.hip import compile_hip

    src = tmp / "big.hip"
    src.write_text(BIG_HIP)
    t = time.perf_counter()
    build = compile_hip(src, arch="gfx942", defines={"STEPS": "1600"}, workdir=tmp)
    compile_s = time.perf_counter() - t
    text = build.asm_text

    def run():
        ks = parse_amdgcn_asm(text, source=str(src), arch="gfx942")
        return [analyze_kernel(k) for k in ks]

    secs, reports = best_of(run)
    return {"vendor": "amd", "arch": "gfx942", "instructions": reports[0].instruction_count,
            "parse_and_analyze_s": round(secs, 4), "compile_s": round(compile_s, 3), "asm_chars": len(text)}


EXAMPLES = [
    ("vector_add.cu", "sm_90", {}),
    ("spill.cu", "sm_90", {"extra_flags": ["-maxrregcount=32"]}),
    ("hmma_wmma.cu", "sm_90", {}),
    ("reg_heavy.cu", "sm_90", {}),
    ("wave_argmax_bpermute.hip", "gfx942", {}),
    ("wave_argmax_dpp.hip", "gfx942", {}),
    ("softmax_triton.py:softmax_kernel", "sm_90", {}),
    ("softmax_triton.py:softmax_kernel", "gfx942", {}),
    ("matmul_triton.py:matmul_kernel", "sm_90", {}),
    ("matmul_triton.py:matmul_kernel", "gfx942", {}),
]


def examples() -> list[dict]:
    rows = []
    for name, arch, kw in EXAMPLES:
        t = time.perf_counter()
        try:
            reps = analyze(str(K / name), arch=arch, **kw)
        except KernelpilotError as e:
            rows.append({"example": name, "arch": arch, "error": str(e)})
            continue
        rows.append({"example": name, "arch": arch, "compile_and_analyze_s": round(time.perf_counter() - t, 3),
                     "instructions": sum(r.instruction_count for r in reps), "kernels": len(reps)})
    return rows


def main() -> None:
    import os

    # A fresh Triton cache so the example timings include Triton's compile, not a cache hit.
    os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp(prefix="kpilot-bench-triton-")
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        big = []
        for fn in (big_nvidia, big_amd):
            try:
                big.append(fn(tmp))
            except KernelpilotError as e:
                big.append({"bench": fn.__name__, "error": str(e)})
    rows = examples()
    target_ok = all(b.get("instructions", 0) >= 5000 and b.get("parse_and_analyze_s", 9) < 1.0 for b in big)
    path = write_results("isa_speed", {"large_kernels": big, "examples": rows,
                                       "target": "analysis of a 5,000+ instruction kernel under 1 s",
                                       "target_met": target_ok})
    for b in big:
        print(b)
    for r in rows:
        print(r)
    print(f"target met: {target_ok}; written to {path}")


if __name__ == "__main__":
    main()
