"""One profiled call: which aten ops it ran, which GPU kernels on which streams, from which threads.

Used by the worker's guard call (not timed) to find a library fallback (the reference's own op),
work on a stream other than the timed one, work launched from another thread, and a candidate whose own
kernels never run. Runs only in worker processes (imports torch).
"""

from __future__ import annotations

import json
import os
import tempfile
import threading
from dataclasses import dataclass, field
from typing import Any, Callable

__all__ = ["Probe", "probe_call", "analyze_trace"]


@dataclass
class Probe:
    ops: set[str] = field(default_factory=set)                  # aten::... run on the calling thread
    kernels: list[str] = field(default_factory=list)             # GPU kernel names, in launch order
    side_stream_kernels: list[str] = field(default_factory=list)  # on another stream, ending after the timed one
    other_stream_kernels: list[str] = field(default_factory=list)  # on another stream, ending before it
    other_thread_ops: list[str] = field(default_factory=list)     # ops or launches from other threads
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"ops": sorted(self.ops), "kernels": self.kernels[:50],
                "side_stream_kernels": self.side_stream_kernels[:20],
                "other_stream_kernels": self.other_stream_kernels[:20],
                "other_thread_ops": self.other_thread_ops[:20], "error": self.error}


_MARKER = "kpilot_stream_marker"
_END = "kpilot_stream_end"


def probe_call(fn: Callable[[], Any], device: str, *, settle: Callable[[], None] | None = None) -> tuple[Any, Probe]:
    """Run ``fn()`` once under the PyTorch profiler; return its output and what it ran."""
    import torch

    cuda = device.startswith("cuda")
    # The autograd profiler directly: torch.profiler.profile's first start imports torch._inductor (seconds)
    # only to read one of its settings; this records the same trace.
    profile = torch.autograd.profiler.profile
    marker = torch.zeros(1, device=device)
    result = None
    probe = Probe()
    failure: BaseException | None = None
    ran = False
    try:
        with _profiler(profile, cuda) as prof:
            with torch.profiler.record_function(_MARKER):
                marker.add_(1)            # a kernel on the timed stream, launched by this thread
            try:
                result = fn()
                ran = True
                if cuda:
                    with torch.profiler.record_function(_END):
                        marker.add_(1)    # the timed stream's next kernel: it starts once what it waits for ends
                    torch.cuda.synchronize()
                if settle is not None:
                    settle()
            except BaseException as e:    # the call's own failure: re-raised below, after the profiler closes
                failure = e
        if failure is not None:
            raise failure
        path = tempfile.mktemp(suffix=".json", prefix="kpilot-probe-")
        prof.export_chrome_trace(path)
        with open(path) as f:
            trace = json.load(f)
        os.unlink(path)
    except BaseException as e:
        if e is failure:
            raise
        probe.error = f"{type(e).__name__}: {e}"   # the profiler is a guard, not a requirement
        if not ran:
            result = fn()
        return result, probe
    events = trace.get("traceEvents", trace) if isinstance(trace, dict) else trace
    return result, analyze_trace(events)


def _profiler(profile, cuda: bool):
    """The profiler, started: on a GPU recording stream waits too (which stream waited for which) where this
    torch can; where it cannot, without them (the temporal rule of ``analyze_trace`` still applies)."""
    kw = dict(use_cpu=True, use_device="cuda" if cuda else None, use_kineto=True)
    if cuda:
        try:
            from torch._C._profiler import _ExperimentalConfig

            prof = profile(**kw, experimental_config=_ExperimentalConfig(enable_cuda_sync_events=True))
            prof.__enter__()
            return _Started(prof)
        except Exception:
            pass
    prof = profile(**kw)
    prof.__enter__()
    return _Started(prof)


class _Started:
    """A profiler already entered, for a ``with`` statement that stops it."""

    def __init__(self, prof) -> None:
        self.prof = prof

    def __enter__(self):
        return self.prof

    def __exit__(self, *exc):
        return self.prof.__exit__(*exc)


