import os

import torch
import torch.nn as nn

# KERNELWRIGHT_SIZE=full picks the GPU benchmark size; the default (small) runs fast on a CPU.
FULL = os.environ.get("KERNELWRIGHT_SIZE", "small") == "full"

rows = 16384 if FULL else 48
features = 8192 if FULL else 520


class Model(nn.Module):
    """Adds a learned per-feature bias vector to every row of a 2-D input."""

    def __init__(self, features: int):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(features))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.bias


def get_inputs():
    return [torch.randn(rows, features)]


def get_init_inputs():
    return [features]
