"""Bad candidate: writes the harness's own "result written" record into the worker's journal on its first
call, then keeps working (a slow kernel, here a sleep).

How it fools a naive harness: one that trusts the record would read the result before it exists (or a file
the candidate placed there) and stop waiting for the real run.

Caught by: the parent finds no result where the record says one is and fails the candidate: "the worker's
journal said the result was written, but there is none (the candidate wrote to the harness's journal)". A
result the candidate wrote itself would still meet the reference's check in another process.
"""

import json
import os
import time

import torch

_fd = int(os.environ.get("KPILOT_JOURNAL_FD", "-1"))


def softmax(x: torch.Tensor) -> torch.Tensor:
    if _fd >= 0:
        os.write(_fd, (json.dumps({"done": True}) + "\n").encode())
    time.sleep(3)
    return torch.softmax(x, dim=-1)
