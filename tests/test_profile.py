"""`kpilot profile` on real Nsight Compute output from an H200 (tests/fixtures/ncu_vectoradd: one vector add
launched with 64 blocks, then with 65,536), and its errors."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest
from conftest import NCU_VECTORADD, ROOT, require_module

from kernelpilot.arch.registry import get_arch
from kernelpilot.errors import InputFormatError
from kernelpilot.profile.diagnose import diagnose
from kernelpilot.profile.diff import diff_profiles
from kernelpilot.profile.load import from_ncu_pages, load_profile
from kernelpilot.profile.ncu_csv import read_raw_csv, to_base
from kernelpilot.profile.ncu_details import read_rules
from kernelpilot.profile.model import KernelLaunch, Stall
from kernelpilot.profile.ncu_metrics import short_name


@pytest.fixture(scope="module")
def fx():
    return NCU_VECTORADD


@pytest.fixture(scope="module")
def prof(fx):
    return load_profile(fx / "ncu_raw.csv", details=fx / "ncu_details.txt")


def kp(*args, env=None):
    e = {**os.environ, "PYTHONPATH": str(ROOT / "src"), **(env or {})}
    return subprocess.run([sys.executable, "-m", "kernelpilot", *args], capture_output=True, text=True, env=e,
                          timeout=120)


def test_both_launches_parse_with_their_numbers(prof):
    small, full = prof.kernels
    assert (small.name, small.full_name) == ("add", "add(float *, const float *, int)")
    assert small.grid == (64, 1, 1) and full.grid == (65536, 1, 1) and small.block == (256, 1, 1)
    assert small.duration_us == pytest.approx(2.432) and full.duration_us == pytest.approx(57.632)
    assert small.waves_per_sm == pytest.approx(0.06) and full.waves_per_sm == pytest.approx(62.06)
    assert small.registers_per_thread == 16 and small.sm_count == 132 and small.device == "NVIDIA H200"
    assert small.occupancy["theoretical_pct"] == 100 and small.occupancy["achieved_pct"] == pytest.approx(11.7, abs=0.01)
    assert small.occupancy["limiter"] == "warps" and small.occupancy["blocks_per_sm"] == 8
    assert full.throughput["memory_pct"] == pytest.approx(66.12, abs=0.01)
    assert full.dram_bytes == pytest.approx(134.224896e6 + 49.044224e6)      # Mbyte in the CSV, bytes here
    assert full.dram_bandwidth_gbps == pytest.approx(3179.99, abs=0.01)     # Tbyte/s in the CSV
    assert full.peak_bandwidth_gbps == 4800.0                                # arch data for the H200
    assert full.stalls[0].reason == "long_scoreboard" and full.stalls[0].pct > 80
    assert sum(s.pct for s in full.stalls) < 100                             # "selected" is not a stall


def test_the_small_grid_is_diagnosed_underfilled_first_and_the_full_one_is_not(prof):
    small, full = prof.kernels
    first = small.diagnoses[0]
    assert first.id == "launch.underfill" and first.severity == "high"
    assert first.evidence["blocks"] == 64 and first.evidence["sm_count"] == 132
    assert "64 blocks on 132 SMs, 0.06 waves" in first.title and "persistent grid" in first.suggestion
    assert "the slowest warp ends the launch" in first.suggestion
    assert small.bound == "launch"
    assert "launch.underfill" not in {d.id for d in full.diagnoses}
    assert full.bound == "memory" and full.bound_evidence["memory_pct"] > full.bound_evidence["sm_pct"]
    assert full.diagnoses[0].id == "stall.long-scoreboard"
    assert "memory.dram-bandwidth-low" in {d.id for d in full.diagnoses}


def _launch_from_summary(k: dict) -> KernelLaunch:
    """A launch as `kpilot profile --json` wrote it, before diagnosis."""
    return KernelLaunch(name=k["name"], id=k["id"], duration_us=k["duration_us"], grid=tuple(k["grid"]),
                        block=tuple(k["block"]), registers_per_thread=k["registers_per_thread"],
                        shared_bytes_per_block=k["shared_bytes_per_block"], sm_count=k["sm_count"],
                        waves_per_sm=k["waves_per_sm"], occupancy=k["occupancy"], throughput=k["throughput"],
                        stalls=[Stall(s["reason"], s["pct"]) for s in k["stalls"]], pipes=k["pipes"])


def test_an_occupancy_limit_is_not_blamed_when_the_grid_is_under_one_wave():
    """The MoE routing kernel at 8,192 tokens, profiled on an H200: 256 blocks where 12 per SM fit (0.16
    waves). Registers cap the occupancy at 75%, but every block is resident at once, so fewer registers would
    add no warp: no occupancy finding, and the load-wait advice asks for more blocks, not more residency. The same
    launch on a grid of many waves is told about its registers."""
    summary = ROOT / "examples" / "moe_topk_sigmoid" / "results" / "profiles" / "plain_9f01f7b_sort_128x8192_lines.json"
    k = _launch_from_summary(json.loads(summary.read_text())["kernels"][0])
    assert k.occupancy["limiter"] == "registers" and k.waves_per_sm < 1
    ids = [d.id for d in diagnose(k, get_arch("sm_90")).diagnoses]
    assert ids[0] == "launch.underfill" and not any(i.startswith("occupancy.") for i in ids)
    k.stalls = [Stall("long_scoreboard", 70.0), *k.stalls[1:]]
    wait = next(d for d in diagnose(k, get_arch("sm_90")).diagnoses if d.id == "stall.long-scoreboard")
    assert "split the work over more blocks" in wait.suggestion and "more resident warps" not in wait.suggestion
    k.grid, k.waves_per_sm = (19008, 1, 1), 12.0
    ids = [d.id for d in diagnose(k, get_arch("sm_90")).diagnoses]
    assert "occupancy.registers" in ids and "launch.underfill" not in ids


def test_ncu_rule_messages_with_estimated_speedups(prof):
    small = prof.kernels[0]
    kinds = {r.kind for r in small.tool_rules}
    assert kinds == {"OPT", "INF", "WRN"}
    launch = next(r for r in small.tool_rules if r.section == "Launch Statistics")
    assert launch.est_speedup_pct == pytest.approx(51.52) and "only 64 blocks" in launch.message
    assert not launch.message.startswith("Est.")
    local = [r for r in small.tool_rules if r.local]
    assert local and all(r.est_speedup_pct for r in local)
    ranked = [r for r in small.tool_rules if not r.local and r.est_speedup_pct]
    assert [r.est_speedup_pct for r in ranked] == sorted((r.est_speedup_pct for r in ranked), reverse=True)


def test_json_has_the_design_names(fx):
    r = kp("profile", "--import", str(fx / "ncu_raw.csv"), "--details", str(fx / "ncu_details.txt"), "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["schema"] == "kernelpilot.profile/1" and d["tool"] == "ncu"
    k = d["kernels"][0]
    for key in ("name", "duration_us", "grid", "block", "registers_per_thread", "waves_per_sm", "occupancy",
                "throughput", "stalls", "pipes", "bound", "diagnoses", "tool_rules"):
        assert key in k, key
    assert list(k["pipes"].items())[:2] == [("adu", 9.46), ("lsu", 2.11)]
    assert set(k["occupancy"]) >= {"theoretical_pct", "achieved_pct", "limiter"}
    assert set(k["throughput"]) >= {"sm_pct", "memory_pct", "dram_pct"}
    assert set(k["diagnoses"][0]) == {"id", "severity", "title", "evidence", "suggestion", "docs"}
    assert "metrics" not in k
    assert d["totals"][0]["name"] == "add" and d["totals"][0]["launches"] == 2


def test_text_report(fx):
    r = kp("profile", "--import", str(fx / "ncu_raw.csv"))
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert out.index("1. [high] launch.underfill") < out.index("#1 add")
    assert "bound: memory" in out and "3.18 TB/s of 4.8" in out
    assert "busiest pipes: adu 36.47%, lsu 14.55%, fma 3.64%" in out


def test_all_metrics_on_request(fx):
    few = load_profile(fx / "ncu_raw.csv")
    every = load_profile(fx / "ncu_raw.csv", all_metrics=True)
    assert len(every.kernels[0].metrics) > 2000 > 200 > len(few.kernels[0].metrics) > 50


def test_units_become_base_units():
    assert to_base(1.5, "Mbyte") == (1.5e6, "byte") and to_base(2.0, "Tbyte/s") == (2e12, "byte/s")
    assert to_base(3.0, "ms") == (3000.0, "us") and to_base(800.0, "nsecond") == pytest.approx((0.8, "us"))
    assert to_base(1.98, "Ghz") == (1.98e9, "hz") and to_base(1.024, "Kbyte/block") == (1024.0, "byte/block")
    assert to_base(7.0, "%") == (7.0, "%")


def test_kernel_names_shorten():
    assert short_name("add(float *, const float *, int)") == "add"
    assert short_name("void ns::gemm<128, (int)2>(float *, int)") == "ns::gemm<128, (int)2>"
    assert short_name("softmax_kernel") == "softmax_kernel"


def test_diff_matches_launches_by_name_and_order(fx):
    text = (fx / "ncu_raw.csv").read_text().splitlines()
    header, units, first, second = text[0], text[1], text[2], text[3]
    a = from_ncu_pages("\n".join([header, units, first]), None, source="a").to_json()
    b = from_ncu_pages("\n".join([header, units, second]), None, source="b").to_json()
    d = diff_profiles(a, b)
    (row,) = d["kernels"]
    assert row["name"] == "add" and row["speedup"] == pytest.approx(2.432 / 57.632, rel=1e-3)
    assert "launch.underfill" in row["diagnoses_resolved"] and row["bound"] == {"a": "launch", "b": "memory"}
    assert row["changes"]["waves_per_sm"] == {"a": 0.06, "b": 62.06}


def test_diff_cli_on_json(tmp_path, fx):
    r = kp("profile", "--import", str(fx / "ncu_raw.csv"), "--json")
    (tmp_path / "a.json").write_text(r.stdout)
    r = kp("profile", "diff", str(tmp_path / "a.json"), str(tmp_path / "a.json"))
    assert r.returncode == 0, r.stderr
    assert "1x" in r.stdout and "add #0" in r.stdout and "add #1" in r.stdout


@pytest.mark.parametrize("case", ["not-csv", "details-only", "binary", "missing", "other-csv", "empty-csv",
                                  "huge-field", "no-command", "both", "diff-args", "diff-not-profile",
                                  "diff-not-utf8", "diff-bad-kernels"])
def test_bad_input_is_one_line(tmp_path, fx, case):
    args = {
        "not-csv": ["--import", str(fx / "k.cu")],
        "details-only": ["--import", str(fx / "ncu_details.txt")],
        "binary": ["--import", str(tmp_path / "x.bin")],
        "missing": ["--import", str(tmp_path / "nope.csv")],
        "other-csv": ["--import", str(tmp_path / "other.csv")],
        "empty-csv": ["--import", str(tmp_path / "empty.csv")],
        "huge-field": ["--import", str(tmp_path / "huge.csv")],
        "no-command": [],
        "both": ["--import", str(fx / "ncu_raw.csv"), "--", "./app"],
        "diff-args": ["diff", str(fx / "ncu_raw.csv")],
        "diff-not-profile": ["diff", str(tmp_path / "other.json"), str(tmp_path / "other.json")],
        "diff-not-utf8": ["diff", str(tmp_path / "latin1.json"), str(tmp_path / "latin1.json")],
        "diff-bad-kernels": ["diff", str(tmp_path / "kernels.json"), str(tmp_path / "kernels.json")],
    }[case]
    (tmp_path / "x.bin").write_bytes(b"\x7fELF\0\0\0binary")
    (tmp_path / "other.csv").write_text('"a","b"\n"1","2"\n')
    (tmp_path / "other.json").write_text('{"schema": "kernelpilot.isa/1"}')
    (tmp_path / "latin1.json").write_bytes('{"schema": "é"}'.encode("latin-1"))
    (tmp_path / "kernels.json").write_text('{"schema": "kernelpilot.profile/1", "kernels": "none"}')
    header = (fx / "ncu_raw.csv").read_text().splitlines()[:2]
    (tmp_path / "empty.csv").write_text("\n".join(header) + "\n")
    (tmp_path / "huge.csv").write_text("\n".join(header) + '\n"' + "x" * 200_000 + '"\n')   # past csv's field limit
    r = kp("profile", *args)
    assert r.returncode in (1, 2), (r.returncode, r.stdout)
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in r.stderr, r.stderr


def _no_ncu(tmp_path, **more):
    # KPILOT_NCU names the binary to use: one that does not exist is what a machine without ncu looks like
    return {"KPILOT_NCU": str(tmp_path / "no-ncu"), "PATH": "/usr/bin:/bin", **more}


def test_ncu_missing_is_one_line(tmp_path, fx):
    r = kp("profile", "--", "true", env=_no_ncu(tmp_path))
    assert r.returncode == 1, r.stderr
    assert r.stderr.startswith("error: ncu") and len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_a_report_is_read_without_ncu(tmp_path, fx):
    """No ncu on the machine: the .ncu-rep is read with NVIDIA's report reader instead, same diagnosis."""
    require_module("ncu_report")
    r = kp("profile", "--import", str(fx / "k.ncu-rep"), "--json", env=_no_ncu(tmp_path))
    assert r.returncode == 0, r.stderr
    small, full = json.loads(r.stdout)["kernels"]
    assert small["diagnoses"][0]["id"] == "launch.underfill" and full["bound"] == "memory"


