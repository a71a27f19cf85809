"""Row softmax with a C++ syntax error."""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CPP_SOURCE = r"""
#include <torch/extension.h>
#include <cmath>

// Row softmax: max, then exp and sum in double, then scale.
torch::Tensor softmax_rows(torch::Tensor x) {
    auto xc = x.contiguous();
    auto out = torch::empty_like(xc);
    const float* p = xc.data_ptr<float>();
    float* o = out.data_ptr<float>();
    const int64_t rows = xc.size(0), cols = xc.size(1);
    for (int64_t r = 0; r < rows; ++r) {
        const float* row = p + r * cols;
        float m = row[0]
        for (int64_t c = 1; c < cols; ++c) m = row[c] > m ? row[c] : m;
        double s = 0.0;
        for (int64_t c = 0; c < cols; ++c) {
            const float e = std::exp(row[c] - m);
            o[r * cols + c] = e;
            s += e;
        }
        const float inv = static_cast<float>(1.0 / s);
        for (int64_t c = 0; c < cols; ++c) o[r * cols + c] *= inv;
    }
    return out;
}
"""

ext = load_inline(name="kwb_softmax_broken", cpp_sources=CPP_SOURCE, functions=["softmax_rows"], extra_cflags=["-O2"])


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return ext.softmax_rows(x)
