import torch
import torch.nn as nn

class Model(nn.Module):
    """
    Simple model that performs a ReLU activation.
    """
    def __init__(self):
        super(Model, self).__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """
        Applies ReLU activation to the input tensor.

        Args:
            x (torch.Tensor): Input tensor of any shape.

        Returns:
            torch.Tensor: Output tensor with ReLU applied, same shape as input.
        """
        return torch.relu(x)

# KernelBench level 1, problem 19, in its published form with smaller shapes so that CI runs it on a CPU
# (the Triton candidate under TRITON_INTERPRET=1) in well under a second. The published shapes are
# batch_size = 16, dim = 16384 (KernelBench v0) and batch_size = 4096, dim = 393216 (v0.1).
# The input is torch.randn as in v0: v0.1 draws torch.rand, all in [0, 1), on which ReLU is the identity
# and a kernel with the wrong slope for negative inputs passes.
batch_size = 16
dim = 4096

def get_inputs():
    x = torch.randn(batch_size, dim)
    return [x]

def get_init_inputs():
    return []  # No special initialization inputs needed
