import os

import torch
import torch.nn as nn

# KERNELWRIGHT_SIZE=full picks the GPU benchmark size; the default (small) runs fast on a CPU.
FULL = os.environ.get("KERNELWRIGHT_SIZE", "small") == "full"

tokens = 16384 if FULL else 64
hidden = 8192 if FULL else 512


class Model(nn.Module):
    """RMSNorm written out: x / sqrt(mean(x^2) + eps) times a learned per-feature weight."""

    def __init__(self, hidden: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(hidden))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        inv_rms = torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + self.eps)
        return x * inv_rms * self.weight


def get_inputs():
    return [torch.randn(tokens, hidden)]


def get_init_inputs():
    return [hidden]