def analyze_trace(events: list[dict[str, Any]]) -> Probe:
    """What one profiled call ran, from its Chrome trace (Kineto's events), given that it began with the marker:
    an annotated op on the calling thread whose kernel is the first on the timed stream.

    A kernel on another stream is inside the timer when the timed stream waited for it (a stream-wait event on
    the timed stream, on the kernel's stream, whose event was recorded after the kernel was launched; followed
    through other streams' waits too: CUDA graphs' warm-up and capture, a library's helper streams), or when it
    ended before the timed stream's last kernel did. Where the profiler does not say which stream a wait was
    for, a kernel counts as waited for when the timed stream was made to wait after the kernel was launched and
    the end marker (the timed stream's next kernel, launched as the call returned) started only once the kernel
    had ended. Those are ``other_stream_kernels``, for a warning; the others are ``side_stream_kernels`` (an
    error for the caller): a timer on the timed stream can stop before them. (What a wait on an unrelated event
    could still hide is no longer than the end marker's launch, and the timed calls' tails bound it too.)"""
    probe = Probe()
    main_tid = None
    window = (0.0, -1.0)
    for ev in events:
        if ev.get("name") == _MARKER and ev.get("cat") in ("user_annotation", "cpu_op"):
            main_tid = ev.get("tid")
            window = (float(ev.get("ts", 0)), float(ev.get("ts", 0)) + float(ev.get("dur", 0)))
            break
    end_window = next(((float(ev.get("ts", 0)), _end(ev)) for ev in events if ev.get("name") == _END
                       and ev.get("cat") in ("user_annotation", "cpu_op") and ev.get("tid") == main_tid), None)
    # the first kernel after the marker annotation is the marker's add_
    kernels = sorted((ev for ev in events if ev.get("cat") == "kernel"), key=lambda e: float(e.get("ts", 0)))
    timed_stream = (kernels[0].get("args") or {}).get("stream") if kernels else None
    end_marker = _end_marker(events, kernels, main_tid, timed_stream, end_window)
    if end_marker is not None:
        kernels = [k for k in kernels if k is not end_marker]
    timed_end = max((_end(ev) for ev in kernels if (ev.get("args") or {}).get("stream") == timed_stream),
                    default=0.0)
    waited = _waited_for(events, timed_stream)
    last_wait = max((_int((ev.get("args") or {}).get("correlation"), -1) for ev in events
                     if _is_wait(ev) and (ev.get("args") or {}).get("stream") == timed_stream), default=-1)
    for ev in kernels[1:]:
        name = ev.get("name", "")
        probe.kernels.append(name)
        args = ev.get("args") or {}
        stream = args.get("stream")
        if timed_stream is not None and stream is not None and stream != timed_stream:
            corr = _int(args.get("correlation"), 1 << 62)
            inside = (_end(ev) <= timed_end or corr < waited.get(stream, -1)
                      or (end_marker is not None and corr < last_wait
                          and float(end_marker.get("ts", 0)) >= _end(ev)))
            (probe.other_stream_kernels if inside else probe.side_stream_kernels).append(f"{name} (stream {stream})")
    for ev in events:
        cat = ev.get("cat")
        name = ev.get("name", "")
        if cat == "cpu_op" and name.startswith("aten::"):
            if ev.get("tid") == main_tid and (window[0] <= float(ev.get("ts", 0)) <= window[1]
                                              or _in(ev, end_window)):
                continue  # the markers' own ops
            if main_tid is None or ev.get("tid") == main_tid:
                probe.ops.add(name)
            else:
                probe.other_thread_ops.append(name)
        elif cat == "cuda_runtime" and "Launch" in name and main_tid is not None and ev.get("tid") != main_tid:
            probe.other_thread_ops.append(name)
    return probe


def _end_marker(events: list[dict[str, Any]], kernels: list[dict[str, Any]], main_tid: Any, timed_stream: Any,
                window: tuple[float, float] | None) -> dict[str, Any] | None:
    """The end marker's kernel: the one launched on the timed stream inside the ``_END`` annotation."""
    if window is None:
        return None
    launches = {_int((ev.get("args") or {}).get("correlation"), -1) for ev in events
                if ev.get("cat") == "cuda_runtime" and "Launch" in str(ev.get("name"))
                and ev.get("tid") == main_tid and _in(ev, window)}
    return next((k for k in reversed(kernels) if (k.get("args") or {}).get("stream") == timed_stream
                 and _int((k.get("args") or {}).get("correlation"), -2) in launches), None)


def _is_wait(ev: dict[str, Any]) -> bool:
    return (ev.get("args") or {}).get("cuda_sync_kind") == "Stream Wait Event" or ev.get("name") == "Stream Wait Event"


def _waited_for(events: list[dict[str, Any]], timed_stream: Any) -> dict[Any, int]:
    """``{stream: correlation id}``: the timed stream waited for the work launched on ``stream`` before the
    cudaEventRecord with that correlation id: directly, or through another stream whose wait (launched before
    the point up to which that stream is waited for) it waited for in turn."""
    waits = []      # (waiting stream, the wait's own correlation or None, awaited stream, record's correlation)
    for ev in events:
        args = ev.get("args") or {}
        if _is_wait(ev):
            on, corr = args.get("wait_on_stream"), _int(args.get("wait_on_cuda_event_record_corr_id"), -1)
            if on is not None and corr >= 0 and args.get("stream") is not None:
                own = _int(args.get("correlation"), -1)
                waits.append((args.get("stream"), own if own >= 0 else None, on, corr))
    everything = 1 << 62
    covered: dict[Any, int] = {timed_stream: everything}
    changed = True
    while changed:
        changed = False
        for waiter, own, on, corr in waits:
            upto = covered.get(waiter)
            if upto is None or (upto != everything and (own is None or own >= upto)):
                continue
            if covered.get(on, -1) < corr:
                covered[on] = corr
                changed = True
    covered.pop(timed_stream, None)
    return covered


def _in(ev: dict[str, Any], window: tuple[float, float] | None) -> bool:
    return window is not None and window[0] <= float(ev.get("ts", 0)) <= window[1]


def _end(ev: dict[str, Any]) -> float:
    return float(ev.get("ts", 0)) + float(ev.get("dur", 0))


def _int(x: Any, default: int) -> int:
    try:
        return int(x)
    except (TypeError, ValueError):
        return default


def live_threads() -> set[str]:
    return {f"{t.name}" for t in threading.enumerate()}
