"""`kpilot optimize --strategy search` end to end on the CPU (Triton's interpreter) on a small problem, its
parts (tuning space, successive halving, run store), a run killed mid-way and resumed, the reports, and
the errors."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import EXAMPLES, ROOT, json_events, require_module

from kernelpilot.errors import InputFormatError, KernelpilotError
from kernelpilot.loop.halving import Result, next_trials, ranking, rounds_needed
from kernelpilot.loop.space import config_key, read_space
from kernelpilot.runs.lock import RunLock
from kernelpilot.runs.store import RunStore, StepRecord

SCALE = ROOT / "tests" / "data" / "problems" / "scale"
TUNABLE = SCALE / "scale_tunable.py"


def kp(*args, cwd=None, **kw):
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    return subprocess.run([sys.executable, "-m", "kernelpilot", *map(str, args)], capture_output=True, text=True,
                          env=env, cwd=cwd, timeout=kw.get("timeout", 600))


# ---------------------------------------------------------------- the parts


def test_tuning_space_and_variants(tmp_path):
    f = tmp_path / "c.py"
    f.write_text('"""doc — ünïcode"""\nfrom __future__ import annotations\nNAME = "é"; BLOCK = 1024  # c\n'
                 'NUM_WARPS: int = 4\nKPILOT_TUNE = {"BLOCK": [256, 512], "NUM_WARPS": [2, 4]}\n'
                 'def f():\n    return NAME, BLOCK, NUM_WARPS\n')
    space = read_space(f)
    assert space.defaults == {"BLOCK": 1024, "NUM_WARPS": 4}
    assert [config_key(c) for c in space.configs()] == ["BLOCK=256,NUM_WARPS=2", "BLOCK=256,NUM_WARPS=4",
                                                        "BLOCK=512,NUM_WARPS=2", "BLOCK=512,NUM_WARPS=4"]
    text = space.variant({"BLOCK": 512, "NUM_WARPS": 8})
    assert 'NAME = "é"; BLOCK = 512  # c' in text and "NUM_WARPS: int = 8" in text
    ns: dict = {}
    exec(compile(text, "v", "exec"), ns)
    assert ns["f"]() == ("é", 512, 8)
    assert space.variant(space.defaults) == f.read_text()          # nothing else changes
    assert len(text.splitlines()) == len(f.read_text().splitlines())


@pytest.mark.parametrize("body, needle", [
    ("X = 1\n", "declares no tuning space"),
    ("KPILOT_TUNE = {'X': [1, 2]}\n", "no top-level `X = value`"),
    ("X = f()\nKPILOT_TUNE = {'X': [1, 2]}\n", "must be a literal value"),
    ("X = 1\nKPILOT_TUNE = {'X': []}\n", "non-empty list"),
    ("X = 1\nKPILOT_TUNE = dict(X=[1])\n", "literal dict"),
    ("def (:\n", "does not parse"),
])
def test_tuning_space_errors(tmp_path, body, needle):
    f = tmp_path / "c.py"
    f.write_text(body)
    with pytest.raises(InputFormatError, match=needle.replace("(", r"\(")):
        read_space(f)


def test_successive_halving_is_resumable_from_any_prefix():
    keys = [f"k{i}" for i in range(7)]
    times = {"k0": 7.0, "k1": 3.0, "k2": None, "k3": 1.0, "k4": 4.0, "k5": 2.0, "k6": 6.0}
    done: list[Result] = []
    order = []
    while (trials := next_trials(keys, done)):
        for t in trials:
            order.append((t.key, t.round))
            done.append(Result(t.key, t.round, times[t.key]))
            # at every point, the plan from what has been recorded is the rest of the same plan
            rest = next_trials(keys, done)
            assert all((x.key, x.round) not in order for x in rest)
    assert [k for k, r in order if r == 1] == ["k3", "k5", "k1"]   # 6 timed, the fastest 3 go on
    assert [k for k, r in order if r == 2] == ["k3", "k5"] and order[-1] == ("k3", 3)
    assert rounds_needed(7) == 4 and ranking(done)[0].key == "k3"


def test_run_store_round_trip_and_errors(tmp_path):
    db = tmp_path / "s" / "runs.db"
    with RunStore(db) as s:
        rid = s.create_run(problem="p", strategy="search", start_candidate="c.py", target=2.0, budget=5,
                           options={"a": 1})
        assert s.add_step(rid, StepRecord(kind="start", params={"B": 1}, correct=True, passed=True, median_us=10.0,
                                          timing={"c": 10.0}, speedup=1.0)) == 0
        assert s.add_step(rid, StepRecord(kind="variant", params={"B": 2}, correct=False, error="boom")) == 1
        with pytest.raises(sqlite3.IntegrityError):     # a step number is written once
            s.add_step(rid, StepRecord(kind="variant", n=1))
        s.update_run(rid, status="done", best_step=0)
    with RunStore(db, create=False) as s:
        run, steps = s.run(rid), s.steps(rid)
        assert run.options == {"a": 1} and run.status == "done" and run.best_step == 0
        assert [(x.n, x.kind, x.correct) for x in steps] == [(0, "start", True), (1, "variant", False)]
        assert steps[0].timing == {"c": 10.0} and steps[1].error == "boom"
        with pytest.raises(KernelpilotError, match="no run 99"):
            s.run(99)
    with pytest.raises(KernelpilotError, match="no run store here"):
        RunStore(tmp_path / "none.db", create=False)
    (tmp_path / "junk.db").write_text("not sqlite at all " * 100)
    with pytest.raises(KernelpilotError, match="not a kernelpilot run store"):
        RunStore(tmp_path / "junk.db")
    # a JSON column that is not JSON, and pages overwritten: one error naming the store
    with RunStore(db, create=False) as s:
        s.db.execute("UPDATE runs SET options = '{not json' WHERE id = ?", (rid,))
        with pytest.raises(KernelpilotError, match="the run store is damaged"):
            s.run(rid)
    data = bytearray(db.read_bytes())
    data[4096:] = b"\xff" * (len(data) - 4096)                  # every page after the first
    db.write_bytes(bytes(data))
    for wal in db.parent.glob("runs.db-*"):
        wal.unlink()
    with pytest.raises(KernelpilotError, match="damaged|not a kernelpilot run store"):
        with RunStore(db, create=False) as s:
            s.steps(rid)


# ---------------------------------------------------------------- end to end on the CPU


@pytest.fixture(scope="module")
def searched(tmp_path_factory):
    require_module("torch")
    require_module("triton")
    d = tmp_path_factory.mktemp("search")
    r = kp("optimize", SCALE, "-c", TUNABLE, "--device", "cpu", "--budget", "8", "--bench-budget", "0.05",
           "--json", cwd=d)
    return d, r


def test_search_end_to_end_on_cpu(searched):
    d, r = searched
    assert r.returncode == 0, r.stderr
    events = json_events(r.stderr)
    assert events[0] == {"event": "run", "run": 1, "store": str((d / ".kpilot" / "runs.db").resolve()),
                         "strategy": "search"}
    steps, end = [e for e in events if e["event"] == "step"], events[-1]
    assert end["event"] == "end" and end["status"] == "done" and "budget of 8" in end["reason"]
    result = json.loads(r.stdout)                   # the run's outcome: the one thing on stdout
    assert result["run"] == 1 and result["status"] == "done" and result["best_step"] == end["best_step"]
    assert steps[0]["kind"] == "start" and steps[0]["params"] == {"BLOCK": 64, "NUM_WARPS": 1}
    assert len(steps) == 8 and all(s["event"] == "step" and s["passed"] for s in steps)
    assert {s["params"]["round"] for s in steps[1:]} <= {0, 1}
    # the start is the default configuration: it is not run again as a variant
    assert all((s["params"]["BLOCK"], s["params"]["NUM_WARPS"]) != (64, 1) for s in steps[1:] if s["params"]["round"] == 0)
    assert end["best_speedup"] == max(s["speedup"] for s in steps)
    with RunStore(d / ".kpilot" / "runs.db", create=False) as s:
        (run,) = s.runs()
        recorded = s.steps(run.id)
        assert [x.n for x in recorded] == list(range(8)) and run.baseline_us == recorded[0].median_us
        variant = recorded[1]
        assert variant.code and variant.diff.startswith("--- a/scale_tunable.py") and "\n+NUM_WARPS = 4" in variant.diff


def test_runs_list_show_and_export(searched):
    d, _ = searched
    r = kp("runs", "list", cwd=d)
    assert r.returncode == 0 and "scale" in r.stdout and "search" in r.stdout, r.stderr
    r = kp("runs", "show", "1", "--json", cwd=d)
    shown = json.loads(r.stdout)
    assert shown["run"]["status"] == "done" and len(shown["steps"]) == 8 and "code" not in shown["steps"][0]
    r = kp("runs", "export", "1", "--out", d / "report", cwd=d)
    assert r.returncode == 0, r.stderr
    md = (d / "report" / "report.md").read_text()
    assert "# Run 1: search on scale" in md and "## Timeline" in md and "## Best kernel" in md
    assert md.count("| variant |") == 7
    png = (d / "report" / "speedup.png").read_bytes()
    assert png.startswith(b"\x89PNG\r\n\x1a\n") and b"IDAT" in png and png.endswith(b"IEND\xaeB`\x82")


def test_static_pruning_drops_variants_before_they_run(tmp_path):
    require_module("triton")
    from kernelpilot.loop.engine import OptimizeOptions, optimize

    # a floor above 100% drops every variant: each is compiled for sm_90 and none is run (two variants: each
    # compile takes seconds)
    tunable = tmp_path / "scale_tunable.py"
    space = TUNABLE.read_text().replace('"NUM_WARPS": [1, 4]', '"NUM_WARPS": [4]').replace("[64, 256, 1024]", "[256, 1024]")
    tunable.write_text(space)
    opts = OptimizeOptions(device="cpu", budget=10, arch="sm_90", min_occupancy_pct=101, bench_budget_s=0.05,
                           seeds=1, store=tmp_path / "runs.db")
    run = optimize(SCALE, tunable, opts)
    with RunStore(opts.store, create=False) as s:
        steps = s.steps(run.id)
    assert [x.kind for x in steps] == ["start"] + ["pruned"] * 2
    assert all("under the 101% floor" in x.error and x.isa["kernels"]["scale_kernel"]["registers"] for x in steps[1:])
    assert run.status == "done" and run.stop_reason == "search finished"


def test_killed_run_resumes_from_its_last_step(tmp_path):
    require_module("triton")
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    cmd = [sys.executable, "-m", "kernelpilot", "optimize", str(SCALE), "-c", str(TUNABLE), "--device", "cpu",
           "--budget", "5", "--bench-budget", "0.05", "--json"]
    p = subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         start_new_session=True)
    seen = []
    for line in p.stderr:
        if not line.startswith("{"):
            continue
        event = json.loads(line)
        if event["event"] == "step":
            seen.append(event)
        if len(seen) == 3:
            os.killpg(p.pid, signal.SIGKILL)     # the whole process group, workers included
            break
    p.wait(timeout=60)
    with RunStore(tmp_path / ".kpilot" / "runs.db", create=False) as s:
        before = s.steps(1)
        assert s.run(1).status == "running" and len(before) >= 3     # killed: never marked as ended
    with RunLock(tmp_path / ".kpilot" / "runs.db", 1):                # another process drives it: refused, untouched
        busy = kp("optimize", "--resume", "1", "--json", cwd=tmp_path)
    assert busy.returncode == 1 and busy.stderr.strip().splitlines() == [
        f"error: run 1 is being driven by another process (pid {os.getpid()}); wait for it to end, or stop it, "
        "then resume."]
    with RunStore(tmp_path / ".kpilot" / "runs.db", create=False) as s:
        assert len(s.steps(1)) == len(before)
    r = kp("optimize", "--resume", "1", "--json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    events = json_events(r.stderr)
    assert events[-1]["status"] == "done" and "budget of 5" in events[-1]["reason"]
    assert events[0]["event"] == "run" and events[1]["n"] == len(before)   # carried on from the next step
    with RunStore(tmp_path / ".kpilot" / "runs.db", create=False) as s:
        after = s.steps(1)
    assert [x.n for x in after] == list(range(5))
    assert [(x.n, x.params, x.median_us) for x in after[:len(before)]] == [(x.n, x.params, x.median_us) for x in before]
    keys = [(config_key({k: v for k, v in x.params.items() if k != "round"}), x.params.get("round")) for x in after[1:]]
    assert len(keys) == len(set(keys))          # nothing run twice


@pytest.mark.parametrize("args, needle", [
    (["optimize", SCALE, "-c", SCALE / "reference.py", "--device", "cpu"], "declares no tuning space"),
    (["optimize", SCALE], "give a problem and a starting candidate"),
    (["optimize", SCALE, "-c", TUNABLE, "--strategy", "search", "--device", "cpu", "--budget", "0"],
     "--budget must be at least 1"),
    (["runs", "show", "5"], "no run store here"),
    (["optimize", "--resume", "3"], "no run store here"),
])
def test_errors_are_one_line(tmp_path, args, needle):
    r = kp(*args, cwd=tmp_path)
    assert r.returncode in (1, 2), r.stdout
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and needle in lines[0] and "Traceback" not in r.stderr, r.stderr


def test_a_start_that_fails_is_one_line(tmp_path):
    require_module("triton")
    bad = tmp_path / "bad.py"
    bad.write_text(TUNABLE.read_text().replace("* 2, mask=mask)", "* 3, mask=mask)"))
    r = kp("optimize", SCALE, "-c", bad, "--device", "cpu", "--budget", "3", cwd=tmp_path)
    assert r.returncode == 1
    assert r.stderr.strip().splitlines()[-1].startswith("error: the starting candidate does not pass")
    with RunStore(tmp_path / ".kpilot" / "runs.db", create=False) as s:
        assert s.run(1).status == "failed" and s.steps(1)[0].correct is False


def test_plots_are_pngs_with_their_labels(tmp_path):
    require_module("matplotlib")
    from kernelpilot.runs.plot import series_png, speedup_png

    p = series_png({"a": [1.5, 3.0, None, 20.0], "b": [0.5, 1.0, 2.0, 4.0]}, tmp_path / "s.png")
    q = speedup_png([(0, 1.0), (1, None), (2, 2.5)], tmp_path / "u.png", target=3.0)
    for f in (p, q):
        data = f.read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR" and len(data) > 10_000


def test_variants_find_the_files_beside_their_start(tmp_path):
    """A candidate that imports a sibling module and reads a file beside itself: its variants, written into
    the run's folder, still find both (they are imported as if they stood where the start file does)."""
    require_module("torch")
    from kernelpilot.variant_origin import PREFIX, origin_of

    (tmp_path / "helper_for_variants.py").write_text("def twice(x):\n    return x * 2\n")
    (tmp_path / "factor.txt").write_text("1.0\n")
    start = tmp_path / "sibling_tunable.py"
    start.write_text('from pathlib import Path\n\nimport torch\nfrom helper_for_variants import twice\n\n'
                     'FACTOR = float((Path(__file__).parent / "factor.txt").read_text())\nCHUNK = 256\n'
                     'KPILOT_TUNE = {"CHUNK": [256, 1024]}\n\n\ndef scale(x):\n'
                     '    return torch.cat([twice(c) for c in x.split(CHUNK)]) * FACTOR\n')
    work = tmp_path / "elsewhere"
    work.mkdir()
    r = kp("optimize", SCALE, "-c", start, "--device", "cpu", "--budget", "3", "--bench-budget", "0.05", "--json",
           cwd=work)
    assert r.returncode == 0, r.stderr
    steps = [e for e in json_events(r.stderr) if e["event"] == "step"]
    assert [s["kind"] for s in steps] == ["start", "variant", "variant"] and all(s["passed"] for s in steps), steps
    variant = next((work / ".kpilot").glob("run-*/step-1.py"))
    assert variant.read_text().splitlines()[-1] == PREFIX + str(start.resolve())
    assert origin_of(variant) == start.resolve()
    # a mark naming no file is ignored; the stored code has no mark
    stray = tmp_path / "stray.py"
    stray.write_text("x = 1\n" + PREFIX + str(tmp_path / "gone.py") + "\n")
    assert origin_of(stray) is None and origin_of(start) is None
    with RunStore(work / ".kpilot" / "runs.db", create=False) as s:
        assert all(PREFIX not in (x.code or "") for x in s.steps(1))


