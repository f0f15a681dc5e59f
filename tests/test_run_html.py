"""`kpilot runs export ID --html` in a real browser: headless Chromium (Debian's chromium) loads the exported page
offline, runs its script without an error, shows the chart's axis labels and legend, and opening a step (what a
click on its row does: the address's #step-N) shows that step's diff."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, chromium, free_port, rendered_dom, require_module

SCALE = ROOT / "tests" / "data" / "problems" / "scale"


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    require_module("triton")
    d = tmp_path_factory.mktemp("html")
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    for budget in ("3", "2"):                                   # run 1, and run 2 to compare with
        r = subprocess.run([sys.executable, "-m", "kernelpilot", "optimize", str(SCALE), "-c",
                            str(SCALE / "scale_tunable.py"), "--device", "cpu", "--budget", budget, "--bench-budget",
                            "0.05", "-q"], cwd=d, env=env, capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, r.stderr
    for extra, out in (([], "rep"), (["--compare", "2"], "pair")):
        r = subprocess.run([sys.executable, "-m", "kernelpilot", "runs", "export", "1", "--out", str(d / out), "--html",
                            *extra], cwd=d, env=env, capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
    return d / "rep" / "run.html"


def _dom(page: Path, fragment: str = "") -> str:
    return rendered_dom(page.as_uri() + fragment)


def test_the_page_needs_no_network(exported):
    text = exported.read_text()
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", text) and "@import" not in text


def test_the_page_runs_and_shows_a_labelled_chart(exported):
    dom = _dom(exported)
    assert 'data-ready="1"' in dom                                 # the script ran to its end
    assert re.search(r'<pre id="errors">\s*</pre>', dom)           # and reported no error
    assert 'id="x-label">step<' in dom and 'id="y-label">speedup over the start (x)<' in dom
    assert "a step that passed" in dom and "best so far" in dom and "<title>step 1" in dom
    assert len(re.findall(r'<tr data-n="\d+"', dom)) == 3


def test_opening_a_step_shows_its_diff(exported, tmp_path):
    dom = _dom(exported, "#step-1")
    shown = re.search(r'<section class="detail" id="step-1"( hidden="")?>', dom)
    assert shown and not shown.group(1)
    assert re.search(r'<section class="detail" id="step-0" hidden', dom)
    step1 = dom[shown.start():dom.index("</section>", shown.start())]
    assert '<pre class="diff">' in step1 and '<span class="add">+' in step1
    assert '<table class="cases">' in step1 and "n=2048,dtype=float32" in step1      # its cases, each timed
    shot = tmp_path / "page.png"
    r = subprocess.run([chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--window-size=1100,900",
                        "--virtual-time-budget=5000", f"--screenshot={shot}", exported.as_uri() + "#step-1"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and shot.stat().st_size > 20_000      # a page with a chart, not a blank one


def test_two_runs_side_by_side(exported):
    dom = _dom(exported.parent.parent / "pair" / "run.html")
    assert 'data-ready="1"' in dom and re.search(r'<pre id="errors">\s*</pre>', dom)
    assert '<table id="compare">' in dom and "<th>run 1</th><th>run 2</th>" in dom
    assert 'id="speedup-chart"' in dom and 'id="speedup-chart-2"' in dom and "Made with: kernelpilot" in dom


def _serve(store: Path, **env: str) -> tuple[subprocess.Popen, int]:
    """`kpilot runs serve` on a free port: the process (its stderr a pipe) and the port."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "kernelpilot", "runs", "serve", "--store", str(store), "--port",
                             str(port)], env={**os.environ, "PYTHONPATH": str(ROOT / "src"), **env},
                            stderr=subprocess.PIPE, text=True)
    return proc, port


