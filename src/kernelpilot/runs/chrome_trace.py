"""A run's timeline in the Trace Event Format (Chrome's JSON trace), which Perfetto (ui.perfetto.dev) and
chrome://tracing open: one track for the steps, one each for the model's turns, the tool calls and the
evaluations, each span with what it was as its arguments. Read only from the run store."""

from __future__ import annotations

from typing import Any

from kernelpilot.runs.store import RunStore

__all__ = ["chrome_trace"]

_TRACKS = {"steps": 1, "model": 2, "tools": 3, "evaluations": 4}


def _span(name: str, track: str, start_s: float, dur_s: float, t0: float, args: dict[str, Any]) -> dict[str, Any]:
    return {"name": name, "cat": track, "ph": "X", "pid": 1, "tid": _TRACKS[track],
            "ts": round((start_s - t0) * 1e6, 1), "dur": round(max(dur_s, 0.0) * 1e6, 1), "args": args}


def chrome_trace(store: RunStore, run_id: int) -> dict[str, Any]:
    run, steps = store.run(run_id), store.steps(run_id)
    t0 = run.created
    events: list[dict[str, Any]] = [{"name": "process_name", "ph": "M", "pid": 1,
                                     "args": {"name": f"run {run.id}: {run.strategy}"}}]
    events += [{"name": "thread_name", "ph": "M", "pid": 1, "tid": tid, "args": {"name": track}}
               for track, tid in _TRACKS.items()]
    for st in steps:
        start = st.started or st.finished or t0
        events.append(_span(f"step {st.n} {st.kind}", "steps", start, (st.finished or start) - start, t0,
                            {"hypothesis": st.hypothesis, "params": st.params, "passed": st.passed,
                             "median_us": st.median_us, "speedup": st.speedup, "error": st.error}))
        for item in st.trace or []:
            at, role = float(item.get("at") or start), item.get("role")
            if role == "assistant":
                d = float(item.get("duration_s") or 0)
                calls = [c.get("name") for c in item.get("tool_calls", [])]
                events.append(_span("model turn", "model", at - d, d, t0,
                                    {"tokens_in": item.get("tokens_in"), "tokens_out": item.get("tokens_out"),
                                     "calls": calls, "text": (item.get("text") or "")[:500]}))
            elif role == "tool":
                d = float(item.get("duration_s") or 0)
                events.append(_span(str(item.get("name")), "tools", at - d, d, t0,
                                    {"bytes": item.get("bytes"), "is_error": item.get("is_error")}))
            elif role == "evaluation":
                d = float((item.get("elapsed_s") or {}).get("total") or 0)
                stages = [e.get("stage") for e in item.get("events", []) if e.get("stage")]
                events.append(_span(f"evaluation (step {st.n})", "evaluations", at - d, d, t0,
                                    {"stages": stages, "elapsed_s": item.get("elapsed_s")}))
    return {"traceEvents": events, "displayTimeUnit": "ms",
            "otherData": {"run": run.id, "problem": run.problem, "strategy": run.strategy}}