def test_a_search_with_two_workers_evaluates_a_round_at_once(tmp_path):
    """--parallel 2: every evaluation (the start's included) through two local workers, a round's variants two at
    a time; the run records the same steps a serial search does, each saying where it ran."""
    require_module("torch")
    require_module("triton")
    r = kp("optimize", SCALE, "-c", TUNABLE, "--device", "cpu", "--budget", "5", "--bench-budget", "0.05",
           "--parallel", "2", "--goal", "1000", "--json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    events = json_events(r.stderr)
    steps, end = [e for e in events if e["event"] == "step"], events[-1]
    assert end["status"] == "done" and "budget of 5" in end["reason"] and len(steps) == 5
    assert all(s["passed"] for s in steps) and steps[0]["kind"] == "start"
    with RunStore(tmp_path / ".kpilot" / "runs.db", create=False) as s:
        (run,) = s.runs()
        assert run.options["parallel"] == 2 and run.options["goal"] == 1000 and run.target == 1000


def test_a_store_from_before_traces_opens_with_its_runs(tmp_path):
    """A run store written before steps had traces (store version 1) is brought up to date in place: its runs and
    steps read as they were, and new steps keep traces."""
    import sqlite3

    db = tmp_path / "old.db"
    con = sqlite3.connect(db)
    con.executescript("""
        CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
        INSERT INTO meta VALUES ('schema_version', '1');
        CREATE TABLE runs (id INTEGER PRIMARY KEY AUTOINCREMENT, created REAL NOT NULL, finished REAL,
            problem TEXT NOT NULL, strategy TEXT NOT NULL, start_candidate TEXT, status TEXT NOT NULL,
            stop_reason TEXT, target REAL, budget INTEGER, options TEXT NOT NULL DEFAULT '{}', device TEXT, gpu TEXT,
            baseline_us REAL, best_step INTEGER, best_speedup REAL);
        CREATE TABLE steps (id INTEGER PRIMARY KEY AUTOINCREMENT, run_id INTEGER NOT NULL REFERENCES runs(id),
            n INTEGER NOT NULL, parent INTEGER, kind TEXT NOT NULL, hypothesis TEXT, params TEXT, code TEXT, diff TEXT,
            isa TEXT, profile TEXT, correct INTEGER, passed INTEGER, check_summary TEXT, median_us REAL, timing TEXT,
            speedup REAL, error TEXT, tokens_in INTEGER, tokens_out INTEGER, cost_usd REAL, started REAL,
            finished REAL, UNIQUE(run_id, n));
        INSERT INTO runs (created, problem, strategy, status, target, options) VALUES (1.0, 'p', 'search', 'done', 2.5,
            '{"target": 2.5, "budget": 4}');
        INSERT INTO steps (run_id, n, kind, passed, median_us) VALUES (1, 0, 'start', 1, 3.0);
    """)
    con.close()
    with RunStore(db, create=False) as s:
        (run,) = s.runs()
        (step,) = s.steps(run.id)
        assert run.target == 2.5 and step.median_us == 3.0 and step.trace is None
        s.add_step(run.id, StepRecord(kind="variant", trace=[{"role": "evaluation", "events": []}]))
        assert s.steps(run.id)[1].trace == [{"role": "evaluation", "events": []}]
    assert sqlite3.connect(db).execute("SELECT value FROM meta").fetchone()[0] == "2"


def test_a_missing_candidate_is_a_usage_error_as_in_check(tmp_path):
    row = EXAMPLES / "problems" / "row_softmax"
    for cmd in (["optimize", row, "-c", tmp_path / "nope.py", "--device", "cpu"], ["check", row, "-c", tmp_path / "nope.py"]):
        r = kp(*map(str, cmd), cwd=tmp_path)
        assert r.returncode == 2 and r.stderr.strip().endswith("nope.py: no such candidate file."), (cmd, r.stderr)
        assert len(r.stderr.strip().splitlines()) == 1
