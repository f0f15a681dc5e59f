"""Inputs for softmax_large, generated on the device they are used on (a CPU generator would take seconds per
sample at these sizes and starve the timing of samples)."""

import torch


def make_inputs(case: dict, seed: int, device: str):
    g = torch.Generator(device=device).manual_seed(seed)
    x = torch.randn(case["rows"], case["cols"], generator=g, dtype=torch.float32, device=device) * 3.0
    return (x.to(getattr(torch, case["dtype"])),)
