import os

import torch
import torch.nn as nn
import torch.nn.functional as F

# KERNELWRIGHT_SIZE=full picks the GPU benchmark size; the default (small) runs fast on a CPU.
FULL = os.environ.get("KERNELWRIGHT_SIZE", "small") == "full"

tokens = 8192 if FULL else 16
dim = 1024 if FULL else 32
hidden = 4096 if FULL else 64


class Expert(nn.Module):
    """A two-layer GELU feed-forward network."""

    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.up = nn.Linear(dim, hidden)
        self.down = nn.Linear(hidden, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(F.gelu(self.up(x)))


class Model(nn.Module):
    """Soft mixture of two feed-forward experts, weighted per token by a learned softmax gate."""

    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.gate = nn.Linear(dim, 2)
        self.expert_a = Expert(dim, hidden)
        self.expert_b = Expert(dim, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        weights = torch.softmax(self.gate(x), dim=-1)
        return weights[:, :1] * self.expert_a(x) + weights[:, 1:] * self.expert_b(x)


def get_inputs():
    return [torch.randn(tokens, dim)]


def get_init_inputs():
    return [dim, hidden]
