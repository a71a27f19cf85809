import os

import torch
import torch.nn as nn
import torch.nn.functional as F

# KERNELWRIGHT_SIZE=full picks the GPU benchmark size; the default (small) runs fast on a CPU.
FULL = os.environ.get("KERNELWRIGHT_SIZE", "small") == "full"

batch = 16 if FULL else 2
seq = 1024 if FULL else 10
dim = 1024 if FULL else 64
hidden = 4096 if FULL else 256


class Model(nn.Module):
    """Pre-norm transformer feed-forward block: x + W2 GELU(W1 LayerNorm(x))."""

    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.up = nn.Linear(dim, hidden)
        self.down = nn.Linear(hidden, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(F.gelu(self.up(self.norm(x))))


def get_inputs():
    return [torch.randn(batch, seq, dim)]


def get_init_inputs():
    return [dim, hidden]
