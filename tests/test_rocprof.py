"""rocprofv3 CSV output to the profile model, on hand-made files in rocprofv3's documented layout
(tests/data/rocprofv3: four dispatches of two kernels on an MI300X, one of them underfilled), and the reader's
errors. No AMD GPU here: live rocprofv3 output is untested."""

from __future__ import annotations

import shutil

import pytest
from conftest import ROOT

from kernelpilot.arch.occupancy import amd_occupancy
from kernelpilot.arch.registry import get_arch, get_gpu
from kernelpilot.errors import InputFormatError, KernelpilotError, UsageError
from kernelpilot.profile.rocprof import find_rocprof_files, is_rocprof, pick_agent, read_rocprof, workgroups_per_cu

DATA = ROOT / "tests" / "data" / "rocprofv3"
TRACE = DATA / "48213_kernel_trace.csv"


@pytest.fixture(scope="module")
def prof():
    return read_rocprof(DATA)


def by_id(prof):
    return {k.id: k for k in prof.kernels}


def test_the_folder_gives_one_launch_per_dispatch_in_start_order(prof):
    assert prof.tool == "rocprofv3" and [k.id for k in prof.kernels] == [1, 2, 3, 4]
    k = by_id(prof)
    assert (k[1].name, k[1].full_name) == ("vector_add", "vector_add(float const*, float const*, float*, int)")
    assert k[2].name == "gemm_tile<64>" and k[2].full_name.startswith("void gemm_tile<64>(float const*")
    assert [k[i].duration_us for i in (1, 2, 3, 4)] == [25.12, 180.48, 4.16, 178.88]   # ns in the CSV
    totals = {t.name: (t.launches, t.total_us) for t in prof.totals()}
    assert totals == {"gemm_tile<64>": (2, 359.36), "vector_add": (2, 29.28)}


def test_grids_are_workgroups_not_work_items(prof):
    k = by_id(prof)
    assert k[1].grid == (16384, 1, 1) and k[1].block == (256, 1, 1)      # 4,194,304 work-items / 256
    assert k[2].grid == (64, 64, 1) and k[2].block == (16, 16, 1)        # 1024 x 1024 / 16 x 16
    assert k[3].grid == (16, 1, 1) and k[3].blocks == 16


def test_device_resources_and_peak_from_agent_info_and_arch_data(prof):
    k = by_id(prof)
    mi300x = get_gpu("mi300x")
    for launch in prof.kernels:
        assert launch.device == "AMD Instinct MI300X" and launch.sm_count == 304
        assert launch.peak_bandwidth_gbps == pytest.approx(mi300x.memory_bandwidth_tbps * 1000)
    assert k[2].registers_per_thread == 96 and k[2].shared_bytes_per_block == 8192
    assert k[2].metrics["Accum_VGPR_Count"] == 32 and k[2].metrics["SGPR_Count"] == 48
    assert any("LDS_Block_Size" in n for n in prof.notes)      # static LDS only: said once


def test_occupancy_is_the_amd_calculator_for_the_trace_resources(prof):
    k = by_id(prof)
    gfx942 = get_arch("gfx942")
    for launch, (vgpr, agpr, sgpr, lds) in ((k[1], (8, 0, 16, 0)), (k[2], (96, 32, 48, 8192))):
        occ = amd_occupancy(gfx942, vgpr=vgpr, agpr=agpr, sgpr=sgpr, lds_bytes=lds,
                            block_size=launch.threads_per_block)
        o = launch.occupancy
        assert o["theoretical_pct"] == occ.percent and o["limits"] == occ.limits and o["amd_limiter"] == occ.limiter
        assert o["unit"] == "waves_per_simd" and o["active"] == occ.active and o["next_step"] == occ.next_step
    assert k[1].occupancy["theoretical_pct"] == 100 and k[1].occupancy["limiter"] == "warps"
    # 96 VGPRs + 32 AGPRs = 128 of the 512-entry file: 4 waves per SIMD, named as diagnose.py names it
    assert k[2].occupancy["theoretical_pct"] == 50 and k[2].occupancy["limiter"] == "registers"
    assert k[2].occupancy["amd_limiter"] == "vgpr"


def test_waves_per_cu_from_workgroups_per_cu(prof):
    k = by_id(prof)
    gfx942 = get_arch("gfx942")
    # 4-wave workgroups: 8 per CU at 8 waves per SIMD, 4 per CU at 4 waves per SIMD
    assert k[1].occupancy["blocks_per_sm"] == 8 and k[2].occupancy["blocks_per_sm"] == 4
    limits = {"vgpr": 8, "sgpr": 8, "lds": 8, "waves": 8}
    assert workgroups_per_cu(gfx942, limits, 20000, 192) == 3      # LDS: 65536 // 20000 workgroups
    assert k[1].waves_per_sm == pytest.approx(16384 / (304 * 8), rel=1e-3)
    assert k[2].waves_per_sm == pytest.approx(4096 / (304 * 4), rel=1e-3)
    assert k[3].waves_per_sm == pytest.approx(16 / (304 * 8), rel=1e-3) and k[3].waves_per_sm > 0


