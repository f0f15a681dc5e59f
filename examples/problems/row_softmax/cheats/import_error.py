"""Bad candidate: does not import. It imports a compiled extension that was never built, so importing the file
raises ``ModuleNotFoundError``.

Caught by: the import happens in the worker process; the result is an error that says the candidate could not be
run, with the reason (the module it could not find).
"""

import torch
import fused_softmax_ext  # noqa: F401  (never built)


def softmax(x: torch.Tensor) -> torch.Tensor:
    return fused_softmax_ext.softmax(x)
