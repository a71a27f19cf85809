"""RMSNorm with a C++ syntax error."""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CPP_SOURCE = r"""
#include <torch/extension.h>
#include <cmath>

// RMSNorm over the last dimension with a per-feature weight.
torch::Tensor rms_norm(torch::Tensor x, torch::Tensor w, double eps) {
    auto xc = x.contiguous();
    auto wc = w.contiguous()
    auto unused = wc.numel();
    auto out = torch::empty_like(xc);
    const float* p = xc.data_ptr<float>();
    const float* wp = wc.data_ptr<float>();
    float* o = out.data_ptr<float>();
    const int64_t hidden = xc.size(-1), rows = xc.numel() / hidden;
    for (int64_t r = 0; r < rows; ++r) {
        double ss = 0.0;
        for (int64_t c = 0; c < hidden; ++c) ss += double(p[r * hidden + c]) * p[r * hidden + c];
        const float inv = static_cast<float>(1.0 / std::sqrt(ss / hidden + eps));
        for (int64_t c = 0; c < hidden; ++c) o[r * hidden + c] = p[r * hidden + c] * inv * wp[c];
    }
    return out;
}
"""

ext = load_inline(name="kwb_rms_broken", cpp_sources=CPP_SOURCE, functions=["rms_norm"], extra_cflags=["-O2"])


class ModelNew(nn.Module):
    def __init__(self, hidden, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(hidden))

    def forward(self, x):
        return ext.rms_norm(x, self.weight, self.eps)
