"""`kpilot isa lanes`: what a kernel's cross-lane code computes, from its compiled ISA.

Right and planted wrong reductions, compiled here (clang-19 for gfx942, nvcc for sm_90): each right one is proven
to combine its lanes exactly once, each wrong one named with the lane or step at fault. The AMD verdicts are
checked against an emulator written here from the ISA manual's DPP description (separately from the tool's own
code): run with a one-hot input for every source lane, it must give each lane exactly the counts the tool derives.
The NVIDIA verdicts are checked the same way by running the kernels on a GPU (marker gpu)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from conftest import EXAMPLES, ROOT, require_tool

from kernelpilot.isa.analyze import AnalyzeOptions, load_kernels
from kernelpilot.isa.lanes import trace_lanes
from kernelpilot.isa.lanes.amd import run_amd

DATA = ROOT / "tests" / "data" / "lanes"


def _amd(path, arch="gfx942"):
    require_tool("clang++")
    return {k.name: k for k in load_kernels(str(path), AnalyzeOptions(arch=arch))}


def _nvidia(path):
    require_tool("nvcc")
    return {k.name: k for k in load_kernels(str(path), AnalyzeOptions(arch="sm_90"))}


@pytest.fixture(scope="module")
def wave():
    return _amd(DATA / "wave_sums.hip")


@pytest.fixture(scope="module")
def warp():
    return _nvidia(DATA / "warp_sums.cu")


def _sinks(kernel):
    return trace_lanes(kernel).sinks


def _ids(sink):
    return {f.id for f in sink.findings}


def test_a_dpp_wave_sum_is_proven_complete(wave):
    (s,) = _sinks(wave["wave_sum"])
    assert s.group == "wave" and s.complete_lanes == [63] and s.times == 1 and not s.findings
    assert s.exchanges == ["row_shr:1", "row_shr:2", "row_shr:4", "row_shr:8", "row_bcast:15", "row_bcast:31"]
    read, stored = _sinks(wave["wave_sum_readlane"])
    assert read.kind == "readlane" and read.lane_read == 63 and read.complete_lanes == [63] and not read.findings
    assert stored.group == "wave" and len(stored.complete_lanes) == 64 and not stored.findings


def test_a_dropped_row_bcast_31_leaves_each_half_alone(wave):
    (s,) = _sinks(wave["wave_sum_no_bcast31"])
    assert s.group == "half" and s.complete_lanes == [31, 63]
    (f,) = s.findings
    assert f.id == "lanes.half-wave" and "lanes 0-31 never reach lane 63" in f.title


def test_row_shr_4_used_twice_is_named_with_the_lanes_at_fault(wave):
    (s,) = _sinks(wave["row_sum_shr4_twice"])
    assert not s.complete_lanes and s.group == "row"
    (f,) = s.findings
    assert f.id == "lanes.incomplete" and s.missing == [12, 13, 14, 15] and s.uneven == [4, 5, 6, 7]
    assert "lane 11 misses lanes 12-15 and counts lanes 4-7 more often" in f.title


def test_a_readlane_of_the_wrong_lane(wave):
    read, _ = _sinks(wave["wave_sum_readlane_31"])
    assert read.lane_read == 31 and read.complete_lanes == [63]
    assert "lanes.readlane" in _ids(read)


def test_a_32_lane_shuffle_pattern_on_a_64_lane_wave(wave):
    (s,) = _sinks(wave["wave_sum_shfl32"])
    assert s.group == "half" and len(s.complete_lanes) == 64 and "lanes.half-wave" in _ids(s)
    assert s.exchanges[0].endswith("xor 16")                       # ds_bpermute from the lane id's xor
    (s,) = _sinks(wave["wave_sum_shfl64"])
    assert s.group == "wave" and len(s.complete_lanes) == 64 and not s.findings
    assert s.exchanges[0].endswith("xor 32")


def test_ds_swizzle_halves_read_back_and_added(wave):
    """Bitmask-mode swizzles (lane ^ 16 .. lane ^ 1 within 32 lanes) leave each half in every lane of it; the two
    readlanes (0 and 32) each read a half, and their sum stored is the whole wave, once."""
    *reads, stored = _sinks(wave["wave_sum_swizzle"])
    lo, hi = sorted(reads, key=lambda s: s.lane_read)
    assert (lo.lane_read, hi.lane_read) == (0, 32) and lo.group == hi.group == "half" and not lo.findings
    assert lo.exchanges[0].startswith("ds_swizzle")
    assert stored.group == "wave" and len(stored.complete_lanes) == 64 and stored.times == 1 and not stored.findings


def test_swizzle_offsets_decode_as_the_manual_says():
    from kernelpilot.isa.lanes.amd import parse_swizzle, swizzle_sources

    assert parse_swizzle("offset:swizzle(SWAP,16)") == 0x1F | 16 << 10 == parse_swizzle("offset:0x401f")
    assert parse_swizzle('offset:swizzle(BITMASK_PERM,"01pip")') == (0b00111 | 0b01000 << 5 | 0b00010 << 10)
    assert parse_swizzle("offset:swizzle(BROADCAST,8,3)") == (0x18 | 3 << 5)
    assert parse_swizzle("offset:swizzle(QUAD_PERM,3,2,1,0)") == 0x8000 | 3 | 2 << 2 | 1 << 4
    assert swizzle_sources(0x8000 | 3 | 2 << 2 | 1 << 4, 64)[:8] == [3, 2, 1, 0, 7, 6, 5, 4]
    assert swizzle_sources(0x18 | 3 << 5, 64)[:16] == [3] * 8 + [11] * 8         # lane 3 of each 8
    assert swizzle_sources(0x1F | 16 << 10, 64)[30:34] == [14, 15, 48, 49]      # within each 32-lane half


def test_bound_ctrls_zero_in_a_max_is_named_and_the_identity_is_not(wave):
    """A max step with bound_ctrl gives lane 15 (no source lane for row_shl:1) max(row, 0): wrong for a row of
    negative values. The same step with -inf as the old value and no bound_ctrl keeps lane 15's own."""
    read, _ = _sinks(wave["row0_max_bound_ctrl"])
    assert read.lane_read == 15 and 15 in read.complete_lanes
    (f,) = [f for f in read.findings if f.id == "lanes.zero-fill"]
    assert f.evidence["lanes"] == [15] and "v_max_f32" in f.title
    read, stored = _sinks(wave["row0_max_identity"])
    assert read.lane_read == 15 and 15 in read.complete_lanes and not read.findings and not stored.findings


