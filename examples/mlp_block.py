"""A small transformer-style MLP block: expand, ReLU, project back, residual add.

KernelBench format: `Model`, `get_inputs()`, `get_init_inputs()`.
Run `kernelwright optimize examples/mlp_block.py` to get a verified rewrite.
"""

import os

import torch
import torch.nn as nn

# KERNELWRIGHT_SIZE=full is the GPU size (kernelwright sets it on a GPU); the default runs fast on a laptop CPU.
FULL = os.environ.get("KERNELWRIGHT_SIZE", "small") == "full"

tokens = 8192 if FULL else 64
dim = 2048 if FULL else 128
expansion = 4


class Model(nn.Module):
    """x + fc2(relu(fc1(x))): two library GEMMs with memory-bound work between and after them."""

    def __init__(self, dim: int, expansion: int):
        super().__init__()
        self.fc1 = nn.Linear(dim, dim * expansion)
        self.fc2 = nn.Linear(dim * expansion, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.fc2(torch.relu(self.fc1(x)))


def get_inputs():
    return [torch.randn(tokens, dim)]


def get_init_inputs():
    return [dim, expansion]
