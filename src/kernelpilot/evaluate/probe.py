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

__all__ = ["Probe", "probe_call"]


@dataclass
class Probe:
    ops: set[str] = field(default_factory=set)                  # aten::... run on the calling thread
    kernels: list[str] = field(default_factory=list)             # GPU kernel names, in launch order
    side_stream_kernels: list[str] = field(default_factory=list)  # kernels not on the timed stream
    other_thread_ops: list[str] = field(default_factory=list)     # ops or launches from other threads
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"ops": sorted(self.ops), "kernels": self.kernels[:50],
                "side_stream_kernels": self.side_stream_kernels[:20],
                "other_thread_ops": self.other_thread_ops[:20], "error": self.error}


_MARKER = "kpilot_stream_marker"


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
        with profile(use_cpu=True, use_device="cuda" if cuda else None, use_kineto=True) as prof:
            with torch.profiler.record_function(_MARKER):
                marker.add_(1)            # a kernel on the timed stream, launched by this thread
            try:
                result = fn()
                ran = True
                if cuda:
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
    main_tid = None
    timed_stream = None
    window = (0.0, -1.0)
    for ev in events:
        if ev.get("name") == _MARKER and ev.get("cat") in ("user_annotation", "cpu_op"):
            main_tid = ev.get("tid")
            window = (float(ev.get("ts", 0)), float(ev.get("ts", 0)) + float(ev.get("dur", 0)))
            break
    # the first kernel after the marker annotation is the marker's add_
    kernels = [ev for ev in events if ev.get("cat") == "kernel"]
    kernels.sort(key=lambda e: e.get("ts", 0))
    if kernels:
        timed_stream = (kernels[0].get("args") or {}).get("stream")
    seen_marker_kernel = False
    for ev in kernels:
        name = ev.get("name", "")
        if not seen_marker_kernel:
            seen_marker_kernel = True   # skip the marker's own kernel
            continue
        probe.kernels.append(name)
        stream = (ev.get("args") or {}).get("stream")
        if timed_stream is not None and stream is not None and stream != timed_stream:
            probe.side_stream_kernels.append(f"{name} (stream {stream})")
    for ev in events:
        cat = ev.get("cat")
        name = ev.get("name", "")
        if cat == "cpu_op" and name.startswith("aten::"):
            if ev.get("tid") == main_tid and window[0] <= float(ev.get("ts", 0)) <= window[1]:
                continue  # the marker's own op
            if main_tid is None or ev.get("tid") == main_tid:
                probe.ops.add(name)
            else:
                probe.other_thread_ops.append(name)
        elif cat == "cuda_runtime" and "Launch" in name and main_tid is not None and ev.get("tid") != main_tid:
            probe.other_thread_ops.append(name)
    return result, probe


def live_threads() -> set[str]:
    return {f"{t.name}" for t in threading.enumerate()}
