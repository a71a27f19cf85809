"""Row mean that keeps the reduced dimension."""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CPP_SOURCE = r"""
#include <torch/extension.h>

// Mean over the last dimension, but keeps it: (batch, seq, 1) where (batch, seq) is expected.
torch::Tensor row_mean(torch::Tensor x) {
    auto xc = x.contiguous();
    const int64_t hidden = xc.size(-1);
    const int64_t rows = xc.numel() / hidden;
    auto out = torch::empty({xc.size(0), xc.size(1), 1}, xc.options());
    const float* p = xc.data_ptr<float>();
    float* o = out.data_ptr<float>();
    for (int64_t r = 0; r < rows; ++r) {
        double s = 0.0;
        for (int64_t c = 0; c < hidden; ++c) s += p[r * hidden + c];
        o[r] = static_cast<float>(s / hidden);
    }
    return out;
}
"""

ext = load_inline(name="kwb_rowmean_shape", cpp_sources=CPP_SOURCE, functions=["row_mean"], extra_cflags=["-O2"])


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return ext.row_mean(x)
