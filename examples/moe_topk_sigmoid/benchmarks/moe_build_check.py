"""Compile the MoE CUDA extensions' kernels for sm_90 without a GPU: each translation unit of the extensions (one
per dtype, or per dtype and router: their _sources, the launch code and every kernel instantiation it binds) to an
object with nvcc -c and the flags of PyTorch's extension build, as the GPU machine's first call would. A compile error or a
compiler crash shows here, before a device call is spent on it. The binding module (module.cpp, host C++ only)
is not compiled.

    python examples/moe_topk_sigmoid/benchmarks/moe_build_check.py [VARIANT_DIR ...] [--dtype bf16 ...] [--jobs 2] [--arch sm_90]

With no folder, the tree's kernels; otherwise each folder (files replacing files of
examples/moe_topk_sigmoid/kernels/, as for moe_variants.py) laid over a copy of them. Exits 1 naming each
translation unit that failed, with the end of nvcc's output.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import sysconfig
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path[:0] = [str(ROOT / "src"), str(Path(__file__).resolve().parent)]

from kernelpilot.errors import KernelpilotError  # noqa: E402
from moe_large import load_kernels  # noqa: E402
from moe_variants import KERNELS, kernel_trees  # noqa: E402

DTYPES = ("f32", "f16", "bf16")
# Generated when PyTorch is built with CUDA; CPU wheels ship the other c10/cuda headers without it. It holds
# build options only, so an empty one serves a compile check.
CUDA_MACROS = Path("c10") / "cuda" / "impl" / "cuda_cmake_macros.h"


# The extensions of the kernels folder: the sigmoid kernels' (topk_sigmoid_cuda.py, its units named by dtype) and
# every router's (routing_cuda.py, "router." and the dtype and router: "router.bf16_plain").
EXTENSIONS = {"": "topk_sigmoid_cuda.py", "router.": "routing_cuda.py"}


def translation_units(kernels: Path, work: Path) -> tuple[dict[str, Path], tuple[str, ...]]:
    """The extensions' sources for the kernels in `kernels`, written under `work` (unit name -> its .cu file:
    "bf16", "router.bf16", ...), and the nvcc options the extensions add to PyTorch's."""
    units, flags = {}, ()
    for prefix, file in EXTENSIONS.items():
        if not (kernels / file).is_file():
            continue
        module = load_kernels(f"check_{abs(hash(str(kernels)))}_{prefix or 'sigmoid'}", kernels, file)
        before = os.environ.get("TORCH_EXTENSIONS_DIR")
        os.environ["TORCH_EXTENSIONS_DIR"] = str(work)
        try:
            _, files = module._sources()
        finally:
            if before is None:
                del os.environ["TORCH_EXTENSIONS_DIR"]
            else:
                os.environ["TORCH_EXTENSIONS_DIR"] = before
        units.update({prefix + f.stem: f for f in files if f.suffix == ".cu"})
        flags = tuple(module.CUDA_FLAGS)
    return units, flags


def include_dirs(work: Path) -> list[Path]:
    """PyTorch's and Python's headers, and an empty cuda_cmake_macros.h where PyTorch lacks one."""
    from torch.utils.cpp_extension import include_paths

    dirs = [Path(p) for p in include_paths()] + [Path(sysconfig.get_paths()["include"])]
    if not any((d / CUDA_MACROS).is_file() for d in dirs):
        stub = work / "stub_include"
        (stub / CUDA_MACROS).parent.mkdir(parents=True, exist_ok=True)
        (stub / CUDA_MACROS).write_text("#pragma once\n")
        dirs.append(stub)
    return dirs


def nvcc_command(nvcc: Path, unit: Path, kernels: Path, includes: list[Path], arch: str, out: Path,
                 flags: tuple[str, ...]) -> list[str]:
    """nvcc -c of one translation unit with the flags PyTorch's extension build gives CUDA sources and the
    extension's own (`flags`)."""
    import torch
    from torch.utils.cpp_extension import COMMON_NVCC_FLAGS

    cc = arch.removeprefix("sm_")
    return [str(nvcc), "-c", str(unit), "-o", str(out), "-std=c++17", *flags, f"-I{kernels}",
            *[a for d in includes for a in ("-isystem", str(d))],
            "-DTORCH_EXTENSION_NAME=moe_build_check", "-DTORCH_API_INCLUDE_EXTENSION_H",
            f"-D_GLIBCXX_USE_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}", *COMMON_NVCC_FLAGS,
            "--compiler-options", "-fPIC", f"-gencode=arch=compute_{cc},code=sm_{cc}"]


def check(kernels: Path, dtypes: list[str], arch: str = "sm_90", jobs: int = 2) -> dict[str, tuple[int, str]]:
    """Each extension's translation units of each dtype compiled: unit ("bf16", "router.bf16_plain") -> (nvcc's exit
    code, the end of its output)."""
    from kernelpilot.toolchain.find import find_tool

    nvcc = find_tool("nvcc")
    with tempfile.TemporaryDirectory(prefix="moe_build_check_") as tmp:
        work = Path(tmp)
        units, flags = translation_units(kernels, work)
        includes = include_dirs(work)

        def compile_one(name: str) -> tuple[int, str]:
            cmd = nvcc_command(nvcc, units[name], kernels, includes, arch, work / f"{name}.o", flags)
            proc = subprocess.run(cmd, capture_output=True, text=True)
            lines = [ln for ln in (proc.stdout + proc.stderr).splitlines() if "warning" not in ln]
            tail = "\n".join(lines[-12:])
            if proc.returncode < 0 or proc.returncode > 128:   # killed by a signal: the compiler crashed
                tail = f"nvcc crashed (exit {proc.returncode})\n{tail}"
            return proc.returncode, tail

        names = [u for u in units if any(u == p + d or u.startswith(f"{p}{d}_") for p in EXTENSIONS for d in dtypes)]
        with ThreadPoolExecutor(max(1, jobs)) as pool:
            return dict(zip(names, pool.map(compile_one, names)))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("variants", type=Path, nargs="*", help="folders of files replacing files of " + str(KERNELS))
    ap.add_argument("--dtype", action="append", choices=DTYPES, help="default: all three")
    ap.add_argument("--arch", default="sm_90")
    ap.add_argument("--jobs", type=int, default=2, help="translation units compiled at once (each takes minutes)")
    args = ap.parse_args()
    dtypes = args.dtype or list(DTYPES)
    failed = []
    with tempfile.TemporaryDirectory(prefix="moe_build_trees_") as tmp:
        for name, kernels in kernel_trees(args.variants, Path(tmp)).items():
            try:
                results = check(kernels, dtypes, args.arch, args.jobs)
            except KernelpilotError as e:   # no nvcc
                sys.exit(str(e))
            for dtype, (code, tail) in results.items():
                print(f"{name} {dtype}: {'ok' if code == 0 else 'FAILED'}", flush=True)
                if code != 0:
                    failed.append(f"{name} {dtype}")
                    print(tail)
    if failed:
        sys.exit(f"did not compile: {', '.join(failed)}")


if __name__ == "__main__":
    main()