def test_the_underfilled_dispatch_is_diagnosed_underfill_first(prof):
    k = by_id(prof)
    first = k[3].diagnoses[0]
    assert first.id == "launch.underfill" and first.severity == "high"
    assert first.evidence["blocks"] == 16 and first.evidence["sm_count"] == 304
    assert first.evidence["blocks_per_sm_possible"] == 8
    assert not any(d.id == "launch.underfill" for d in k[1].diagnoses + k[2].diagnoses + k[4].diagnoses)
    # the register-limited kernel gets the occupancy diagnosis the NVIDIA path gives
    assert k[2].diagnoses[0].id == "occupancy.registers"
    assert k[1].bound is None      # no throughput counters in rocprofv3's CSV: no bottleneck class


def test_counters_are_matched_per_dispatch(prof):
    k = by_id(prof)
    assert k[1].metrics["SQ_WAVES"] == 16384 * 4 and k[3].metrics["SQ_WAVES"] == 16 * 4
    assert k[2].metrics["GRBM_GUI_ACTIVE"] == 379008 and k[4].metrics["GRBM_GUI_ACTIVE"] == 375648
    assert k[2].metrics["FETCH_SIZE"] == 8448 and k[4].metrics["FETCH_SIZE"] == 8320
    # FETCH_SIZE and WRITE_SIZE are kilobytes (bytes / 1024)
    assert k[1].dram_bytes == (32768 + 16384) * 1024
    assert k[1].dram_bandwidth_gbps == pytest.approx((32768 + 16384) * 1024 / 25.12e-6 / 1e9, abs=0.01)
    assert k[3].dram_bytes == 48 * 1024
    assert not any("counters" in n for n in prof.notes)


def test_a_single_trace_file_finds_its_siblings_and_the_stats_agree(prof):
    files = find_rocprof_files(TRACE)
    assert files.counters.name == "48213_counter_collection.csv" and files.agents.name == "48213_agent_info.csv"
    assert files.stats.name == "48213_kernel_stats.csv"
    alone = read_rocprof(TRACE)
    assert [k.to_json() for k in alone.kernels] == [k.to_json() for k in prof.kernels]
    assert is_rocprof(DATA) and is_rocprof(TRACE) and not is_rocprof(DATA / "README.md")


def test_a_trace_alone_needs_the_gpu_named(tmp_path):
    shutil.copy(TRACE, tmp_path / "1_kernel_trace.csv")
    bare = read_rocprof(tmp_path)
    k = bare.kernels[0]
    assert k.device is None and k.occupancy == {} and k.waves_per_sm is None and k.dram_bytes is None
    assert any("--gpu" in n for n in bare.notes)
    named = read_rocprof(tmp_path, gpu="mi300x")
    assert named.kernels[2].diagnoses[0].id == "launch.underfill" and named.kernels[0].sm_count == 304
    with pytest.raises(UsageError, match="NVIDIA"):
        read_rocprof(tmp_path, gpu="h200")


def test_agent_ids_name_agent_info_rows():
    gpus = [{"node_id": "2", "logical_node_id": "1", "name": "gfx942"},
            {"node_id": "3", "logical_node_id": "2", "name": "gfx90a"}]
    assert pick_agent("Agent 2", gpus)["name"] == "gfx90a"         # logical node id (rocprofv3's default)
    assert pick_agent("Agent 3", gpus)["name"] == "gfx90a"         # else the node id
    assert pick_agent("GPU 0", gpus)["name"] == "gfx942"           # type-relative index
    assert pick_agent("Agent 9", gpus) is None and pick_agent("Agent 9", gpus[:1])["name"] == "gfx942"


def test_counter_rows_of_another_kernel_are_not_used(tmp_path):
    shutil.copy(TRACE, tmp_path / "1_kernel_trace.csv")
    text = (DATA / "48213_counter_collection.csv").read_text().replace('"vector_add(', '"other_kernel(')
    (tmp_path / "1_counter_collection.csv").write_text(text)
    p = read_rocprof(tmp_path, gpu="mi300x")
    assert "SQ_WAVES" not in p.kernels[0].metrics and p.kernels[1].metrics["SQ_WAVES"] == 16384
    assert any("another kernel" in n for n in p.notes)


