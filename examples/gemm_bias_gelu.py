"""A GEMM with a bias + GELU epilogue: the first layer of every transformer MLP.

KernelBench format: `Model`, `get_inputs()`, `get_init_inputs()`.
Run `kernelwright optimize examples/gemm_bias_gelu.py` to get a verified rewrite.
"""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

# KERNELWRIGHT_SIZE=full is the GPU size (kernelwright sets it on a GPU); the default runs fast on a laptop CPU.
FULL = os.environ.get("KERNELWRIGHT_SIZE", "small") == "full"

batch = 4096 if FULL else 64
in_features = 4096 if FULL else 256
out_features = 4096 if FULL else 256


class Model(nn.Module):
    """y = gelu(x @ W^T + b), with the bias kept as its own parameter (the epilogue to fuse)."""

    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(out_features, in_features) / in_features**0.5)
        self.bias = nn.Parameter(torch.randn(out_features) * 0.1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(torch.matmul(x, self.weight.t()) + self.bias)


def get_inputs():
    return [torch.randn(batch, in_features)]


def get_init_inputs():
    return [in_features, out_features]
