"""Every reader of outside input, fed mutated copies of real input (a seeded mutator: truncations, flipped and
deleted bytes, repeated chunks, huge and non-finite numbers, junk lines): each call returns, or raises one of
kernelpilot's typed errors, within a time bound. A traceback, a hang, or a truncated report or binary read as a
success is a defect. The mutations are the same on every run (fixed seeds), so a failure names its input."""

from __future__ import annotations

import json
import random
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest
from conftest import EXAMPLES, ROOT, require_module, require_tool

from kernelpilot.errors import KernelpilotError

DATA = ROOT / "tests" / "data"
FIXTURES = ROOT / "tests" / "fixtures"
JUNK = [b"inf", b"-inf", b"nan", b"1e999", b"-1", b"9" * 400, b"\x00\xff\xfe", "\u00e9\u2603".encode(), b"\"",
        b",,,,", b"\n" * 50, b"{", b"]]", b"0x" + b"f" * 40]


def mutations(data: bytes, n: int, seed: int) -> Iterator[tuple[str, bytes]]:
    """``n`` mutated copies of ``data``, each with a label saying what was done."""
    rng = random.Random(seed)
    kinds = ("truncate", "flip", "delete", "repeat", "junk", "number", "lines")
    for i in range(n):
        kind = kinds[i % len(kinds)]
        size = max(len(data), 1)
        at = rng.randrange(size)
        if kind == "truncate":
            yield f"truncate@{at}", data[:at]
        elif kind == "flip":
            b = bytearray(data)
            for _ in range(rng.randint(1, 16)):
                if b:
                    b[rng.randrange(len(b))] ^= 1 << rng.randrange(8)
            yield "flip", bytes(b)
        elif kind == "delete":
            span = rng.randint(1, max(1, size // 4))
            yield f"delete@{at}+{span}", data[:at] + data[at + span:]
        elif kind == "repeat":
            span = rng.randint(1, max(1, min(size // 2, 4096)))
            yield f"repeat@{at}+{span}", data[:at] + data[at:at + span] * rng.randint(2, 60) + data[at:]
        elif kind == "junk":
            junk = rng.choice(JUNK)
            yield f"junk@{at}:{junk[:12]!r}", data[:at] + junk + data[at:]
        elif kind == "number":
            digits = [j for j, c in enumerate(data) if 48 <= c <= 57]
            j = rng.choice(digits) if digits else at
            yield f"number@{j}", data[:j] + rng.choice([b"1e999", b"99999999999999999999", b"-7", b"nan"]) + data[j + 1:]
        else:
            lines = data.split(b"\n")
            rng.shuffle(lines)
            yield "lines-shuffled", b"\n".join(lines)


def survives(read: Callable[[bytes], Any], data: bytes, *, n: int, seed: int, bound_s: float) -> list[str]:
    """Feed ``read`` the mutations; fail on anything but a result or a KernelpilotError, or a call over
    ``bound_s``. Returns the labels that raised a typed error (for tests that need some to)."""
    typed = []
    for label, mutated in mutations(data, n, seed):
        t0 = time.perf_counter()
        try:
            read(mutated)
        except KernelpilotError:
            typed.append(label)
        except Exception as e:   # noqa: BLE001 - the defect this suite looks for
            pytest.fail(f"{label}: {type(e).__name__}: {e}")
        took = time.perf_counter() - t0
        assert took < bound_s, f"{label}: {took:.1f} s (bound {bound_s} s)"
    return typed


def _text(b: bytes) -> str:
    return b.decode("utf-8", "replace")


# ------------------------------------------------------------------ ISA: SASS, AMDGCN, ptxas, binaries


@pytest.mark.parametrize("name", ["branches.sm_90.nvdisasm.sass", "loop_reduce.sm_90.cuobjdump.sass",
                                  "vector_add.fatbin.cuobjdump.sass"])
def test_sass_text(name):
    from kernelpilot.isa.sass import parse_sass

    from kernelpilot.isa.lanes import trace_lanes

    def read(b: bytes) -> Any:
        return [trace_lanes(k).to_json() for k in parse_sass(_text(b), source=name, demangle_names=False)]

    survives(read, (DATA / "nvidia" / name).read_bytes(), n=200, seed=1, bound_s=5)


@pytest.mark.parametrize("name", ["spill.sm_90.ptxas.txt", "device_fn.sm_90.res_usage.txt"])
def test_ptxas_reports(name):
    from kernelpilot.isa.ptxas import parse_ptxas_report_full, parse_res_usage

    read = parse_res_usage if "res_usage" in name else parse_ptxas_report_full
    survives(lambda b: read(_text(b)), (DATA / "nvidia" / name).read_bytes(), n=200, seed=2, bound_s=5)


@pytest.fixture(scope="module")
def amd_build():
    """The AMDGCN assembly and code object of a real kernel, compiled here (Triton for gfx942, offline)."""
    require_module("triton")
    from kernelpilot.toolchain.triton_compile import compile_triton

    build = compile_triton(f"{EXAMPLES / 'kernels' / 'softmax_triton.py'}:softmax_kernel", arch="gfx942")
    asm = build.asm["amdgcn"]
    return (asm if isinstance(asm, bytes) else asm.encode()), build.asm["hsaco"]


def test_amdgcn_assembly(amd_build):
    from kernelpilot.isa.amdgcn import parse_amdgcn_asm

    from kernelpilot.isa.lanes import trace_lanes

    def read(b: bytes) -> Any:
        return [trace_lanes(k).to_json() for k in parse_amdgcn_asm(_text(b), source="k.s", arch="gfx942")]

    survives(read, amd_build[0], n=200, seed=3, bound_s=5)


def test_amdgcn_assembly_grown_large_stays_fast(amd_build):
    """A body repeated into tens of thousands of lines: the parser and the analysis stay near-linear."""
    from kernelpilot.isa.analyze import analyze_kernel
    from kernelpilot.isa.amdgcn import parse_amdgcn_asm

    text = _text(amd_build[0])
    start, end = text.index("s_load"), text.index("s_endpgm")
    body = text[start:end]
    grown = text[:start] + body * 400 + text[start:]
    t0 = time.perf_counter()
    (kernel,) = parse_amdgcn_asm(grown, source="k.s", arch="gfx942")
    analyze_kernel(kernel)
    assert len(kernel.instructions) > 20_000 and time.perf_counter() - t0 < 30


def _analyze_file(tmp_path: Path, suffix: str, arch: str) -> Callable[[bytes], Any]:
    from kernelpilot.isa.analyze import analyze

    def read(b: bytes) -> Any:
        p = tmp_path / f"mutated{suffix}"
        p.write_bytes(b)
        return analyze(p, arch=arch)

    return read


def test_amd_code_objects(amd_build, tmp_path):
    require_tool("llvm-objdump")
    read = _analyze_file(tmp_path, ".hsaco", "gfx942")
    survives(read, amd_build[1], n=40, seed=4, bound_s=30)
    with pytest.raises(KernelpilotError):                 # half a code object is never read as a kernel
        read(amd_build[1][: len(amd_build[1]) // 2])


def test_cubins(tmp_path):
    require_tool("nvcc")
    from kernelpilot.isa.analyze import analyze

    keep = tmp_path / "keep"
    analyze(EXAMPLES / "kernels" / "vector_add.cu", arch="sm_90", keep=keep)
    cubin = next(keep.rglob("*.cubin")).read_bytes()
    read = _analyze_file(tmp_path, ".cubin", "sm_90")
    survives(read, cubin, n=40, seed=5, bound_s=30)
    with pytest.raises(KernelpilotError):
        read(cubin[: len(cubin) // 2])


# ------------------------------------------------------------------ profiles: ncu, rocprofv3, kernelpilot JSON


def test_ncu_raw_and_details_pages():
    from kernelpilot.profile.load import from_ncu_pages

    raw = (FIXTURES / "ncu_profile" / "cuda_registers.raw.csv").read_bytes()
    details = (FIXTURES / "ncu_profile" / "cuda_registers.details.txt").read_text()
    survives(lambda b: from_ncu_pages(_text(b), details, source="raw.csv"), raw, n=200, seed=6, bound_s=10)
    survives(lambda b: from_ncu_pages(raw.decode(), _text(b), source="raw.csv"), details.encode(), n=200, seed=7,
             bound_s=10)


def test_ncu_reports(tmp_path):
    require_module("ncu_report")
    from kernelpilot.profile.load import load_profile

    rep = (FIXTURES / "ncu_source" / "cuda_registers.ncu-rep").read_bytes()

    def read(b: bytes) -> Any:
        p = tmp_path / "mutated.ncu-rep"
        p.write_bytes(b)
        prof = load_profile(p)
        assert prof.kernels, "a report read as a success has launches"
        return prof

    survives(read, rep, n=40, seed=8, bound_s=60)
    with pytest.raises(KernelpilotError):
        read(rep[: len(rep) // 2])


def test_rocprofv3_output(tmp_path):
    from kernelpilot.profile.rocprof import read_rocprof

    src = DATA / "rocprofv3"
    for name in ("48213_kernel_trace.csv", "48213_counter_collection.csv", "48213_agent_info.csv"):
        def read(b: bytes, name=name) -> Any:
            d = tmp_path / "out"
            shutil.rmtree(d, ignore_errors=True)
            shutil.copytree(src, d)
            (d / name).write_bytes(b)
            return read_rocprof(d)

        survives(read, (src / name).read_bytes(), n=80, seed=9, bound_s=10)


def test_profile_json_for_diff(tmp_path):
    from kernelpilot.profile.diff import diff_profiles, load_either
    from kernelpilot.profile.load import from_ncu_pages

    prof = from_ncu_pages((FIXTURES / "ncu_profile" / "cuda_registers.raw.csv").read_text(), None,
                          source="raw.csv").to_json()
    good = json.dumps(prof).encode()

    def read(b: bytes) -> Any:
        p = tmp_path / "p.json"
        p.write_bytes(b)
        return diff_profiles(load_either(p), prof)

    survives(read, good, n=200, seed=10, bound_s=5)


# ------------------------------------------------------------------ problems, the run store, documents


@pytest.mark.parametrize("problem, name", [("row_softmax", "problem.toml"), ("gpumode_vectoradd", "task.yml"),
                                           ("kernelbench_relu", "19_ReLU.py")])
def test_problem_files(tmp_path, problem, name):
    from kernelpilot.evaluate.problem import load_problem

    src = EXAMPLES / "problems" / problem
    d = tmp_path / problem
    shutil.copytree(src, d)
    target = d / name

    def read(b: bytes) -> Any:
        target.write_bytes(b)
        return load_problem(d / name if name.endswith(".py") else d)

    survives(read, (src / name).read_bytes(), n=120, seed=11, bound_s=10)


def test_run_store(tmp_path):
    from kernelpilot.runs.store import RunStore, StepRecord

    db = tmp_path / "runs.db"
    with RunStore(db) as s:
        run = s.create_run(problem="p", strategy="search", start_candidate="c.py", target=None, budget=3,
                           options={"budget": 3}, device="cpu")
        s.add_step(run, StepRecord(kind="start", code="x = 1\n", params={"B": 64}, passed=True, median_us=3.0))
    good = db.read_bytes()

    def read(b: bytes) -> Any:
        p = tmp_path / "mutated.db"
        p.write_bytes(b)
        with RunStore(p, create=False) as s:
            return [(r.to_json(), [st.to_json() for st in s.steps(r.id)]) for r in s.runs()]

    survives(read, good, n=80, seed=12, bound_s=10)


@pytest.mark.parametrize("suffix, text", [
    (".md", "# DPP\n\n## row_bcast\n\nrow_bcast:15 sends lane 15 of each row to the next row.\n" * 20),
    (".html", "<html><body><h1>Stalls</h1><h2>Long scoreboard</h2><p>A warp waits on L1TEX.</p>"
              "<table><tr><td>x</td></tr></table></body></html>" * 20),
])
def test_documents(tmp_path, monkeypatch, suffix, text):
    monkeypatch.setenv("KPILOT_DOCS_DB", str(tmp_path / "docs.db"))
    from kernelpilot.docs.index import DocsIndex

    def read(b: bytes) -> Any:
        p = tmp_path / f"doc{suffix}"
        p.write_bytes(b)
        with DocsIndex() as d:
            return d.add(p, "fuzz")

    survives(read, text.encode(), n=80, seed=13, bound_s=10)


def test_pdf_documents(tmp_path, monkeypatch):
    pypdf = require_module("pypdf")
    monkeypatch.setenv("KPILOT_DOCS_DB", str(tmp_path / "docs.db"))
    from kernelpilot.docs.index import DocsIndex

    w = pypdf.PdfWriter()
    w.add_blank_page(width=200, height=200)
    src = tmp_path / "blank.pdf"
    with open(src, "wb") as f:
        w.write(f)

    def read(b: bytes) -> Any:
        p = tmp_path / "doc.pdf"
        p.write_bytes(b)
        with DocsIndex() as d:
            return d.add(p, "fuzzpdf")

    survives(read, src.read_bytes(), n=40, seed=14, bound_s=20)


def test_the_cli_on_mutated_input_is_one_line(tmp_path):
    """The same through the command line: exit 0, or one `error:` line and a non-zero status."""
    import os
    import sys

    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    raw = (FIXTURES / "ncu_profile" / "cuda_registers.raw.csv").read_bytes()
    for label, b in mutations(raw, 6, seed=15):
        p = tmp_path / "raw.csv"
        p.write_bytes(b)
        r = subprocess.run([sys.executable, "-m", "kernelpilot", "profile", "--import", str(p)], capture_output=True,
                           text=True, env=env, timeout=120)
        assert r.returncode == 0 or (r.stderr.startswith("error: ") and "Traceback" not in r.stderr), (label, r.stderr)
