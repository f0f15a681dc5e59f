"""Reference for row_softmax: softmax over the last dimension, computed in float32."""

import torch


def make_inputs(case: dict, seed: int, device: str):
    g = torch.Generator(device="cpu").manual_seed(seed)
    dtype = getattr(torch, case["dtype"])
    x = torch.randn(case["rows"], case["cols"], generator=g, dtype=torch.float32) * 3.0
    return (x.to(device=device, dtype=dtype),)


def softmax(x: torch.Tensor) -> torch.Tensor:
    return torch.softmax(x.float(), dim=-1).to(x.dtype)
