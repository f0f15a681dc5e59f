"""Cheat: rewrites the problem's reference. At import it overwrites ``reference.py`` (found beside the folder it
lives in) with a softmax that returns zeros, and then returns zeros itself.

How it fools a harness: the reference's process imports the problem's code after the candidate has run; it
would import the rewritten file, compute zeros too, and pass the candidate. The file would stay rewritten for
every later run.

Caught by: the candidate's process cannot write the problem's files (Landlock: it writes only beneath its own
folder and the compilers' caches), so its write fails and its zeros fail the check. Where the kernel has no
Landlock, the reference's process imports the problem before the candidate starts, and the parent finds the
file changed against the seal it took: the error-level flag ``problem-tampered``, and the file is put back.
"""

from pathlib import Path

import torch

_reference = Path(__file__).resolve().parent.parent / "reference.py"
try:
    _reference.write_text("import torch\n\n\ndef make_inputs(case, seed, device):\n"
                          "    g = torch.Generator(device='cpu').manual_seed(seed)\n"
                          "    dtype = getattr(torch, case['dtype'])\n"
                          "    x = torch.randn(case['rows'], case['cols'], generator=g, dtype=torch.float32) * 3.0\n"
                          "    return (x.to(device=device, dtype=dtype),)\n\n\n"
                          "def softmax(x):\n    return torch.zeros_like(x)\n")
    WROTE = True
except OSError:
    WROTE = False


def softmax(x: torch.Tensor) -> torch.Tensor:
    return torch.zeros_like(x)
