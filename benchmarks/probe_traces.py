"""Real profiler traces of the harness's probed call, on a GPU, as fixtures for ``probe.analyze_trace``.

Each pattern is called as the check's first call is: under the PyTorch profiler with stream-wait events on,
after the marker kernel on the timed stream. The events the analysis reads (kernels, stream waits, the
marker, event records and launches) are written to tests/fixtures/probe_traces/NAME.json, with what
``analyze_trace`` makes of them printed beside:

- ``side_stream``: the work on a stream of its own, returned without the caller's stream waiting (a cheat);
- ``side_waited``: the same, then ``current_stream().wait_stream(side)`` (honest);
- ``cudagraph_1``, ``_2``, ``_3``: a torch.compile(mode="reduce-overhead") function's first three calls
  (warm-up, capture, replay; honest).

Needs a GPU; not used by any test directly (the files it writes are).
Run: python benchmarks/probe_traces.py [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from kernelpilot.evaluate import probe as P  # noqa: E402

_KEEP_CATS = ("kernel", "cuda_sync", "gpu_memcpy", "gpu_memset")


def traced(fn) -> list[dict]:
    """The events of one call of ``fn`` profiled as the probe profiles it."""
    import torch

    marker = torch.zeros(1, device="cuda")
    with P._profiler(torch.autograd.profiler.profile, True) as prof:
        with torch.profiler.record_function(P._MARKER):
            marker.add_(1)
        fn()
        torch.cuda.synchronize()
    fd, path = tempfile.mkstemp(suffix=".json")
    os.close(fd)
    try:
        prof.export_chrome_trace(path)
        events = json.loads(Path(path).read_text())["traceEvents"]
    finally:
        os.unlink(path)
    return [e for e in events if e.get("cat") in _KEEP_CATS or e.get("name") == P._MARKER
            or (e.get("cat") == "cuda_runtime" and any(w in e.get("name", "") for w in
                                                       ("EventRecord", "StreamWait", "Launch")))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=ROOT / "tests" / "fixtures" / "probe_traces")
    args = ap.parse_args()
    import torch

    if not torch.cuda.is_available():
        raise SystemExit("needs a CUDA GPU")
    x = torch.randn(256, 1024, device="cuda")
    side = torch.cuda.Stream()

    def side_stream():
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            return torch.softmax(x, -1)

    def side_waited():
        out = side_stream()
        torch.cuda.current_stream().wait_stream(side)
        return out

    graphed = torch.compile(lambda t: torch.softmax(t, -1) * 2, mode="reduce-overhead")
    patterns = [("side_stream", side_stream), ("side_waited", side_waited)]
    patterns += [(f"cudagraph_{i}", lambda: graphed(x)) for i in (1, 2, 3)]
    args.out.mkdir(parents=True, exist_ok=True)
    for name, fn in patterns:
        events = traced(fn)
        (args.out / f"{name}.json").write_text(json.dumps({"traceEvents": events}, indent=0) + "\n")
        p = P.analyze_trace(events)
        print(json.dumps({"pattern": name, "side_stream_kernels": p.side_stream_kernels[:5],
                          "other_stream_kernels": p.other_stream_kernels[:5],
                          "stream_waits": sum(e.get("cat") == "cuda_sync" for e in events)}))


if __name__ == "__main__":
    main()