def test_without_ncu_or_its_report_reader_an_import_is_one_line(tmp_path, fx):
    blocked = tmp_path / "blocked"
    blocked.mkdir()
    (blocked / "ncu_report.py").write_text("raise ImportError('not installed')\n")
    env = _no_ncu(tmp_path, PYTHONPATH=f"{blocked}:{ROOT / 'src'}")
    r = kp("profile", "--import", str(fx / "k.ncu-rep"), env=env)
    assert r.returncode == 1, r.stderr
    assert r.stderr.startswith("error: ncu") and "pip install ncu-report" in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_the_report_reader_gives_what_ncus_pages_give(fx):
    """The H200 fixture read two ways: ncu's raw and details pages, and the .ncu-rep through ncu_report."""
    require_module("ncu_report")
    from kernelpilot.profile.load import from_ncu_report

    pages = load_profile(fx / "ncu_raw.csv", details=fx / "ncu_details.txt").to_json()["kernels"]
    report = from_ncu_report(fx / "k.ncu-rep").to_json()["kernels"]
    # the per-opcode counts: the report holds them, the raw page only their total
    totals = [k.metrics["sass__inst_executed_per_opcode"] for k in load_profile(fx / "ncu_raw.csv", all_metrics=True).kernels]
    assert len(pages) == len(report) == 2
    for a, b, total in zip(pages, report, totals):
        order = lambda rules: sorted(rules, key=lambda r: (r["section"], r["message"]))  # noqa: E731
        assert order(a.pop("tool_rules")) == order(b.pop("tool_rules"))
        mix = b.pop("opcodes")
        assert a.pop("opcodes") == {} and sum(mix.values()) == total > 0
        assert a == b