def test_a_float_through_an_int_only_builtin():
    kernels = _amd(EXAMPLES / "kernels" / "row_sum_dpp_converted.hip")
    (bad,) = _sinks(next(k for n, k in kernels.items() if "converted" in n))
    (good,) = _sinks(next(k for n, k in kernels.items() if "converted" not in n))
    assert bad.complete_lanes == good.complete_lanes == [15, 31, 47, 63]
    assert "lanes.conversion" in _ids(bad) and "v_cvt_i32_f32" in bad.converted and not good.findings


@pytest.mark.parametrize("example", ["wave_argmax_dpp", "wave_argmax_bpermute", "wave_argmax_readlane"])
def test_the_projects_argmax_examples_are_proven(example):
    """The wave argmax examples: every readlane or store of a value that crossed lanes holds a whole group (a
    row for the per-row readlanes, else the wave) with nothing missing."""
    (kernel,) = _amd(EXAMPLES / "kernels" / f"{example}.hip").values()
    sinks = _sinks(kernel)
    assert sinks and all(s.complete_lanes and not s.findings for s in sinks)
    assert any(s.group == "wave" for s in sinks)


def test_nvidia_butterfly_down_and_redux(warp):
    (s,) = _sinks(warp["warp_sum_bfly"])
    assert s.group == "warp" and len(s.complete_lanes) == 32 and s.times == 1 and not s.findings
    (s,) = _sinks(warp["warp_sum_down"])
    assert s.complete_lanes == [0] and not s.findings
    (s,) = _sinks(warp["warp_sum_redux"])
    assert len(s.complete_lanes) == 32 and s.exchanges[0].startswith("REDUX.SUM") and not s.findings


