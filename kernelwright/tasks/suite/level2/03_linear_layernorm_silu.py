import os

import torch
import torch.nn as nn
import torch.nn.functional as F

# KERNELWRIGHT_SIZE=full picks the GPU benchmark size; the default (small) runs fast on a CPU.
FULL = os.environ.get("KERNELWRIGHT_SIZE", "small") == "full"

batch = 8192 if FULL else 24
in_features = 4096 if FULL else 160
hidden = 2048 if FULL else 96


class Model(nn.Module):
    """Linear projection, LayerNorm over the features, then SiLU."""

    def __init__(self, in_features: int, hidden: int):
        super().__init__()
        self.linear = nn.Linear(in_features, hidden)
        self.norm = nn.LayerNorm(hidden)
        with torch.no_grad():  # non-identity affine, so skipping it is caught
            self.norm.weight.copy_(1.0 + 0.1 * torch.randn(hidden))
            self.norm.bias.copy_(0.1 * torch.randn(hidden))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.silu(self.norm(self.linear(x)))


def get_inputs():
    return [torch.randn(batch, in_features)]


def get_init_inputs():
    return [in_features, hidden]
