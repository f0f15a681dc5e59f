"""``python -m kernelpilot.isa.offline REQUEST RESULT``: analyze one source as ``isa.analyze`` does, with the
options REQUEST (a JSON file) gives, and write the analysis (``kernelpilot.isa/1``) or the error to RESULT.

It is how a caller analyzes code it does not trust: importing a Triton file runs it, so a candidate's file is
compiled in a separate process that the caller boxes in (``evaluate.isolation.run_boxed``).

REQUEST: ``{"source": "FILE.py:KERNEL", "options": {AnalyzeOptions fields as JSON}, "lanes": false}``.
RESULT: ``{"schema": "kernelpilot.isa/1", "kernels": [...]}`` (each kernel with its ``"lanes"`` report when asked) or ``{"error": {"type", "message", "details"}}``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from kernelpilot.errors import KernelpilotError
from kernelpilot.isa.analyze import AnalyzeOptions, analyze_kernel, load_kernels
from kernelpilot.isa.model import Analysis

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    request_path, result_path = (sys.argv[1:] if argv is None else argv)[:2]
    request = json.loads(Path(request_path).read_text())
    try:
        opts = AnalyzeOptions(**request.get("options", {}))
        kernels = [analyze_kernel(k, block_size=opts.block_size) for k in load_kernels(request["source"], opts)]
        out = Analysis(kernels).to_json()
        if request.get("lanes"):                     # the lane dataflow check too (kpilot isa lanes, isa diff)
            from kernelpilot.isa.lanes import lanes_json

            for k, js in zip(kernels, out["kernels"]):
                js["lanes"] = lanes_json(k)
    except KernelpilotError as e:
        out = {"error": {"type": type(e).__name__, "message": str(e), "details": e.details()}}
    Path(result_path).write_text(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