def test_nvidia_wrong_shuffles_are_named(warp):
    (s,) = _sinks(warp["warp_sum_down_no_1"])
    assert "lanes.incomplete" in _ids(s) and s.best_lane == 0 and s.missing == list(range(1, 32, 2))
    (s,) = _sinks(warp["warp_sum_xor8_twice"])
    assert s.times == 2
    (f,) = [f for f in s.findings if f.id == "lanes.incomplete"]
    assert f.evidence["repeated"] == ["SHFL.BFLY 0x8"] and "counted twice" in f.title


# ------------------------------------------------------------------ a DPP emulator from the ISA manual

def _manual_dpp_source(ctrl: str, lane: int):
    """The lane a DPP control reads for ``lane`` (GFX9 ISA manual, DPP_CTRL), or None where it has none. Written
    from the manual's table, not from the tool's code."""
    row_base, in_row = (lane >> 4) << 4, lane & 15
    kind, _, arg = ctrl.partition(":")
    if kind == "quad_perm":
        return (lane & ~3) + json.loads(arg)[lane & 3]
    if kind == "row_shr":
        return lane - int(arg) if in_row >= int(arg) else None
    if kind == "row_shl":
        return lane + int(arg) if in_row + int(arg) <= 15 else None
    if kind == "row_bcast" and arg == "15":           # the 15th lane of the previous row, rows 1-3
        return row_base - 1 if row_base else None
    if kind == "row_bcast" and arg == "31":           # lane 31, rows 2-3
        return 31 if lane >= 32 else None
    raise AssertionError(f"the emulator has no {ctrl}")