def test_older_layout_with_group_segment_size(tmp_path):
    # the docs' kernel_trace.csv sample: Private_Segment_Size and Group_Segment_Size, no register counts
    (tmp_path / "7_kernel_trace.csv").write_text(
        '"Kind","Agent_Id","Queue_Id","Stream_Id","Thread_Id","Dispatch_Id","Kernel_Id","Kernel_Name",'
        '"Correlation_Id","Start_Timestamp","End_Timestamp","Private_Segment_Size","Group_Segment_Size",'
        '"Workgroup_Size_X","Workgroup_Size_Y","Workgroup_Size_Z","Grid_Size_X","Grid_Size_Y","Grid_Size_Z"\n'
        '"KERNEL_DISPATCH",2,1,1,21228,1,11,"void addition_kernel<float>(float*, float const*, float const*, '
        'int, int)",1937,2414192765353337,2414192765369494,0,4096,64,1,1,1024,1024,1\n')
    k = read_rocprof(tmp_path, gpu="gfx942").kernels[0]
    assert k.name == "addition_kernel<float>" and k.duration_us == 16.157 and k.grid == (16, 1024, 1)
    assert k.shared_bytes_per_block == 4096 and k.registers_per_thread is None and k.occupancy == {}
    assert k.device == "gfx942" and k.sm_count is None


TRACE_HEADER = TRACE.read_text().splitlines()[0]


@pytest.mark.parametrize("case, error, words", [
    ("no-trace", InputFormatError, "no *_kernel_trace.csv"),
    ("missing-columns", InputFormatError, "missing columns Start_Timestamp, End_Timestamp"),
    ("counters-as-trace", InputFormatError, "missing columns"),
    ("empty", InputFormatError, "no kernel dispatches"),
    ("header-only", InputFormatError, "no kernel dispatches"),
    ("binary", InputFormatError, "not a CSV file"),
    ("json", InputFormatError, "not a CSV file"),
    ("bad-number", InputFormatError, "Start_Timestamp 'soon' is not a number"),
    ("infinite", InputFormatError, "Start_Timestamp 'inf' is not a finite number"),
    ("overflow", InputFormatError, "Start_Timestamp '1e999' is not a finite number"),
    ("huge-field", InputFormatError, "not a readable CSV file"),
    ("nothing-there", KernelpilotError, "no such file or folder"),
    ("two-traces", InputFormatError, "2 kernel traces"),
])
def test_bad_input_raises_one_clear_error(tmp_path, case, error, words):
    d = tmp_path / "out"
    d.mkdir()
    target = d
    if case == "no-trace":
        shutil.copy(DATA / "48213_agent_info.csv", d)
    elif case == "missing-columns":
        cols = TRACE_HEADER.replace('"Start_Timestamp","End_Timestamp",', "")
        (d / "1_kernel_trace.csv").write_text(cols + "\n" + ",".join(["1"] * 20) + "\n")
    elif case == "counters-as-trace":
        target = d / "c.csv"
        shutil.copy(DATA / "48213_counter_collection.csv", target)
    elif case == "empty":
        (d / "1_kernel_trace.csv").write_text("")
    elif case == "header-only":
        (d / "1_kernel_trace.csv").write_text(TRACE_HEADER + "\n")
    elif case == "binary":
        target = d / "report.csv"
        target.write_bytes(b"\x7fELF\0\0\0binary")
    elif case == "json":
        target = d / "1_kernel_trace.csv"
        target.write_text('{"rocprofiler-sdk-tool": [{"metadata": {}, "buffer_records": {}}]}\n')
    elif case == "bad-number":
        (d / "1_kernel_trace.csv").write_text(TRACE.read_text().replace("3200098838431000", "soon", 1))
    elif case in ("infinite", "overflow"):
        value = "inf" if case == "infinite" else "1e999"
        (d / "1_kernel_trace.csv").write_text(TRACE.read_text().replace("3200098838431000", value, 1))
    elif case == "huge-field":
        text = TRACE.read_text().splitlines()
        (d / "1_kernel_trace.csv").write_text(text[0] + "\n" + text[1] + ',"' + "x" * 200_000 + '"\n')
    elif case == "nothing-there":
        target = d / "nope"
    elif case == "two-traces":
        shutil.copy(TRACE, d / "1_kernel_trace.csv")
        (d / "sub").mkdir()
        shutil.copy(TRACE, d / "sub" / "2_kernel_trace.csv")
    with pytest.raises(error) as e:
        read_rocprof(target, gpu="mi300x")
    msg = str(e.value)
    assert words in msg and "\n" not in msg, msg
    if error is InputFormatError:
        assert e.value.path.startswith(str(d))
