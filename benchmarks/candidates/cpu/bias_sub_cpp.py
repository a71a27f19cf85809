"""Bias add that subtracts."""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CPP_SOURCE = r"""
#include <torch/extension.h>

// x + bias, broadcasting the bias over rows.
torch::Tensor bias_add(torch::Tensor x, torch::Tensor b) {
    TORCH_CHECK(x.dim() == 2 && b.dim() == 1 && x.size(1) == b.size(0), "bias_add: shapes");
    auto xc = x.contiguous();
    auto bc = b.contiguous();
    auto out = torch::empty_like(xc);
    const float* xp = xc.data_ptr<float>();
    const float* bp = bc.data_ptr<float>();
    float* o = out.data_ptr<float>();
    const int64_t rows = xc.size(0), cols = xc.size(1);
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c)
            o[r * cols + c] = xp[r * cols + c] - bp[c];
    return out;
}
"""

ext = load_inline(name="kwb_bias_wrong", cpp_sources=CPP_SOURCE, functions=["bias_add"], extra_cflags=["-O2"])


class ModelNew(nn.Module):
    def __init__(self, features):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(features))

    def forward(self, x):
        return ext.bias_add(x, self.bias)