def test_runs_serve_lists_runs_behind_its_token(exported):
    import urllib.error
    import urllib.request

    store = exported.parent.parent / ".kpilot" / "runs.db"
    proc, port = _serve(store)
    try:
        line = proc.stderr.readline()
        url = re.search(r"(http://127\.0\.0\.1:\d+/\?token=\S+)", line).group(1)
        token = url.split("token=")[1]
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/api/runs", timeout=10)
        assert refused.value.code == 401
        runs = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{port}/api/runs?token={token}", timeout=10).read())
        assert [r["id"] for r in runs] == [2, 1] and runs[1]["steps"] == 3
        one = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{port}/api/run/1?token={token}", timeout=10).read())
        assert one["run"]["id"] == 1 and len(one["steps"]) == 3
        dom = subprocess.run([chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--virtual-time-budget=4000",
                              "--dump-dom", f"http://127.0.0.1:{port}/run/1?token={token}"], capture_output=True,
                             text=True, timeout=120).stdout
        assert 'data-ready="1"' in dom and 'id="x-label">step<' in dom and re.search(r'<pre id="errors">\s*</pre>', dom)
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_a_served_page_follows_a_running_run(tmp_path):
    """The page of a running run, open in Chromium, shows the steps recorded after it loaded and the run's end,
    in place: the open step stays open, and the script reports no error."""
    import time
    import urllib.error
    import urllib.request

    from kernelpilot.runs.store import RunStore, StepRecord

    store = tmp_path / "runs.db"
    with RunStore(store) as s:
        run = s.create_run(problem="problems/scale", strategy="search", start_candidate="scale.py", target=None,
                           budget=3, options={}, device="cpu")
        s.add_step(run, StepRecord(kind="start", code="x = 1\n", passed=True, median_us=3.0, speedup=1.0))
    server, port = _serve(store, KPILOT_RUNS_TOKEN="t0ken")
    browser = None
    try:
        assert "127.0.0.1" in server.stderr.readline()
        with pytest.raises(urllib.error.HTTPError) as unknown:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/events/run/99?token=t0ken", timeout=10)
        assert unknown.value.code == 404
        # virtual time stands still while the page's event stream is open, so the page waits for the run's end
        browser = subprocess.Popen([chromium(), "--headless", "--no-sandbox", "--disable-gpu",
                                    "--virtual-time-budget=20000", "--dump-dom",
                                    f"http://127.0.0.1:{port}/run/{run}?token=t0ken#step-1"],
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        time.sleep(3)
        assert browser.poll() is None, "the page stopped following a running run"
        with RunStore(store) as s:
            s.add_step(run, StepRecord(kind="variant", n=1, parent=0, code="x = 2\n", diff="-x = 1\n+x = 2\n",
                                       passed=True, median_us=1.5, speedup=2.0))
            s.update_run(run, best_step=1, best_speedup=2.0)
        time.sleep(2)
        with RunStore(store) as s:
            s.add_step(run, StepRecord(kind="variant", n=2, parent=1, code="x = 3\n", passed=False, error="wrong"))
            s.update_run(run, status="done", stop_reason="budget")
        dom, err = browser.communicate(timeout=120)
        assert browser.returncode == 0, err[-500:]
        assert 'data-live="ended"' in dom and re.search(r'data-updates="[1-9]', dom)
        assert re.search(r'<pre id="errors">\s*</pre>', dom)
        assert re.findall(r'<tr data-n="(\d+)"', dom) == ["0", "1", "2"]
        assert re.search(r'<section class="detail" id="step-1">', dom)           # the step opened stays open
        assert '<span class="add">+x = 2' in dom and "the run has ended: done" in dom
        events = urllib.request.urlopen(f"http://127.0.0.1:{port}/events/run/{run}?token=t0ken", timeout=10).read()
        assert events.decode().splitlines()[::3] == ["event: change", "event: done"]   # an ended run: state, end
    finally:
        if browser and browser.poll() is None:
            browser.kill()
        server.terminate()
        server.wait(timeout=10)


def test_a_step_shows_its_profile_as_a_table(tmp_path):
    """A step's profile (here an H200 Nsight Compute capture, summarized as the loop keeps it) is shown as a table
    per kernel: time, bound, occupancy, top stalls and diagnoses."""
    from kernelpilot.loop.agent import step_profile
    from kernelpilot.profile.load import load_profile
    from kernelpilot.runs.html import run_html
    from kernelpilot.runs.store import RunStore, StepRecord

    fx = ROOT / "tests" / "fixtures" / "ncu_profile"
    prof = load_profile(fx / "cuda_registers.raw.csv", details=fx / "cuda_registers.details.txt").to_json()
    kept = step_profile(prof)
    kernel = kept["kernels"][0]
    with RunStore(tmp_path / "runs.db") as s:
        run = s.create_run(problem="p", strategy="llm", start_candidate="c.py", target=None, budget=1, options={})
        s.add_step(run, StepRecord(kind="start", code="x = 1\n", passed=True, median_us=310.4, profile=kept))
        page = tmp_path / "run.html"
        page.write_text(run_html(s, run))
    dom = rendered_dom(page.as_uri() + "#step-0")
    assert re.search(r'<pre id="errors">\s*</pre>', dom)
    shown = re.search(r'<section class="detail" id="step-0">', dom)
    step0 = dom[shown.start():dom.index("</section>", shown.start())]
    table = step0[step0.index('<table class="profile">'):]
    assert f"<code>{kernel['name']}</code>" in table and f"<b>{kernel['bound']}</b>" in table
    assert f"{kernel['occupancy']['theoretical_pct']:g}%" in table
    top = kernel["top_stalls"][0]
    assert f"{top['reason']} {top['pct']:.0f}%" in table
    assert kernel["diagnoses"] and kernel["diagnoses"][0].split(":")[0] in table