def test_infinite_values_are_not_measurements(fx):
    text = (fx / "ncu_raw.csv").read_text()
    header, units, *rows = [line for line in text.splitlines() if line.startswith('"')]
    cells = rows[0].split('","')
    i = header.split('","').index("gpu__time_duration.sum")
    for value in ("inf", "1e999", "-inf"):
        row = '","'.join(cells[:i] + [value] + cells[i + 1:])
        (launch,) = read_raw_csv("\n".join([header, units, row]), "x.csv")
        assert "gpu__time_duration.sum" not in launch.metrics and launch.metrics      # the rest is read
        assert launch.dropped == ["gpu__time_duration.sum"]
        prof = from_ncu_pages("\n".join([header, units, row]), None, source="x.csv")
        assert any("infinite value left out: gpu__time_duration.sum" in n for n in prof.notes)


def test_reader_errors_name_the_file():
    with pytest.raises(InputFormatError, match="x.csv"):
        read_raw_csv("hello\n", "x.csv")
    assert read_rules("nothing here\n") == []


def test_timing_without_ncu_needs_a_python_command(tmp_path):
    r = kp("profile", "--tool", "torch", "--out", str(tmp_path), "--", "./app")
    assert r.returncode == 1 and r.stderr.startswith("error: kernel timing without ncu needs a Python command")
    assert len(r.stderr.strip().splitlines()) == 1


