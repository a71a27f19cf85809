"""GELU through an ATen call that does not exist."""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CPP_SOURCE = "torch::Tensor gelu_tanh(torch::Tensor x);"

CUDA_SOURCE = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>

torch::Tensor gelu_tanh(torch::Tensor x) {
    return torch::fast_gelu_tanh_approx(x.contiguous());  // no such ATen function
}
"""

ext = load_inline(name="kwg_gelu_hall", cpp_sources=CPP_SOURCE, cuda_sources=CUDA_SOURCE, functions=["gelu_tanh"],
                  extra_cuda_cflags=["-O3"])


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return ext.gelu_tanh(x)