def _emulate(kernel, inputs: list[float]) -> tuple[list[float] | None, float | None]:
    """Run the kernel's VALU code on one wave: returns the stored lanes and the scalar a readlane took."""
    vregs: dict[str, list[float]] = {"v0": [float(l) for l in range(64)]}
    sregs: dict[str, float] = {}
    stored, scalar = None, None

    def val(text: str) -> list[float]:
        if text.startswith("v"):
            return vregs[text]
        if text.startswith("s") and text in sregs:
            return [sregs[text]] * 64
        return [float(int(text, 0))] * 64

    for ins in kernel.instructions:
        parts = ins.operands.replace(",", " ").split()
        op = ins.opcode
        mods = dict(p.split(":", 1) for p in parts if ":" in p)
        args = [p for p in parts if ":" not in p]
        if op == "global_load_dword":
            vregs[args[0]] = [inputs[int(a) // 4] for a in vregs[args[1]]]
        elif op == "global_store_dword":
            stored = list(vregs[args[1]])
        elif op == "v_lshlrev_b32_e32":
            vregs[args[0]] = [float(int(x) << int(args[1])) for x in val(args[2])]
        elif op == "v_readlane_b32":
            scalar = vregs[args[1]][int(args[2])]
            sregs[args[0]] = scalar
        elif op in ("v_mov_b32_e32", "v_add_f32_e32"):
            a = val(args[1])
            b = val(args[2]) if op == "v_add_f32_e32" else [0.0] * 64
            vregs[args[0]] = [x + y for x, y in zip(a, b)]
        elif op in ("v_mov_b32_dpp", "v_add_f32_dpp"):
            ctrl = next(p for p in parts if p.startswith(("row_shr", "row_shl", "row_bcast", "quad_perm")))
            old = list(vregs.get(args[0], [float("nan")] * 64))
            src0 = vregs[args[1]]
            src1 = vregs[args[2]] if op == "v_add_f32_dpp" else None
            new = list(old)
            for lane in range(64):
                if not (int(mods["row_mask"], 0) >> (lane >> 4)) & 1 or not (int(mods["bank_mask"], 0) >> ((lane & 15) >> 2)) & 1:
                    continue                                   # row or bank disabled: not written
                src = _manual_dpp_source(ctrl, lane)
                if src is None and "bound_ctrl" not in mods:
                    continue                                   # no source lane, no bound_ctrl: not written
                a = src0[src] if src is not None else 0.0
                new[lane] = a + (src1[lane] if src1 is not None else 0.0)
            vregs[args[0]] = new
        elif op.startswith("s_"):
            continue                                           # scalar set-up, waits, nops: no lane values
        else:
            raise AssertionError(f"the emulator has no {op}")
    return stored, scalar


@pytest.mark.parametrize("name", ["wave_sum", "wave_sum_no_bcast31", "row_sum_shr4_twice", "wave_sum_readlane",
                                  "wave_sum_readlane_31"])
def test_the_lane_counts_match_an_emulator_of_the_manuals_dpp(wave, name):
    kernel = wave[name]
    sinks, _ = run_amd(kernel.instructions, 64)
    value = sinks[0][1]                         # the first sink: the store, or the readlane
    lane_read = sinks[0][2]
    for s in range(64):
        stored, scalar = _emulate(kernel, [1.0 if l == s else 0.0 for l in range(64)])
        if lane_read is None:
            assert [stored[l] for l in range(64)] == [value.lanes[l][s] for l in range(64)], (name, s)
        else:
            assert scalar == value.lanes[lane_read][s], (name, s)


# ------------------------------------------------------------------ the command

def test_the_command_and_its_json(tmp_path):
    require_tool("clang++")
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    r = subprocess.run([sys.executable, "-m", "kernelpilot", "isa", "lanes", str(DATA / "wave_sums.hip"), "--arch",
                        "gfx942", "--kernel", "row_sum_shr4_twice", "--json"], capture_output=True, text=True, env=env,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["schema"] == "kernelpilot.isa-lanes/1"
    (k,) = out["kernels"]
    assert k["wave_size"] == 64 and k["findings"][0]["id"] == "lanes.incomplete"
    text = subprocess.run([sys.executable, "-m", "kernelpilot", "isa", "lanes", str(DATA / "wave_sums.hip"), "--arch",
                           "gfx942", "-k", "wave_sum_no_bcast31"], capture_output=True, text=True, env=env, timeout=300)
    assert text.returncode == 0 and "lanes.half-wave" in text.stdout and "row_bcast:15" in text.stdout
    missing = subprocess.run([sys.executable, "-m", "kernelpilot", "isa", "lanes", str(tmp_path / "none.hip"),
                              "--arch", "gfx942"], capture_output=True, text=True, env=env, timeout=60)
    assert missing.returncode != 0 and len(missing.stderr.strip().splitlines()) <= 2 and "Traceback" not in missing.stderr


def test_isa_diff_shows_both_sides_lanes(tmp_path):
    """isa diff of the wrong and the right reduction prints each side's lane summary."""
    require_tool("clang++")
    src = (DATA / "wave_sums.hip").read_text()
    a, b = tmp_path / "a.hip", tmp_path / "b.hip"
    a.write_text(src)
    b.write_text(src)
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    r = subprocess.run([sys.executable, "-m", "kernelpilot", "isa", "diff", str(a), str(b), "--arch", "gfx942",
                        "-k", "row_sum_shr4_twice", "--json"], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr
    (k,) = json.loads(r.stdout)["kernels"]
    assert k["lanes"]["a"] and k["lanes"]["a"] == k["lanes"]["b"] and "[lanes.incomplete]" in k["lanes"]["a"][0]


# ------------------------------------------------------------------ NVIDIA: the verdicts against execution

@pytest.mark.gpu
def test_the_lane_counts_match_the_kernels_run_on_the_gpu(warp):
    """Each warp kernel run on the GPU once per source lane with a one-hot input: out[l] is how many times lane s
    reaches lane l, which must be the tool's count for every lane and source."""
    import torch
    from torch.utils.cpp_extension import load_inline

    names = ["warp_sum_bfly", "warp_sum_down", "warp_sum_down_no_1", "warp_sum_xor8_twice", "warp_sum_redux"]
    launch = "\n".join(
        f"void run_{n}(torch::Tensor x, torch::Tensor out) {{ {n}<<<1, 32>>>(({'int' if 'redux' in n else 'float'}*)"
        f"x.data_ptr(), ({'int' if 'redux' in n else 'float'}*)out.data_ptr()); }}" for n in names)
    module = load_inline("kpilot_lanes_check", cpp_sources="\n".join(
        f"void run_{n}(torch::Tensor x, torch::Tensor out);" for n in names),
        cuda_sources=(DATA / "warp_sums.cu").read_text() + "\n#include <torch/extension.h>\n" + launch,
        functions=[f"run_{n}" for n in names], extra_cuda_cflags=["-arch=sm_90"])
    for n in names:
        (sink,) = run_nvidia_sinks(warp[n])
        dtype = torch.int32 if "redux" in n else torch.float32
        for s in range(32):
            x = torch.zeros(32, dtype=dtype, device="cuda")
            x[s] = 1
            out = torch.zeros(32, dtype=dtype, device="cuda")
            getattr(module, f"run_{n}")(x, out)
            torch.cuda.synchronize()
            assert out.tolist() == [sink.lanes[l][s] for l in range(32)], (n, s)


def run_nvidia_sinks(kernel):
    from kernelpilot.isa.lanes.nvidia import run_nvidia

    return [value for _, value, _ in run_nvidia(kernel.instructions)[0]]


def test_an_old_value_never_written_is_named_where_it_reaches_a_result():
    """A DPP move whose disabled lanes keep a register never written: the lanes that then hold a whole group
    with that unknown value in it are named."""
    from kernelpilot.isa.lanes.summary import summarize_sink
    from kernelpilot.isa.model import Instruction

    def ins(i, op, operands):
        return Instruction(index=i, opcode=op, operands=operands)

    code = [ins(0, "global_load_dword", "v1, v0, s[0:1]"),
            # rows 1-3 not written (row_mask 0x1): v2 keeps whatever it held there
            ins(1, "v_mov_b32_dpp", "v2, v1 quad_perm:[1,0,3,2] row_mask:0x1 bank_mask:0xf"),
            ins(2, "v_mov_b32_dpp", "v3, v1 quad_perm:[1,0,3,2] row_mask:0xe bank_mask:0xf"),
            ins(3, "v_add_f32_e32", "v4, v1, v2"),
            ins(4, "v_add_f32_e32", "v5, v4, v3"),          # every lane: its pair once, plus an unknown in rows 1-3
            ins(5, "global_store_dword", "v0, v5, s[2:3]")]
    ((sink_ins, value, lane),) = run_amd(code, 64)[0]
    assert value.undefined == frozenset(range(64))      # row 0 from v3, rows 1-3 from v2
    s = summarize_sink(sink_ins, value, lane, 64)
    (f,) = [f for f in s.findings if f.id == "lanes.undefined"]
    assert f.evidence["lanes"] and all(l in value.undefined for l in f.evidence["lanes"])


def test_a_triton_softmax_on_sm_90_is_proven():
    """Triton's row softmax for sm_90: 64-bit loads (two values per lane), a warp butterfly for the maximum and
    one for the sum, each stored for the cross-warp step; both proven to combine the warp once, nothing flagged."""
    from conftest import require_module

    require_module("triton")
    (kernel,) = load_kernels(f"{EXAMPLES / 'kernels' / 'softmax_triton.py'}:softmax_kernel",
                             AnalyzeOptions(arch="sm_90"))
    sinks = [s for s in _sinks(kernel) if s.group is not None]
    assert len(sinks) >= 2 and all(s.group == "warp" and len(s.complete_lanes) == 32 and not s.findings
                                   for s in sinks[:2])
    assert {op for s in sinks[:2] for op in s.operations} >= {"FMNMX", "FADD"}
