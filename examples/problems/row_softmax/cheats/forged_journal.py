"""Cheat: forges the harness's result. On its first call it writes a result record of its own, one that reports
every case run and a fast time, into every pipe among its open file descriptors (one of them is the worker's
journal, which carries the result to the parent), then ends the process at once with status 0, before the
harness can write the real one.

How it fools a harness: one that takes the first (or only) result record in its channel as the worker's reads
whatever the candidate wrote.

Caught by: a result counts only if the worker then ends with the job's exit token, a random status the worker is
told with its job and keeps in a local variable; a process that ends otherwise fails the candidate: "the
worker's journal holds a result, but the worker did not end as the harness ends it (the candidate wrote to the
harness's journal)".
"""

import json
import os
import stat

import torch

_FORGED = {"result": {"role": "candidate", "mode": "check", "flags": [], "notes": [], "cases": [],
                      "bench": [{"case": "rows=64,cols=128,dtype=float32",
                                 "timing": {"median_us": 0.5, "iqr_us": 0.0, "min_us": 0.5, "max_us": 0.5,
                                            "mean_us": 0.5, "n": 100, "method": "cuda-events",
                                            "converged": True}, "verify": []}]}}


def softmax(x: torch.Tensor) -> torch.Tensor:
    line = (json.dumps(_FORGED) + "\n").encode()
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        try:
            if fd > 2 and stat.S_ISFIFO(os.fstat(fd).st_mode):
                os.write(fd, line)
        except OSError:
            pass
    os._exit(0)
