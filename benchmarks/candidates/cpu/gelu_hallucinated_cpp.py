"""GELU through an ATen call that does not exist."""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CPP_SOURCE = r"""
#include <torch/extension.h>

// Calls an ATen function that does not exist.
torch::Tensor gelu_tanh(torch::Tensor x) {
    return torch::fast_gelu_tanh_approx(x.contiguous());
}
"""

ext = load_inline(name="kwb_gelu_hall", cpp_sources=CPP_SOURCE, functions=["gelu_tanh"], extra_cflags=["-O2"])


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return ext.gelu_tanh(x)
