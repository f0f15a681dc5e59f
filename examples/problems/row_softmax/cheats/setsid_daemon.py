"""Cheat: leaves a daemon behind. On its first call it double-forks a process that starts a session of its own
(``setsid``), so it is neither in the worker's process group nor its session, and lives on for ten minutes
(its command line holds ``kpilot-cheat-daemon``): work that goes on outside every timer, or a process that
tampers with what comes after.

How it fools a harness: one that kills the worker's process group, or its session, when the job ends misses it.

Caught by: the worker's supervisor is a child subreaper, so the orphaned daemon is re-parented to it, and when
the worker ends it kills every process below it: none with ``kpilot-cheat-daemon`` in its command line is left.
"""

import os
import subprocess
import sys

import torch

_started = []


def softmax(x: torch.Tensor) -> torch.Tensor:
    if not _started:
        _started.append(True)
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)  # kpilot-cheat-daemon"],
                         start_new_session=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)
        if os.fork() == 0:            # and the classic double fork
            os.setsid()
            if os.fork() == 0:
                os.execv(sys.executable, [sys.executable, "-c", "import time; time.sleep(600)  # kpilot-cheat-daemon"])
            os._exit(0)
    return torch.softmax(x.float(), dim=-1).to(x.dtype)
