"""Helpers shared by the problem's files, in the manner of GPU MODE's problems/<group>/utils.py."""

import random

import torch


def set_seed(seed: int = 42) -> None:
    random.seed(seed)
    torch.manual_seed(seed)
    if torch.cuda.is_available():
        torch.cuda.manual_seed_all(seed)


def get_device() -> torch.device:
    """CUDA where there is a GPU, else the CPU (GPU MODE's own problems always use CUDA)."""
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


@torch.no_grad()
def verbose_allclose(received: torch.Tensor, expected: torch.Tensor, rtol: float = 1e-05, atol: float = 1e-08,
                     max_print: int = 5) -> list[str]:
    """Reasons ``received`` is not close to ``expected`` (none when it is): |r - e| <= atol + rtol * |e|,
    NaN and infinities only where the expected tensor has them."""
    if received.shape != expected.shape:
        return [f"SIZE MISMATCH: got {tuple(received.shape)}, expected {tuple(expected.shape)}"]
    r, e = received.double(), expected.double()
    bad = (r - e).abs() > atol + rtol * e.abs()
    bad |= torch.isnan(r) ^ torch.isnan(e)
    bad |= torch.isposinf(r) ^ torch.isposinf(e)
    bad |= torch.isneginf(r) ^ torch.isneginf(e)
    count = int(bad.sum())
    if count == 0:
        return []
    reasons = [f"Number of mismatched elements: {count}"]
    for index in torch.nonzero(bad)[:max_print].tolist():
        i = tuple(index)
        reasons.append(f"ERROR AT {i}: {received[i].item()} {expected[i].item()}")
    if count > max_print:
        reasons.append(f"... and {count - max_print} more mismatched elements.")
    return reasons


def match_reference(data, output, reference, rtol: float = 1e-05, atol: float = 1e-08) -> tuple[bool, str]:
    expected = reference(data)
    reasons = verbose_allclose(output, expected, rtol=rtol, atol=atol)
    if reasons:
        return False, "mismatch found! custom implementation doesn't match reference: " + " ".join(reasons)
    return True, ""


def make_match_reference(reference, **kwargs):
    """A check_implementation(data, output) comparing ``output`` with ``reference(data)``."""
    def check_implementation(data, output):
        return match_reference(data, output, reference=reference, **kwargs)
    return check_implementation
