import os

import torch
import torch.nn as nn

# KERNELWRIGHT_SIZE=full picks the GPU benchmark size; the default (small) runs fast on a CPU.
FULL = os.environ.get("KERNELWRIGHT_SIZE", "small") == "full"

# Small sizes are deliberately not multiples of common tile sizes, to catch edge handling.
m = 4096 if FULL else 96
k = 8192 if FULL else 200
n = 4096 if FULL else 136


class Model(nn.Module):
    """Dense matrix product of two inputs: (m, k) @ (k, n)."""

    def __init__(self):
        super().__init__()

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.matmul(a, b)


def get_inputs():
    return [torch.randn(m, k), torch.randn(k, n)]


def get_init_inputs():
    return []