UNDERFILL = ["python3", str(ROOT / "examples" / "profile" / "triton_underfill.py")]


@pytest.mark.gpu
def test_live_ncu_profile_of_the_underfilled_triton_kernel(tmp_path):
    r = kp("profile", "--kernel", "underfill_sum", "--launch-count", "1", "--out", str(tmp_path), "--json", "--",
           *UNDERFILL)
    assert r.returncode == 0, r.stderr
    (k,) = json.loads(r.stdout)["kernels"]
    assert k["name"] == "underfill_sum" and k["grid"] == [8, 1, 1]
    assert k["diagnoses"][0]["id"] == "launch.underfill"
    assert (tmp_path / "profile.ncu-rep").is_file()


@pytest.mark.gpu
def test_kernel_times_from_the_pytorch_profiler(tmp_path):
    r = kp("profile", "--tool", "torch", "--kernel", "underfill_sum", "--bytes", str(4 << 26), "--out",
           str(tmp_path), "--json", "--", *UNDERFILL)
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["tool"] == "torch-profiler" and len(d["kernels"]) == 3     # the script calls it three times
    k = d["kernels"][0]
    assert k["grid"] == [8, 1, 1] and k["duration_us"] > 0 and k["dram_bandwidth_gbps"] > 0
    assert k["registers_per_thread"] and k["occupancy"]["theoretical_pct"] > 0
    assert k["diagnoses"][0]["id"] == "launch.underfill"


