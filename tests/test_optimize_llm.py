"""`kpilot optimize --strategy llm` end to end through the official Anthropic and OpenAI SDKs, against a local
server that speaks their wire formats with scripted replies: a tool call, a kernel that fails the check, the
failure fed back, a correct kernel, the stop. And the errors: no key, a rejected key, a rate limit, no
network."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest
from conftest import ROOT, free_port, json_events, rendered_dom, require_module
from llm_server import ScriptedLLM

from kernelpilot.runs.store import RunStore

require_module("anthropic")
require_module("openai")
require_module("triton")

SCALE = ROOT / "tests" / "data" / "problems" / "scale"
TUNABLE = SCALE / "scale_tunable.py"
START = TUNABLE.read_text()
WRONG = START.replace("* 2, mask=mask)", "* 3, mask=mask)")
RIGHT = START.replace("BLOCK = 64\n", "BLOCK = 1024\n")


def kp(*args, cwd, env=None, timeout=600):
    e = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    e.update({"PYTHONPATH": str(ROOT / "src"), **(env or {})})
    return subprocess.run([sys.executable, "-m", "kernelpilot", *map(str, args)], capture_output=True, text=True,
                          env=e, cwd=cwd, timeout=timeout)


def _optimize(provider: str, url: str, cwd, *extra):
    return kp("optimize", SCALE, "-c", TUNABLE, "--strategy", "llm", "--provider", provider, "--base-url", url,
              "--model", "scripted", "--device", "cpu", "--bench-budget", "0.05", "--budget", "5",
              "--price-in", "3", "--price-out", "15", "--json", *extra, cwd=cwd)


@pytest.mark.parametrize("provider", ["anthropic", "openai"])
def test_llm_loop_feeds_the_failure_back_and_records_both_steps(tmp_path, provider):
    script = [
        {"text": "Let me look at the kernel.", "tool_calls": [("read_candidate", {"path": "best.py"})]},
        {"text": "", "tool_calls": [("submit_candidate", {"hypothesis": "one program per 64 elements is too "
                                                          "little work: scale differently", "code": WRONG})]},
        {"text": "I broke the result; fixing.", "tool_calls": [("submit_candidate", {
            "hypothesis": "64 elements per program leaves programs tiny; 1024 per program amortises the launch",
            "code": RIGHT})]},
        {"text": "", "tool_calls": [("stop_optimizing", {"reason": "the block size was the limit"})]},
    ]
    with ScriptedLLM(script) as llm:
        r = _optimize(provider, llm.url(provider), tmp_path, "--api-key", "test-key")
        reqs = llm.requests
    assert r.returncode == 0, r.stderr
    events = json_events(r.stderr)
    assert events[-1]["event"] == "end" and events[-1]["status"] == "done"
    assert events[-1]["reason"] == "the model stopped: the block size was the limit"
    steps = [e for e in events if e["event"] == "step"]
    assert [(s["kind"], s["passed"]) for s in steps] == [("start", True), ("proposal", False), ("proposal", True)]
    assert steps[2]["speedup"] > 0 and steps[1]["tokens_in"] and steps[2]["tokens_out"]

    # the wire: the key went out as the provider expects; the read went back as a tool result; the failure
    # went back as an error result of the submit call
    assert len(reqs) == 4
    first = reqs[0]
    if provider == "anthropic":
        assert first["path"] == "/v1/messages"
        assert "test-key" in (first["headers"].get("x-api-key", ""), first["headers"].get("authorization", "")[7:])
        assert {t["name"] for t in first["body"]["tools"]} >= {"submit_candidate", "isa_analyze", "read_candidate"}
        results = [b for m in reqs[2]["body"]["messages"] if isinstance(m["content"], list) for b in m["content"]
                   if b.get("type") == "tool_result"]
        assert results[-1]["is_error"] is True and "failed" in results[-1]["content"]
        assert "outside atol" in results[-1]["content"] or "elements" in results[-1]["content"]
        read = [b for b in reqs[1]["body"]["messages"][-1]["content"] if b.get("type") == "tool_result"][0]
        assert "BLOCK = 64" in read["content"] and not read.get("is_error")
    else:
        assert first["path"] == "/v1/chat/completions" and first["headers"].get("authorization") == "Bearer test-key"
        assert first["body"]["messages"][0]["role"] == "system"
        assert {t["function"]["name"] for t in first["body"]["tools"]} >= {"submit_candidate", "isa_analyze"}
        tool_msgs = [m for m in reqs[2]["body"]["messages"] if m["role"] == "tool"]
        assert tool_msgs[-1]["content"].startswith("ERROR: the candidate failed")
    # the next step starts a fresh conversation that knows the history
    last_user = reqs[3]["body"]["messages"][0 if provider == "anthropic" else 1]["content"]
    assert "FAILED" in last_user and "1024 per program" in last_user

    with RunStore(tmp_path / ".kpilot" / "runs.db", create=False) as s:
        run = s.runs()[0]
        recorded = s.steps(run.id)
    assert run.strategy == "llm" and run.options["provider"] == provider and "api_key" not in json.dumps(run.options)
    assert "test-key" not in (tmp_path / ".kpilot" / "runs.db").read_bytes().decode("latin-1")
    bad, good = recorded[1], recorded[2]
    assert bad.correct is False and bad.code == WRONG and bad.hypothesis.startswith("one program per 64")
    assert good.passed and good.code == RIGHT and "+BLOCK = 1024" in good.diff
    assert good.cost_usd == pytest.approx((good.tokens_in * 3 + good.tokens_out * 15) / 1e6)
    assert run.best_step == 2


def test_the_budget_counts_the_models_proposals(tmp_path):
    # a model that would go on proposing: the run ends when the start and its proposals fill the budget
    submit = {"text": "", "tool_calls": [("submit_candidate", {"hypothesis": "a bigger block", "code": RIGHT})]}
    with ScriptedLLM([submit] * 6) as llm:
        r = kp("optimize", SCALE, "-c", TUNABLE, "--strategy", "llm", "--provider", "openai", "--base-url",
               llm.url("openai"), "--model", "scripted", "--device", "cpu", "--bench-budget", "0.05", "--budget", "3",
               "--api-key", "k", "--json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    events = json_events(r.stderr)
    steps = [e for e in events if e["event"] == "step"]
    assert [s["kind"] for s in steps] == ["start", "proposal", "proposal"]
    assert [(s["evaluations"], s["budget"]) for s in steps] == [(1, 3), (2, 3), (3, 3)]
    assert events[-1]["status"] == "done" and events[-1]["reason"] == "budget of 3 evaluations spent"


def test_no_api_key_is_one_line(tmp_path):
    r = kp("optimize", SCALE, "-c", TUNABLE, "--strategy", "llm", "--provider", "anthropic", "--device", "cpu",
           cwd=tmp_path)
    assert r.returncode == 1 and r.stderr.strip().splitlines() == [
        "error: no API key for anthropic: set ANTHROPIC_API_KEY (or KPILOT_LLM_API_KEY), or pass --api-key."]


@pytest.mark.parametrize("provider", ["anthropic", "openai"])
def test_rejected_key_is_one_line(tmp_path, provider):
    with ScriptedLLM([{"status": 401}]) as llm:
        r = _optimize(provider, llm.url(provider), tmp_path, "--api-key", "bad")
        # said before anything ran: the list of models was refused, no proposal was asked for, no run recorded
        assert llm.gets and llm.requests == []
    assert r.returncode == 1
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: the API key was rejected by") and "HTTP 401" in lines[0]
    assert not (tmp_path / ".kpilot" / "runs.db").exists()


def test_rate_limit_is_retried_with_backoff_then_reported(tmp_path):
    ok = {"text": "", "tool_calls": [("stop_optimizing", {"reason": "nothing to do"})]}
    with ScriptedLLM([{"status": 429, "retry_after": 0.05}, ok]) as llm:
        r = _optimize("anthropic", llm.url("anthropic"), tmp_path, "--api-key", "k", "--llm-retries", "2")
        assert len(llm.requests) == 2        # retried once, then answered
    assert r.returncode == 0 and "nothing to do" in r.stdout, r.stderr
    with ScriptedLLM([{"status": 429, "retry_after": 0.05}] * 5) as llm:
        r = _optimize("openai", llm.url("openai"), tmp_path / "x", "--api-key", "k", "--llm-retries", "1") \
            if (tmp_path / "x").mkdir() is None else None
        assert len(llm.requests) == 2        # one try and one retry
    lines = [line for line in r.stderr.strip().splitlines() if not line.startswith("{")]   # besides the events
    assert r.returncode == 1 and len(lines) == 1 and "rate limited by openai" in lines[0] and "after 1 retries" in lines[0]
    assert json.loads(r.stdout)["error"]["message"].startswith("rate limited by openai")
    with RunStore(tmp_path / "x" / ".kpilot" / "runs.db", create=False) as s:
        assert s.run(1).status == "stopped"   # resumable later


def test_network_failure_is_one_line(tmp_path):
    port = free_port()     # closed again: nothing listens there
    r = _optimize("anthropic", f"http://127.0.0.1:{port}", tmp_path, "--api-key", "k", "--llm-retries", "0")
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 1 and len(lines) == 1 and lines[0].startswith("error: cannot reach anthropic"), r.stderr


def test_parallel_proposals_are_evaluated_together(tmp_path):
    """--parallel 2: two conversations per step, each ending at its submission; both submissions evaluated at once
    on two workers and recorded; the second step's context shows the first step's two results."""
    wrong = {"text": "", "tool_calls": [("submit_candidate", {"hypothesis": "scale by three", "code": WRONG})]}
    right = {"text": "", "tool_calls": [("submit_candidate", {"hypothesis": "a bigger block", "code": RIGHT})]}
    stop = {"text": "", "tool_calls": [("stop_optimizing", {"reason": "enough"})]}
    with ScriptedLLM([wrong, right, stop]) as llm:
        r = _optimize("openai", llm.url("openai"), tmp_path, "--api-key", "k", "--parallel", "2")
        reqs = llm.requests
    assert r.returncode == 0, r.stderr
    events = json_events(r.stderr)
    steps = [e for e in events if e["event"] == "step"]
    assert [(s["kind"], s["passed"]) for s in steps] == [("start", True), ("proposal", False), ("proposal", True)]
    assert events[-1]["reason"] == "the model stopped: enough"
    assert len(reqs) == 3
    # both conversations of the first step began from the same context; the second step's knows both results
    first_two = [q["body"]["messages"][1]["content"] for q in reqs[:2]]
    assert first_two[0] == first_two[1]
    assert "FAILED" in reqs[2]["body"]["messages"][1]["content"] and "a bigger block" in reqs[2]["body"]["messages"][1]["content"]


@pytest.mark.parametrize("provider", ["anthropic", "openai"])
def test_each_step_keeps_its_trace_without_the_key(provider, tmp_path):
    """The messages, the tool call and its result, the tokens and times, and the evaluation's events are kept with
    the step they led to; the API key given on the command line appears nowhere in the store."""
    secret = "sk-test-" + "q" * 24
    script = [
        {"text": "Reading first.", "tool_calls": [("read_candidate", {"path": "best.py"})]},
        {"text": f"My key is {secret}, oops.", "tool_calls": [("submit_candidate", {
            "hypothesis": "a bigger block", "code": RIGHT})]},
        {"text": "", "tool_calls": [("stop_optimizing", {"reason": "done"})]},
    ]
    with ScriptedLLM(script) as llm:
        r = _optimize(provider, llm.url(provider), tmp_path, "--api-key", secret)
    assert r.returncode == 0, r.stderr
    assert secret.encode() not in (tmp_path / ".kpilot" / "runs.db").read_bytes()
    shown = kp("runs", "show", "1", "--trace", "--json", cwd=tmp_path)
    steps = json.loads(shown.stdout)["steps"]
    trace = steps[1]["trace"]
    roles = [t["role"] for t in trace]
    assert roles[0] == "user" and "assistant" in roles and "tool" in roles and roles[-1] == "evaluation"
    call = next(t for t in trace if t["role"] == "assistant")
    assert call["tool_calls"][0]["name"] == "read_candidate" and call["tokens_in"] > 0 and call["duration_s"] >= 0
    read = next(t for t in trace if t["role"] == "tool")
    assert "BLOCK = 64" in read["content"] and read["bytes"] > 0 and not read["is_error"]
    said = [t for t in trace if t["role"] == "assistant" and "My key is" in t["text"]]
    assert said and "[redacted api key]" in said[0]["text"]
    assert any(e.get("stage") == "case" for e in trace[-1]["events"])
    text = kp("runs", "show", "1", "--trace", cwd=tmp_path)
    assert text.returncode == 0 and "read_candidate" in text.stdout and "evaluation:" in text.stdout
    assert "trace" not in json.loads(kp("runs", "show", "1", "--json", cwd=tmp_path).stdout)["steps"][1]
    # the timeline for Perfetto: a span per step, model turn, tool call and evaluation, on their own tracks
    exported = kp("runs", "export", "1", "--out", tmp_path / "rep", "--chrome-trace", cwd=tmp_path)
    assert exported.returncode == 0, exported.stderr
    chrome = json.loads((tmp_path / "rep" / "trace.json").read_text())
    spans = [e for e in chrome["traceEvents"] if e["ph"] == "X"]
    assert {e["cat"] for e in spans} == {"steps", "model", "tools", "evaluations"}
    assert all(e["dur"] >= 0 and e["ts"] >= 0 and isinstance(e["tid"], int) for e in spans)
    names = {e["args"]["name"] for e in chrome["traceEvents"] if e["name"] == "thread_name"}
    assert names == {"steps", "model", "tools", "evaluations"}
    page = kp("runs", "export", "1", "--out", tmp_path / "rep2", "--html", cwd=tmp_path)
    assert page.returncode == 0, page.stderr
    text = (tmp_path / "rep2" / "run.html").read_text()
    assert 'class="msg model"' in text and "read_candidate" in text and 'class="msg eval"' in text
    assert secret not in text
    # in a browser: the step's trace is a conversation, shown when the step is opened
    dom = rendered_dom((tmp_path / "rep2" / "run.html").as_uri() + "#step-1")
    assert 'data-ready="1"' in dom and re.search(r'<pre id="errors">\s*</pre>', dom)
    shown = re.search(r'<section class="detail" id="step-1">', dom)
    step1 = dom[shown.start():dom.index("</section>", shown.start())]
    assert 'class="msg model"' in step1 and "read_candidate" in step1 and 'class="msg tool' in step1
    assert '<span class="add">+' in step1 and "a bigger block" in step1
