"""Cheat (or a runaway): when imported it starts a process in a session of its own (``kpilot-cheat-orphan`` in its
command line, ten minutes of sleep), then hangs in its call. Meant for the case where the harness itself dies:
a SIGKILLed `kpilot` cannot clean up after its workers.

How it harms a harness: one whose workers only end when the parent kills them leaves the worker and the orphan
running (holding the GPU, or doing work during someone else's timing) after the parent is killed.

Caught by: each worker's supervisor watches its parent; when the harness's process is gone it kills the worker and
every process below it, the orphan included (``tests/test_sealed.py::test_workers_die_with_a_killed_parent``).
"""

import subprocess
import sys
import time

import torch

subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)  # kpilot-cheat-orphan"],
                 start_new_session=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                 stderr=subprocess.DEVNULL)


def softmax(x: torch.Tensor) -> torch.Tensor:
    time.sleep(600)
    return torch.softmax(x, dim=-1)