def test_rocprofv3_output_imports_through_the_cli():
    r = kp("profile", "--import", str(ROOT / "tests" / "data" / "rocprofv3"), "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["tool"] == "rocprofv3" and d["kernels"]
    under = [k for k in d["kernels"] if k["grid"] == [16, 1, 1]]
    assert under and under[0]["diagnoses"][0]["id"] == "launch.underfill" and "CUs" in under[0]["diagnoses"][0]["title"]


def test_rocprofv3_missing_is_one_line(tmp_path):
    r = kp("profile", "--tool", "rocprofv3", "--out", str(tmp_path), "--", "./app",
           env={"KPILOT_ROCPROFV3": str(tmp_path / "none")})
    assert r.returncode == 1 and r.stderr.startswith("error: rocprofv3") and len(r.stderr.strip().splitlines()) == 1


ROW = ROOT / "examples" / "problems" / "row_softmax"


def test_a_candidate_on_a_problem_runs_under_the_driver():
    from kernelpilot.evaluate.drive import command

    cmd = command(ROW, ROW / "candidates" / "triton_softmax.py", calls=1, device="cpu")
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    assert p.returncode == 0 and p.stdout.startswith("ran rows=64,cols=128,dtype=float32 1 times on cpu"), p.stderr
    p = subprocess.run(command(ROW, ROW / "nope.py", device="cpu"), capture_output=True, text=True, env=env, timeout=300)
    assert p.returncode == 1 and p.stderr.strip().endswith("candidate not found.")
    r = kp("profile", "--problem", str(ROW), "--candidate", str(ROW / "candidates" / "triton_softmax.py"),
           env={"KPILOT_NCU": "/nonexistent/ncu"})
    assert r.returncode == 1 and r.stderr.startswith("error: ncu") and len(r.stderr.strip().splitlines()) == 1
    r = kp("profile", "--problem", str(ROW))
    assert r.returncode == 2 and "problem and candidate go together" in r.stderr


@pytest.mark.gpu
def test_a_confined_caller_profiles_its_candidate_in_the_box(tmp_path, monkeypatch):
    """The profile tool for an MCP client or a model: the candidate runs under ncu inside the box (writes
    confined, no credentials), and ncu still sees its kernels in the marked range."""
    from kernelpilot.tools import ToolContext, call

    ws = tmp_path / "ws"
    shutil.copytree(ROW, ws / "row_softmax")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test-not-a-key")
    d = call("profile", {"problem": "row_softmax", "candidate": "row_softmax/candidates/triton_softmax.py",
                         "out": "prof"}, ToolContext(workspace=ws, confined=True))
    assert {k["name"] for k in d["kernels"]} == {"softmax_kernel"}, d.get("notes")
    assert (ws / "prof" / "profile.box").is_dir()            # the box's own folder


@pytest.mark.gpu
def test_live_profile_of_a_candidate_on_its_problem(tmp_path):
    r = kp("profile", "--problem", str(ROW), "--candidate", str(ROW / "candidates" / "triton_softmax.py"),
           "--out", str(tmp_path), "--json")
    assert r.returncode == 0, r.stderr
    names = {k["name"] for k in json.loads(r.stdout)["kernels"]}
    assert names == {"softmax_kernel"}            # only the marked range: no input generation, no warm-up


PLANTED = ROOT / "tests" / "fixtures" / "ncu_profile"   # capture.sh on an H200, 2026-11-30 (environment.txt)


@pytest.mark.parametrize("name,kernel,first,bound", [
    ("triton_underfill", "underfill_sum", "launch.underfill", "latency"),
    ("cuda_registers", "hold_many", "occupancy.registers", "latency"),
    ("torch_strided", "elementwise_kernel", "memory.uncoalesced", "memory"),
])
def test_each_planted_problem_is_the_first_diagnosis(name, kernel, first, bound):
    """Three programs with one planted problem each (examples/profile/), profiled live by `kpilot profile` on
    an H200: ncu's raw page and details page parse to the same first diagnosis that the live run printed."""
    prof = load_profile(PLANTED / f"{name}.raw.csv", details=PLANTED / f"{name}.details.txt")
    (k,) = prof.kernels
    assert k.name.startswith(kernel)
    assert k.diagnoses[0].id == first and k.bound == bound
    assert k.tool_rules, "the details page's rule messages are attached"
    live = json.loads((PLANTED / f"{name}.summary.json").read_text())["kernels"][0]
    assert [d["id"] for d in live["diagnoses"]][:1] == [first] and live["bound"] == bound


def test_a_rewritten_kernel_is_paired_with_the_one_it_replaces():
    """Two live H200 profiles of the MoE routing problem, before and after a rewrite that renamed the kernel:
    the diff pairs the two launches instead of listing each as only on one side."""
    prof = ROOT / "examples" / "moe_topk_sigmoid" / "results" / "profiles"
    a = json.loads((prof / "plain_1_warp.json").read_text())
    b = json.loads((prof / "plain_2_keys.json").read_text())
    d = diff_profiles(a, b)
    (row,) = d["kernels"]
    assert row["name_a"].startswith("topk_sigmoid_warp<") and row["name"].startswith("topk_sigmoid_keys<")
    assert row["speedup"] == pytest.approx(73.536 / 27.904, rel=1e-3)
    assert d["only_in_a"] == [] and d["only_in_b"] == []
    same = diff_profiles(a, a)
    assert "name_a" not in same["kernels"][0]


SAMPLED = ROOT / "tests" / "fixtures" / "ncu_source" / "moe_keys_plain.ncu-rep"   # an H200 report, README.md


def test_hotspots_from_the_warp_samples_of_a_real_report():
    require_module("ncu_report")
    from kernelpilot.profile.ncu_source import read_hotspots

    (k,) = read_hotspots(SAMPLED, top=5)
    assert k["name"] == "topk_sigmoid_keys" and k["samples"] == 3253
    top = k["instructions"]
    assert [h.where for h in top][:2] == ["0x0050", "0x0150"]
    assert top[0].samples == 850 and top[0].share_pct == pytest.approx(100 * 850 / 3253, abs=0.01)
    assert top[1].sass.startswith("PRMT") and top[1].stalls[0] == {"reason": "long_scoreboard", "share_pct": 54.1}
    assert all(a.samples >= b.samples for a, b in zip(top, top[1:]))
    assert all(sum(s["share_pct"] for s in h.stalls) <= 100.05 for h in top)
    assert k["lines"] == []   # built without -lineinfo


def test_hotspots_attach_to_the_launches_and_say_what_is_missing():
    require_module("ncu_report")
    from kernelpilot.profile.load import attach_hotspots
    from kernelpilot.profile.model import KernelLaunch, Profile

    prof = attach_hotspots(Profile(tool="ncu", kernels=[KernelLaunch(name="topk_sigmoid_keys", id=0)]), SAMPLED)
    (k,) = prof.kernels
    assert len(k.hotspots) == 10 and k.hot_lines == []
    assert any("-lineinfo" in n for n in prof.notes)
    d = prof.to_json()["kernels"][0]
    assert d["hotspots"][0]["where"] == "0x0050" and d["hotspots"][0]["stalls"][0]["reason"] == "not_selected"
    two = attach_hotspots(Profile(tool="ncu", kernels=[KernelLaunch(name="a", id=0), KernelLaunch(name="b", id=1)]),
                          SAMPLED)
    assert all(not k.hotspots for k in two.kernels) and "none attached" in two.notes[0]


ACCESS = ROOT / "tests" / "fixtures" / "ncu_source" / "cuda_access.ncu-rep"   # examples/profile/cuda_access.cu


def test_uncoalesced_and_bank_conflicted_accesses_are_named_by_line():
    """examples/profile/cuda_access.cu on an H200 (-lineinfo): the strided load (line 16) moves 2,162,688 sectors
    where coalesced access would need 270,336, and the store down a tile's column (line 17) 2,162,688 shared
    wavefronts where 67,584 would do; the coalesced load, the row-wise read and the store of y have no excess.
    Each diagnosis names its line and instruction."""
    require_module("ncu_report")

    prof = load_profile(ACCESS, hotspots=True)
    (k,) = prof.kernels
    (glob,) = k.uncoalesced_at
    assert (glob.line, glob.excess, glob.total, glob.share_pct) == ("cuda_access.cu:16", 1892352, 2162688, 100.0)
    assert glob.sass.startswith("LDG.E") and glob.where.startswith("0x")
    (shared,) = k.bank_conflicts_at
    assert (shared.line, shared.excess, shared.total) == ("cuda_access.cu:17", 2095104, 2162688)
    assert shared.sass.startswith("STS")
    found = {f.id: f for f in k.diagnoses}
    assert found["memory.uncoalesced"].title.endswith("; 100% of it at cuda_access.cu:16 (" + glob.sass + ")")
    assert found["memory.uncoalesced"].evidence["at"][0]["line"] == "cuda_access.cu:16"
    assert "100% of it at cuda_access.cu:17 (STS" in found["memory.bank-conflicts"].title
    d = prof.to_json()["kernels"][0]
    assert d["uncoalesced_at"][0]["excess"] == 1892352 and d["bank_conflicts_at"][0]["line"] == "cuda_access.cu:17"
    lines = (ROOT / "examples" / "profile" / "cuda_access.cu").read_text().splitlines()
    assert "* 32) % n]" in lines[15] and "tile[lane][warp] =" in lines[16]
    text = kp("profile", "--import", str(ACCESS), "--source")
    assert text.returncode == 0, text.stderr
    assert "100.0%  cuda_access.cu:16  LDG.E" in text.stdout and "(1,892,352 of 2,162,688)" in text.stdout
    assert "100.0%  cuda_access.cu:17  STS" in text.stdout


def test_access_excess_without_line_info_is_named_by_instruction():
    """The MoE report (built without -lineinfo): one instruction holds all of the excess global sectors, named by
    its offset and SASS; no shared memory, so no bank conflicts."""
    require_module("ncu_report")
    from kernelpilot.profile.ncu_source import read_hotspots

    (k,) = read_hotspots(SAMPLED)
    (glob,) = k["uncoalesced"]
    assert glob.line is None and glob.excess == 361912 and glob.share_pct == 100.0 and glob.sass.startswith("LDG")
    assert k["bank_conflicts"] == []


def test_hotspots_need_the_report_itself(fx):
    from kernelpilot.errors import UsageError

    with pytest.raises(UsageError, match="ncu-rep"):
        load_profile(fx / "ncu_raw.csv", hotspots=True)


@pytest.fixture
def no_report_reader(monkeypatch):
    """Neither the ncu_report package, nor ncu, nor a standalone Nsight Compute to take the module from."""
    from kernelpilot.errors import ToolNotFoundError

    def no_ncu(name):
        raise ToolNotFoundError(name, "Nsight Compute")

    monkeypatch.setitem(sys.modules, "ncu_report", None)
    monkeypatch.setattr("kernelpilot.toolchain.find.find_tool", no_ncu)
    monkeypatch.setattr("pathlib.Path.glob", lambda self, pattern: iter(()))


def test_without_a_report_reader_hotspots_say_how_to_get_one(no_report_reader):
    from kernelpilot.errors import KernelpilotError
    from kernelpilot.profile import ncu_source

    with pytest.raises(KernelpilotError, match="pip install ncu-report"):
        ncu_source.load_ncu_report(SAMPLED)


def test_a_hotspot_waiting_on_a_load_is_a_diagnosis():
    """The MoE report's warp samples: 26% at an early instruction, but not_selected (ready warps) is nothing to
    act on; 23.6% at the PRMT after the row's load, mostly long_scoreboard: that one is diagnosed."""
    require_module("ncu_report")
    from kernelpilot.profile.diagnose import diagnose
    from kernelpilot.profile.load import attach_hotspots
    from kernelpilot.profile.model import KernelLaunch, Profile

    prof = attach_hotspots(Profile(tool="ncu", kernels=[KernelLaunch(name="topk_sigmoid_keys", id=0)]), SAMPLED)
    (k,) = prof.kernels
    d = next(f for f in diagnose(k).diagnoses if f.id == "stall.hotspot")
    assert d.evidence["where"] == "0x0150" and d.evidence["sass"].startswith("PRMT")
    assert "long_scoreboard 54.1%" in d.title and "load" in d.suggestion
    assert d.docs == ["builtin/profiling.md#warp-sampling"]
    k.hotspots = [h for h in k.hotspots if h.where != "0x0150"]
    assert "stall.hotspot" not in {f.id for f in diagnose(k).diagnoses}


def test_without_a_report_reader_the_profile_stands_and_says_why(no_report_reader):
    from kernelpilot.profile.load import attach_hotspots, attach_opcodes
    from kernelpilot.profile.model import KernelLaunch, Profile

    prof = attach_hotspots(Profile(tool="ncu", kernels=[KernelLaunch(name="k", id=0)]), SAMPLED)
    assert prof.kernels[0].hotspots == [] and "pip install ncu-report" in prof.notes[0]
    prof = attach_opcodes(Profile(tool="ncu", kernels=[KernelLaunch(name="k", id=0)]), SAMPLED)
    assert prof.kernels[0].opcodes == {} and prof.notes[0].startswith("no instruction mix:")
    assert "pip install ncu-report" in prof.notes[0]


@pytest.mark.parametrize("name, first, line, text, share", [
    ("triton_underfill", "launch.underfill", 21, "tl.load(x_ptr + idx", 98.84),
    ("cuda_registers", "occupancy.registers", 21, "static_cast<int>(prev)", 90.53),
])
def test_per_line_hotspots_of_code_built_with_line_info(name, first, line, text, share):
    """Two H200 reports of code with line info (README.md), through `kpilot profile --import --source`: the hot
    line is where warps wait for the kernel's load (the load itself; in the CUDA kernel the next offset, which
    depends on the loaded value), it is diagnosed after the planted problem and before the stall it places."""
    require_module("ncu_report")
    p = kp("profile", "--import", str(SAMPLED.parent / f"{name}.ncu-rep"), "--source", "--json")
    assert p.returncode == 0, p.stderr
    (k,) = json.loads(p.stdout)["kernels"]
    src = "triton_underfill.py" if name.startswith("triton") else "cuda_registers.cu"
    assert k["hot_lines"][0]["where"] == f"{src}:{line}" and k["hot_lines"][0]["share_pct"] == pytest.approx(share)
    assert text in (ROOT / "examples" / "profile" / src).read_text().splitlines()[line - 1]
    assert k["hot_lines"][0]["stalls"][0]["reason"] == "long_scoreboard"
    ids = [d["id"] for d in k["diagnoses"]]
    assert ids[0] == first and ids.index("stall.hotspot") < ids.index("stall.long-scoreboard")
    assert f"{src}:{line}" in k["diagnoses"][ids.index("stall.hotspot")]["title"]
    assert len(k["hotspots"]) == 10 and all("line info" not in n for n in json.loads(p.stdout).get("notes", []))


def _ncu_without_counter_access(tmp_path) -> dict:
    """An ncu that answers as ncu does for a user without access to the GPU's counters (its message, from
    NVIDIA's documentation of ERR_NVGPUCTRPERM): the condition cannot be made on a machine without a GPU."""
    ncu = tmp_path / "ncu"
    ncu.write_text("#!/bin/sh\necho '==PROF== Connected to process 4242'\n"
                   "echo '==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU "
                   "Performance Counters on the target device 0. For instructions on enabling permissions and to "
                   "get more information see https://developer.nvidia.com/ERR_NVGPUCTRPERM'\nexit 1\n")
    ncu.chmod(0o755)
    return {"KPILOT_NCU": str(ncu)}


def test_no_counter_permission_is_one_line_with_what_to_do(tmp_path):
    r = kp("profile", "--out", str(tmp_path), "--", "./app", env=_ncu_without_counter_access(tmp_path))
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    first = r.stderr.splitlines()[0]
    assert first.startswith("error: ncu may not read the GPU's performance counters: ==ERROR== ERR_NVGPUCTRPERM")
    assert "needs a Python command" in first


@pytest.mark.gpu
def test_no_counter_permission_falls_back_to_kernel_times(tmp_path):
    r = kp("profile", "--kernel", "underfill_sum", "--out", str(tmp_path), "--json", "--", *UNDERFILL,
           env=_ncu_without_counter_access(tmp_path))
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["tool"] == "torch-profiler" and "ERR_NVGPUCTRPERM" in d["notes"][0]
    assert d["kernels"] and all(k["duration_us"] > 0 for k in d["kernels"])


def test_each_pipes_issue_rate_from_the_raw_page():
    """The planted register-hungry kernel's raw page (an H200, kpilot's default sections): every pipe that
    issued, busiest first, without the breakdowns by type; none near its peak, so no pipe is diagnosed."""
    (k,) = load_profile(PLANTED / "cuda_registers.raw.csv").kernels
    assert k.opcodes == {}    # the raw page gives the per-opcode counts only as their total
    assert k.pipes == {"adu": 4.85, "xu": 4.11, "alu": 3.45, "lsu": 2.12, "fma": 1.97, "tensor_op_hmma": 0.51,
                       "uniform": 0.02, "cbu": 0.01}
    assert "compute.pipe-busy" not in {d.id for d in k.diagnoses}


def test_a_busy_alu_pipe_in_a_real_report_is_named_with_what_moves_work_off_it():
    """The MoE packed-key kernel's H200 report: the ALU pipe issues at 84.79% of its peak and warps wait on a
    busy pipe 26.58% of their cycles; the diagnosis names the pipe and what to do, first in a compute-bound
    launch."""
    require_module("ncu_report")
    (k,) = load_profile(SAMPLED).kernels
    assert list(k.pipes)[:3] == ["alu", "adu", "fma"] and k.pipes["alu"] == 84.79
    d = k.diagnoses[0]    # compute-bound: the busy pipe before the 23% of excess sectors
    assert k.bound == "compute" and [f.id for f in k.diagnoses] == ["compute.pipe-busy", "memory.uncoalesced"]
    assert d.severity == "high" and d.evidence["pipe"] == "alu" and d.evidence["math_pipe_throttle_pct"] == 26.58
    assert "ALU pipe" in d.title and "84.79%" in d.title and "26.58%" in d.title and "IMAD" in d.suggestion
    # the instruction mix from the report: compares and selects, the ALU's, lead
    assert list(k.opcodes.items())[:3] == [("ISETP", 3579886), ("SEL", 2637168), ("IMAD", 1769472)]
    assert sum(k.opcodes.values()) == 17466410
    assert d.evidence["top_opcodes_pct"] == {"ISETP": 20.5, "SEL": 15.1, "IMAD": 10.1, "VIMNMX": 7.3, "LOP3": 5.3}
    assert d.title.endswith("most executed: ISETP 20.5%, SEL 15.1%, IMAD 10.1%")


def test_the_pipe_diagnosis_needs_a_pipe_near_its_peak_and_speaks_of_any_pipe():
    from kernelpilot.profile.diagnose import diagnose
    from kernelpilot.profile.model import KernelLaunch

    assert not [d for d in diagnose(KernelLaunch(name="k", id=0, pipes={"alu": 59.9})).diagnoses]
    (d,) = diagnose(KernelLaunch(name="k", id=0, pipes={"tma": 70.0, "alu": 20.0})).diagnoses
    assert d.id == "compute.pipe-busy" and d.severity == "medium" and d.title == "the tma pipe issues at 70% of its peak"
    assert d.evidence["pipes"] == {"tma": 70.0, "alu": 20.0} and d.evidence["math_pipe_throttle_pct"] is None


def test_a_diff_shows_the_busiest_pipes_and_most_executed_opcodes_of_both_sides():
    a = {"kernels": [{"name": "k", "duration_us": 20.0, "pipes": {"alu": 84.8, "adu": 19.9, "fma": 10.6}}]}
    b = {"kernels": [{"name": "k", "duration_us": 16.0, "pipes": {"alu": 70.1, "fma": 35.0, "adu": 19.0}}]}
    ch = diff_profiles(a, b)["kernels"][0]["changes"]
    assert ch["alu_pipe_pct"] == {"a": 84.8, "b": 70.1} and ch["fma_pipe_pct"] == {"a": 10.6, "b": 35.0}
    assert ch["adu_pipe_pct"] == {"a": 19.9, "b": 19.0} and "xu_pipe_pct" not in ch
    old = diff_profiles({"kernels": [{"name": "k", "duration_us": 2.0}]}, a)["kernels"][0]["changes"]
    assert old["alu_pipe_pct"] == {"a": None, "b": 84.8}
    a["kernels"][0]["opcodes"] = {"ISETP": 3579886, "SEL": 2637168, "IMAD": 1769472, "VIMNMX": 1280020}
    b["kernels"][0]["opcodes"] = {"ISETP": 3000000, "IMAD": 2900000, "SEL": 1600000}
    ch = diff_profiles(a, b)["kernels"][0]["changes"]
    assert ch["SEL_executed"] == {"a": 2637168, "b": 1600000} and "VIMNMX_executed" not in ch


def test_a_report_the_reader_cannot_read_leaves_the_mix_out_and_says_why(tmp_path):
    """The instruction mix is not asked for: where NVIDIA's reader fails on the report, or finds other launches
    than the profile's, the profile stands and its notes say why."""
    require_module("ncu_report")
    from kernelpilot.profile.load import attach_opcodes
    from kernelpilot.profile.model import KernelLaunch, Profile

    def notes(report):
        prof = attach_opcodes(Profile(tool="ncu", kernels=[KernelLaunch(name="k", id=0)]), report)
        assert prof.kernels[0].opcodes == {}
        return prof.notes

    (gone,) = notes(tmp_path / "gone.ncu-rep")
    assert gone.startswith("no instruction mix:") and "gone.ncu-rep" in gone and "could not read it" in gone
    bad = tmp_path / "bad.ncu-rep"
    bad.write_bytes(b"not a report")
    assert notes(bad) == ["instruction mix: the report holds 0 launches, the profile 1; none attached"]


def test_a_damaged_report_is_an_error_never_an_empty_profile(tmp_path, fx):
    # seeded damage to a real report: cut at several points, bytes flipped, emptied
    require_module("ncu_report")
    import random

    data = (fx / "k.ncu-rep").read_bytes()
    rng = random.Random(35)
    damaged = [b"", data[:64], data[: len(data) // 3], data[: len(data) // 2], data[: len(data) - 100]]
    for _ in range(6):
        copy = bytearray(data)
        for _ in range(rng.choice((1, 10, 200))):
            copy[rng.randrange(len(copy))] ^= 0xFF
        damaged.append(bytes(copy))
    for n, blob in enumerate(damaged):
        f = tmp_path / f"d{n}.ncu-rep"
        f.write_bytes(blob)
        r = kp("profile", "--import", str(f), "--json")
        assert "Traceback" not in r.stderr, r.stderr
        if r.returncode == 0:       # the damage missed what is read: a whole profile
            kernels = json.loads(r.stdout)["kernels"]
            assert kernels and all(k["name"] and k["duration_us"] for k in kernels), (n, kernels)
        else:
            assert r.returncode == 1 and json.loads(r.stdout)["error"]["type"] in ("InputFormatError",
                                                                                  "KernelpilotError"), (n, r.stderr)
