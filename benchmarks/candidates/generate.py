"""Writes the committed candidate sets of benchmarks/eval_throughput.py (run once; the files are
committed, this script is kept so anyone can see how the set was made and extend it).

    .venv/bin/python benchmarks/candidates/generate.py

Each set holds 40 candidates for tasks of the built-in suite: correct ones, wrong ones, failing
ones (build errors, hallucinated APIs, runtime errors, shape mismatches, static violations, syntax
errors, no code), variants whose Python text differs around an identical extension source (their
builds are shared through the content-hash cache), and exact duplicates (common at low
temperature: evaluated once by the pool). manifest.json lists file -> task, what it is, and the
verdict we expect; the benchmark's pass/fail is "the simple way and the pool agree", the
expectation is reported beside it.
"""

from __future__ import annotations

import json
from pathlib import Path

HERE = Path(__file__).parent

HEAD = "import torch\nimport torch.nn as nn\nfrom torch.utils.cpp_extension import load_inline\n"


def cpp_candidate(doc: str, name: str, source: str, fn: str, init: str, forward: str) -> str:
    return (f'"""{doc}"""\n\n{HEAD}\nCPP_SOURCE = r"""\n{source.strip()}\n"""\n\n'
            f'ext = load_inline(name="{name}", cpp_sources=CPP_SOURCE, functions=["{fn}"], extra_cflags=["-O2"])\n\n\n'
            f"class ModelNew(nn.Module):\n{init}\n    def forward(self, x):\n        return {forward}\n")


def cuda_candidate(doc: str, name: str, decl: str, source: str, fn: str, init: str, forward: str) -> str:
    return (f'"""{doc}"""\n\n{HEAD}\nCPP_SOURCE = "{decl}"\n\nCUDA_SOURCE = r"""\n'
            "#include <torch/extension.h>\n#include <ATen/cuda/CUDAContext.h>\n#include <c10/cuda/CUDAException.h>\n\n"
            f'{source.strip()}\n"""\n\n'
            f'ext = load_inline(name="{name}", cpp_sources=CPP_SOURCE, cuda_sources=CUDA_SOURCE, functions=["{fn}"],\n'
            '                  extra_cuda_cflags=["-O3"])\n\n\n'
            f"class ModelNew(nn.Module):\n{init}\n    def forward(self, x):\n        return {forward}\n")


NO_INIT = "    def __init__(self):\n        super().__init__()\n"
BIAS_INIT = "    def __init__(self, features):\n        super().__init__()\n        self.bias = nn.Parameter(torch.randn(features))\n"
RMS_INIT = ("    def __init__(self, hidden, eps=1e-6):\n        super().__init__()\n        self.eps = eps\n"
            "        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(hidden))\n")

T = {
    "gelu": "builtin/L1/01_gelu_tanh",
    "bias": "builtin/L1/02_bias_add",
    "softmax": "builtin/L1/03_softmax",
    "logsoftmax": "builtin/L1/04_log_softmax",
    "rowsum": "builtin/L1/05_row_sum",
    "rowmean": "builtin/L1/06_row_mean",
    "rms": "builtin/L1/09_rms_norm",
    "transpose": "builtin/L1/13_transpose_copy",
}

# -- C++ (CPU) ------------------------------------------------------------------------------------

CPP_GELU = r"""
#include <torch/extension.h>
#include <cmath>

// GELU, tanh approximation, one pass over a contiguous float tensor.
torch::Tensor gelu_tanh(torch::Tensor x) {
    auto xc = x.contiguous();
    auto out = torch::empty_like(xc);
    const float* p = xc.data_ptr<float>();
    float* o = out.data_ptr<float>();
    const int64_t n = xc.numel();
    for (int64_t i = 0; i < n; ++i) {
        const float v = p[i];
        const float u = 0.7978845608028654f * (v + 0.044715f * v * v * v);
        o[i] = 0.5f * v * (1.0f + std::tanh(u));
    }
    return out;
}
"""
CPP_GELU_WRONG = CPP_GELU.replace("o[i] = 0.5f * v * (1.0f + std::tanh(u));", "o[i] = v > 0.0f ? v : 0.0f;  // relu, not gelu").replace("GELU, tanh", "Meant to be GELU, tanh")
CPP_BIAS = r"""
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
            o[r * cols + c] = xp[r * cols + c] + bp[c];
    return out;
}
"""
CPP_BIAS_WRONG = CPP_BIAS.replace("xp[r * cols + c] + bp[c]", "xp[r * cols + c] - bp[c]")
CPP_SOFTMAX = r"""
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
        float m = row[0];
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
CPP_SOFTMAX_BROKEN = CPP_SOFTMAX.replace("float m = row[0];", "float m = row[0]")
CPP_ROWSUM = r"""
#include <torch/extension.h>

// Row sums, accumulated in double, shape (rows, 1).
torch::Tensor row_sum(torch::Tensor x) {
    auto xc = x.contiguous();
    const int64_t rows = xc.size(0), cols = xc.size(1);
    auto out = torch::empty({rows, 1}, xc.options());
    const float* p = xc.data_ptr<float>();
    float* o = out.data_ptr<float>();
    for (int64_t r = 0; r < rows; ++r) {
        double s = 0.0;
        for (int64_t c = 0; c < cols; ++c) s += p[r * cols + c];
        o[r] = static_cast<float>(s);
    }
    return out;
}
"""
CPP_ROWSUM_WRONG = CPP_ROWSUM.replace("c < cols; ++c) s +=", "c < cols - 1; ++c) s +=")
CPP_ROWSUM_CHECK = CPP_ROWSUM.replace("auto xc = x.contiguous();", 'TORCH_CHECK(x.dim() == 3, "row_sum expects a 3-D input");\n    auto xc = x.contiguous();')
CPP_ROWMEAN_SHAPE = r"""
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
CPP_RMS = r"""
#include <torch/extension.h>
#include <cmath>

// RMSNorm over the last dimension with a per-feature weight.
torch::Tensor rms_norm(torch::Tensor x, torch::Tensor w, double eps) {
    auto xc = x.contiguous();
    auto wc = w.contiguous();
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
CPP_RMS_BROKEN = CPP_RMS.replace("auto wc = w.contiguous();", "auto wc = w.contiguous()\n    auto unused = wc.numel();")
CPP_TRANSPOSE = r"""
#include <torch/extension.h>

// (batch, a, b) -> (batch, b, a), materialised contiguously.
torch::Tensor transpose12(torch::Tensor x) {
    auto xc = x.contiguous();
    const int64_t n = xc.size(0), a = xc.size(1), b = xc.size(2);
    auto out = torch::empty({n, b, a}, xc.options());
    const float* p = xc.data_ptr<float>();
    float* o = out.data_ptr<float>();
    for (int64_t k = 0; k < n; ++k)
        for (int64_t i = 0; i < a; ++i)
            for (int64_t j = 0; j < b; ++j)
                o[(k * b + j) * a + i] = p[(k * a + i) * b + j];
    return out;
}
"""
CPP_GELU_HALLUCINATED = r"""
#include <torch/extension.h>

// Calls an ATen function that does not exist.
torch::Tensor gelu_tanh(torch::Tensor x) {
    return torch::fast_gelu_tanh_approx(x.contiguous());
}
"""

TORCH_ONLY = {
    "gelu": ("import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n\n\nclass ModelNew(nn.Module):\n"
             "    def forward(self, x):\n        return F.gelu(x, approximate=\"tanh\")\n"),
    "softmax": ("import torch\nimport torch.nn as nn\n\n\nclass ModelNew(nn.Module):\n    def forward(self, x):\n"
                "        e = torch.exp(x - x.amax(dim=-1, keepdim=True))\n        return e / e.sum(dim=-1, keepdim=True)\n"),
    "logsoftmax": ("import torch\nimport torch.nn as nn\n\n\nclass ModelNew(nn.Module):\n    def forward(self, logits):\n"
                   "        return logits - torch.logsumexp(logits, dim=-1, keepdim=True)\n"),
}
STATIC_TIMER = ("import time\n\nimport torch\nimport torch.nn as nn\n\ntime.perf_counter = lambda: 0.0  # rebinds the clock\n\n\n"
                "class ModelNew(nn.Module):\n    def forward(self, x):\n        return torch.softmax(x, dim=-1)\n")
STATIC_SYNC = ("import torch\nimport torch.nn as nn\n\ntorch.cuda.synchronize = lambda *a, **k: None\n\n\n"
               "class ModelNew(nn.Module):\n    def forward(self, x):\n        return x.sum(dim=-1, keepdim=True)\n")
SYNTAX = "import torch\nimport torch.nn as nn\n\n\nclass ModelNew(nn.Module)\n    def forward(self, x):\n        return x\n"
NO_CODE = "I would fuse the bias into the GEMM epilogue and use a warp-level reduction, but I have not written it yet.\n"
NO_MODELNEW = ("import torch\nimport torch.nn as nn\n\n\nclass Model2(nn.Module):\n    def forward(self, x):\n"
               "        return x.mean(dim=-1)\n")


def cpu_set() -> list[tuple[str, str, str, str, str]]:
    """(file, task key, kind, expected verdict, text)"""
    c = []

    def add(file, task, kind, verdict, text):
        c.append((file, task, kind, verdict, text))

    gelu = cpp_candidate("GELU (tanh) in C++.", "kwb_gelu", CPP_GELU, "gelu_tanh", NO_INIT, "ext.gelu_tanh(x)")
    add("gelu_cpp.py", "gelu", "correct", "correct", gelu)
    add("gelu_cpp_v2.py", "gelu", "same build, other text", "correct",
        gelu.replace("class ModelNew(nn.Module):", "# the whole op is one C++ loop\nclass ModelNew(nn.Module):"))
    add("gelu_relu_cpp.py", "gelu", "wrong", "wrong_output",
        cpp_candidate("GELU attempt that computes relu.", "kwb_gelu_wrong", CPP_GELU_WRONG, "gelu_tanh", NO_INIT, "ext.gelu_tanh(x)"))
    add("gelu_hallucinated_cpp.py", "gelu", "hallucinated API", "hallucinated_api",
        cpp_candidate("GELU through an ATen call that does not exist.", "kwb_gelu_hall", CPP_GELU_HALLUCINATED, "gelu_tanh", NO_INIT, "ext.gelu_tanh(x)"))
    add("gelu_torch.py", "gelu", "torch only", "no_custom_kernel", TORCH_ONLY["gelu"])
    bias_fwd = "ext.bias_add(x, self.bias)"
    bias = cpp_candidate("Bias add in C++.", "kwb_bias", CPP_BIAS, "bias_add", BIAS_INIT, bias_fwd)
    add("bias_cpp.py", "bias", "correct", "correct", bias)
    add("bias_cpp_v2.py", "bias", "same build, other text", "correct", bias.replace('"""Bias add in C++."""', '"""Bias add, one C++ loop over rows and columns."""'))
    add("bias_sub_cpp.py", "bias", "wrong", "wrong_output",
        cpp_candidate("Bias add that subtracts.", "kwb_bias_wrong", CPP_BIAS_WRONG, "bias_add", BIAS_INIT, bias_fwd))
    sm = cpp_candidate("Row softmax in C++.", "kwb_softmax", CPP_SOFTMAX, "softmax_rows", NO_INIT, "ext.softmax_rows(x)")
    add("softmax_cpp.py", "softmax", "correct", "correct", sm)
    add("softmax_cpp_v2.py", "softmax", "same build, other text", "correct", sm.replace("return ext.softmax_rows(x)", "y = ext.softmax_rows(x)\n        return y"))
    add("softmax_missing_semicolon_cpp.py", "softmax", "compile error", "compile_error",
        cpp_candidate("Row softmax with a C++ syntax error.", "kwb_softmax_broken", CPP_SOFTMAX_BROKEN, "softmax_rows", NO_INIT, "ext.softmax_rows(x)"))
    add("softmax_torch.py", "softmax", "torch only", "no_custom_kernel", TORCH_ONLY["softmax"])
    add("softmax_patch_clock.py", "softmax", "static violation", "static_violation", STATIC_TIMER)
    add("logsoftmax_torch.py", "logsoftmax", "torch only", "no_custom_kernel", TORCH_ONLY["logsoftmax"])
    rs = cpp_candidate("Row sum in C++.", "kwb_rowsum", CPP_ROWSUM, "row_sum", NO_INIT, "ext.row_sum(x)")
    add("rowsum_cpp.py", "rowsum", "correct", "correct", rs)
    rs_wrong = cpp_candidate("Row sum that skips the last column.", "kwb_rowsum_wrong", CPP_ROWSUM_WRONG, "row_sum", NO_INIT, "ext.row_sum(x)")
    add("rowsum_skip_last_cpp.py", "rowsum", "wrong", "wrong_output", rs_wrong)
    add("rowsum_skip_last_cpp_v2.py", "rowsum", "same build, other text", "wrong_output", rs_wrong.replace('"""Row sum that skips the last column."""', '"""Row sum (fast path)."""'))
    add("rowsum_check_cpp.py", "rowsum", "runtime error", "runtime_error",
        cpp_candidate("Row sum that insists on a 3-D input.", "kwb_rowsum_check", CPP_ROWSUM_CHECK, "row_sum", NO_INIT, "ext.row_sum(x)"))
    add("rowsum_patch_sync.py", "rowsum", "static violation", "static_violation", STATIC_SYNC)
    add("rowmean_keepdim_cpp.py", "rowmean", "shape mismatch", "shape_mismatch",
        cpp_candidate("Row mean that keeps the reduced dimension.", "kwb_rowmean_shape", CPP_ROWMEAN_SHAPE, "row_mean", NO_INIT, "ext.row_mean(x)"))
    add("rowmean_no_modelnew.py", "rowmean", "no ModelNew", "static_violation", NO_MODELNEW)
    rms_fwd = "ext.rms_norm(x, self.weight, self.eps)"
    add("rms_cpp.py", "rms", "correct", "correct", cpp_candidate("RMSNorm in C++.", "kwb_rms", CPP_RMS, "rms_norm", RMS_INIT, rms_fwd))
    add("rms_missing_semicolon_cpp.py", "rms", "compile error", "compile_error",
        cpp_candidate("RMSNorm with a C++ syntax error.", "kwb_rms_broken", CPP_RMS_BROKEN, "rms_norm", RMS_INIT, rms_fwd))
    add("transpose_cpp.py", "transpose", "correct", "correct",
        cpp_candidate("Transpose-copy in C++.", "kwb_transpose", CPP_TRANSPOSE, "transpose12", NO_INIT, "ext.transpose12(x)"))
    add("transpose_syntax_error.py", "transpose", "Python syntax error", "syntax_error", SYNTAX)
    add("bias_no_code.txt", "bias", "no code", "no_code", NO_CODE)
    return _with_duplicates(c, ["gelu_cpp.py", "bias_cpp.py", "softmax_cpp.py", "rowsum_cpp.py", "rms_cpp.py",
                                "transpose_cpp.py", "gelu_relu_cpp.py", "bias_sub_cpp.py", "rowsum_skip_last_cpp.py",
                                "softmax_missing_semicolon_cpp.py", "rms_missing_semicolon_cpp.py", "gelu_torch.py",
                                "softmax_torch.py", "transpose_syntax_error.py"])


def _with_duplicates(c, names):
    by = {x[0]: x for x in c}
    for n in names:
        f, task, kind, verdict, text = by[n]
        stem, ext = f.rsplit(".", 1)
        c.append((f"{stem}__dup.{ext}", task, f"exact duplicate of {f}", verdict, text))
    return c


# -- CUDA and Triton (H200) -----------------------------------------------------------------------

CU_REDUCE = r"""
__device__ __forceinline__ float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
// Block-wide reductions for blockDim.x a multiple of 32 (at most 1024); every thread gets the result.
__device__ float block_max(float v, float* sh) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    v = warp_max(v);
    if (lane == 0) sh[warp] = v;
    __syncthreads();
    v = (threadIdx.x < (blockDim.x >> 5)) ? sh[lane] : -INFINITY;
    if (warp == 0) v = warp_max(v);
    if (threadIdx.x == 0) sh[0] = v;
    __syncthreads();
    v = sh[0];
    __syncthreads();  // sh is reused by the next reduction
    return v;
}
__device__ float block_sum(float v, float* sh) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    v = warp_sum(v);
    if (lane == 0) sh[warp] = v;
    __syncthreads();
    v = (threadIdx.x < (blockDim.x >> 5)) ? sh[lane] : 0.0f;
    if (warp == 0) v = warp_sum(v);
    if (threadIdx.x == 0) sh[0] = v;
    __syncthreads();
    v = sh[0];
    __syncthreads();
    return v;
}
"""

CU_CHECK = 'TORCH_CHECK(x.is_cuda() && x.scalar_type() == torch::kFloat, "float32 CUDA tensor expected");'

CU_GELU = r"""
__global__ void gelu_tanh_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t n) {
    const int64_t stride = (int64_t)blockDim.x * gridDim.x;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += stride) {
        const float v = x[i];
        const float u = 0.7978845608028654f * (v + 0.044715f * v * v * v);
        y[i] = 0.5f * v * (1.0f + tanhf(u));
    }
}

torch::Tensor gelu_tanh(torch::Tensor x) {
    @CHECK@
    auto xc = x.contiguous();
    auto y = torch::empty_like(xc);
    const int64_t n = xc.numel();
    const int threads = 256;
    const int blocks = (int)std::min<int64_t>((n + threads - 1) / threads, 65535);
    gelu_tanh_kernel<<<blocks, threads, 0, at::cuda::getCurrentCUDAStream()>>>(xc.data_ptr<float>(), y.data_ptr<float>(), n);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
""".replace("@CHECK@", CU_CHECK)
CU_GELU_WRONG = CU_GELU.replace("y[i] = 0.5f * v * (1.0f + tanhf(u));", "y[i] = u > 0.0f ? v : 0.0f;  // relu, not gelu")
CU_GELU_ILLEGAL = CU_GELU.replace("y[i] = 0.5f * v * (1.0f + tanhf(u));",
                                  "y[i * 1000003LL] = 0.5f * v * (1.0f + tanhf(u));  // far out of bounds")
CU_GELU_HALLUCINATED = r"""
torch::Tensor gelu_tanh(torch::Tensor x) {
    return torch::fast_gelu_tanh_approx(x.contiguous());  // no such ATen function
}
"""
CU_SOFTMAX = CU_REDUCE + r"""
__global__ void softmax_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t cols) {
    __shared__ float sh[32];
    const float* row = x + (int64_t)blockIdx.x * cols;
    float* out = y + (int64_t)blockIdx.x * cols;
    float m = -INFINITY;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) m = fmaxf(m, row[c]);
    m = block_max(m, sh);
    float s = 0.0f;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) s += expf(row[c] - m);
    s = block_sum(s, sh);
    const float inv = 1.0f / s;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) out[c] = expf(row[c] - m) * inv;
}

torch::Tensor softmax_rows(torch::Tensor x) {
    @CHECK@
    auto xc = x.contiguous();
    auto y = torch::empty_like(xc);
    const int64_t cols = xc.size(-1), rows = xc.numel() / cols;
    softmax_kernel<<<(unsigned)rows, 256, 0, at::cuda::getCurrentCUDAStream()>>>(xc.data_ptr<float>(), y.data_ptr<float>(), cols);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
""".replace("@CHECK@", CU_CHECK)
CU_SOFTMAX_BROKEN = CU_SOFTMAX.replace("const float inv = 1.0f / s;", "const float inv = 1.0f / s")
CU_ROWSUM = CU_REDUCE + r"""
__global__ void row_sum_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t cols) {
    __shared__ float sh[32];
    const float* row = x + (int64_t)blockIdx.x * cols;
    float s = 0.0f;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) s += row[c];
    s = block_sum(s, sh);
    if (threadIdx.x == 0) y[blockIdx.x] = s;
}

torch::Tensor row_sum(torch::Tensor x) {
    @CHECK@
    auto xc = x.contiguous();
    const int64_t rows = xc.size(0), cols = xc.size(1);
    auto y = torch::empty({rows, 1}, xc.options());
    row_sum_kernel<<<(unsigned)rows, 256, 0, at::cuda::getCurrentCUDAStream()>>>(xc.data_ptr<float>(), y.data_ptr<float>(), cols);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
""".replace("@CHECK@", CU_CHECK)
CU_ROWSUM_WRONG = CU_ROWSUM.replace("c < cols; c += blockDim.x) s += row[c];", "c < cols - 1; c += blockDim.x) s += row[c];")
CU_ROWSUM_CHECK = CU_ROWSUM.replace(CU_CHECK, 'TORCH_CHECK(x.dim() == 3, "row_sum expects a 3-D input");')
CU_ROWMEAN_SHAPE = CU_REDUCE + r"""
__global__ void row_mean_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t hidden) {
    __shared__ float sh[32];
    const float* row = x + (int64_t)blockIdx.x * hidden;
    float s = 0.0f;
    for (int64_t c = threadIdx.x; c < hidden; c += blockDim.x) s += row[c];
    s = block_sum(s, sh);
    if (threadIdx.x == 0) y[blockIdx.x] = s / (float)hidden;
}

// Keeps the reduced dimension: (batch, seq, 1) where (batch, seq) is expected.
torch::Tensor row_mean(torch::Tensor x) {
    @CHECK@
    auto xc = x.contiguous();
    const int64_t hidden = xc.size(-1), rows = xc.numel() / hidden;
    auto y = torch::empty({xc.size(0), xc.size(1), 1}, xc.options());
    row_mean_kernel<<<(unsigned)rows, 256, 0, at::cuda::getCurrentCUDAStream()>>>(xc.data_ptr<float>(), y.data_ptr<float>(), hidden);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
""".replace("@CHECK@", CU_CHECK)
CU_RMS = CU_REDUCE + r"""
__global__ void rms_kernel(const float* __restrict__ x, const float* __restrict__ w, float* __restrict__ y,
                           int64_t hidden, float eps) {
    __shared__ float sh[32];
    const float* row = x + (int64_t)blockIdx.x * hidden;
    float* out = y + (int64_t)blockIdx.x * hidden;
    float ss = 0.0f;
    for (int64_t c = threadIdx.x; c < hidden; c += blockDim.x) ss += row[c] * row[c];
    ss = block_sum(ss, sh);
    const float inv = rsqrtf(ss / (float)hidden + eps);
    for (int64_t c = threadIdx.x; c < hidden; c += blockDim.x) out[c] = row[c] * inv * w[c];
}

torch::Tensor rms_norm(torch::Tensor x, torch::Tensor w, double eps) {
    @CHECK@
    auto xc = x.contiguous();
    auto wc = w.contiguous();
    auto y = torch::empty_like(xc);
    const int64_t hidden = xc.size(-1), rows = xc.numel() / hidden;
    rms_kernel<<<(unsigned)rows, 256, 0, at::cuda::getCurrentCUDAStream()>>>(
        xc.data_ptr<float>(), wc.data_ptr<float>(), y.data_ptr<float>(), hidden, (float)eps);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
""".replace("@CHECK@", CU_CHECK)
CU_TRANSPOSE = r"""
// 32x32 tiles through shared memory (padded against bank conflicts): reads and writes coalesced.
__global__ void transpose_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t a, int64_t b) {
    __shared__ float tile[32][33];
    const int64_t k = blockIdx.z;
    const float* src = x + k * a * b;  // (a, b)
    float* dst = y + k * a * b;        // (b, a)
    const int64_t j0 = (int64_t)blockIdx.x * 32, i0 = (int64_t)blockIdx.y * 32;
    for (int r = threadIdx.y; r < 32; r += blockDim.y) {
        const int64_t i = i0 + r, j = j0 + threadIdx.x;
        if (i < a && j < b) tile[r][threadIdx.x] = src[i * b + j];
    }
    __syncthreads();
    for (int r = threadIdx.y; r < 32; r += blockDim.y) {
        const int64_t j = j0 + r, i = i0 + threadIdx.x;
        if (i < a && j < b) dst[j * a + i] = tile[threadIdx.x][r];
    }
}

torch::Tensor transpose12(torch::Tensor x) {
    @CHECK@
    auto xc = x.contiguous();
    const int64_t n = xc.size(0), a = xc.size(1), b = xc.size(2);
    auto y = torch::empty({n, b, a}, xc.options());
    dim3 block(32, 8);
    dim3 grid((unsigned)((b + 31) / 32), (unsigned)((a + 31) / 32), (unsigned)n);
    transpose_kernel<<<grid, block, 0, at::cuda::getCurrentCUDAStream()>>>(xc.data_ptr<float>(), y.data_ptr<float>(), a, b);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
""".replace("@CHECK@", CU_CHECK)

TRITON_HEAD = "import torch\nimport torch.nn as nn\nimport triton\nimport triton.language as tl\n"
TRITON_GELU = TRITON_HEAD + '''

@triton.jit
def gelu_tanh_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    u = 0.7978845608028654 * (x + 0.044715 * x * x * x)
    t = 2.0 * tl.sigmoid(2.0 * u) - 1.0  # tanh(u)
    tl.store(y_ptr + offs, 0.5 * x * (1.0 + t), mask=mask)


class ModelNew(nn.Module):
    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        n = x.numel()
        gelu_tanh_kernel[(triton.cdiv(n, 1024),)](x, y, n, BLOCK=1024)
        return y
'''
TRITON_BIAS_SUB = TRITON_HEAD + '''

@triton.jit
def bias_kernel(x_ptr, b_ptr, y_ptr, n, features, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    b = tl.load(b_ptr + offs % features, mask=mask, other=0.0)
    tl.store(y_ptr + offs, x - b, mask=mask)  # subtracts: wrong for this task


class ModelNew(nn.Module):
    def __init__(self, features):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(features))

    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        n = x.numel()
        bias_kernel[(triton.cdiv(n, 1024),)](x, self.bias, y, n, x.shape[1], BLOCK=1024)
        return y
'''
TRITON_SOFTMAX = TRITON_HEAD + '''

@triton.jit
def softmax_kernel(x_ptr, y_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * n_cols
    y_row = y_ptr + row * n_cols
    m = tl.full([BLOCK], float("-inf"), tl.float32)
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        m = tl.maximum(m, tl.load(x_row + cols, mask=cols < n_cols, other=float("-inf")))
    row_max = tl.max(m, axis=0)
    s = tl.zeros([BLOCK], tl.float32)
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(x_row + cols, mask=cols < n_cols, other=float("-inf"))
        s += tl.exp(x - row_max)
    inv = 1.0 / tl.sum(s, axis=0)
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        mask = cols < n_cols
        x = tl.load(x_row + cols, mask=mask, other=float("-inf"))
        tl.store(y_row + cols, tl.exp(x - row_max) * inv, mask=mask)


class ModelNew(nn.Module):
    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        rows, cols = x.shape
        softmax_kernel[(rows,)](x, y, cols, BLOCK=ARANGE)
        return y
'''.replace("tl.arange(0, BLOCK)", "tl.arange(0, BLOCK)")
TRITON_SOFTMAX_OK = TRITON_SOFTMAX.replace("BLOCK=ARANGE", "BLOCK=1024")
# Triton needs power-of-two block sizes: this fails when the kernel is compiled, at its first launch.
TRITON_SOFTMAX_BAD_BLOCK = TRITON_SOFTMAX.replace("BLOCK=ARANGE", "BLOCK=1000")
TRITON_ROWSUM = TRITON_HEAD + '''

@triton.jit
def row_sum_kernel(x_ptr, y_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    acc = tl.zeros([BLOCK], tl.float32)
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        acc += tl.load(x_ptr + row * n_cols + cols, mask=cols < n_cols, other=0.0)
    tl.store(y_ptr + row, tl.sum(acc, axis=0))


class ModelNew(nn.Module):
    def forward(self, x):
        x = x.contiguous()
        rows, cols = x.shape
        y = torch.empty(rows, 1, device=x.device, dtype=x.dtype)
        row_sum_kernel[(rows,)](x, y, cols, BLOCK=1024)
        return y
'''
TRITON_RMS = TRITON_HEAD + '''

@triton.jit
def rms_kernel(x_ptr, w_ptr, y_ptr, n_cols, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * n_cols
    acc = tl.zeros([BLOCK], tl.float32)
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(x_row + cols, mask=cols < n_cols, other=0.0)
        acc += x * x
    inv = 1.0 / tl.sqrt(tl.sum(acc, axis=0) / n_cols + eps)
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        mask = cols < n_cols
        x = tl.load(x_row + cols, mask=mask, other=0.0)
        w = tl.load(w_ptr + cols, mask=mask, other=0.0)
        tl.store(y_ptr + row * n_cols + cols, x * inv * w, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, hidden, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(hidden))

    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        hidden = x.shape[-1]
        rms_kernel[(x.numel() // hidden,)](x, self.weight, y, hidden, self.eps, BLOCK=1024)
        return y
'''


def gpu_set() -> list[tuple[str, str, str, str, str]]:
    c = []

    def add(file, task, kind, verdict, text):
        c.append((file, task, kind, verdict, text))

    def cu(doc, name, decl, src, fn, init, fwd):
        return cuda_candidate(doc, name, decl, src, fn, init, fwd)

    g_decl = "torch::Tensor gelu_tanh(torch::Tensor x);"
    gelu = cu("GELU (tanh) in CUDA.", "kwg_gelu", g_decl, CU_GELU, "gelu_tanh", NO_INIT, "ext.gelu_tanh(x)")
    add("gelu_cuda.py", "gelu", "correct", "correct", gelu)
    add("gelu_cuda_v2.py", "gelu", "same build, other text", "correct",
        gelu.replace("class ModelNew(nn.Module):", "# one grid-stride kernel\nclass ModelNew(nn.Module):"))
    add("gelu_relu_cuda.py", "gelu", "wrong", "wrong_output",
        cu("GELU attempt that computes relu.", "kwg_gelu_wrong", g_decl, CU_GELU_WRONG, "gelu_tanh", NO_INIT, "ext.gelu_tanh(x)"))
    add("gelu_illegal_address_cuda.py", "gelu", "illegal memory access (recycles the slot)", "runtime_error",
        cu("GELU writing far out of bounds.", "kwg_gelu_illegal", g_decl, CU_GELU_ILLEGAL, "gelu_tanh", NO_INIT, "ext.gelu_tanh(x)"))
    add("gelu_hallucinated_cuda.py", "gelu", "hallucinated API", "hallucinated_api",
        cu("GELU through an ATen call that does not exist.", "kwg_gelu_hall", g_decl, CU_GELU_HALLUCINATED, "gelu_tanh", NO_INIT, "ext.gelu_tanh(x)"))
    add("gelu_triton.py", "gelu", "correct", "correct", TRITON_GELU)
    add("gelu_torch.py", "gelu", "torch only", "no_custom_kernel", TORCH_ONLY["gelu"])
    add("bias_sub_triton.py", "bias", "wrong", "wrong_output", TRITON_BIAS_SUB)
    s_decl = "torch::Tensor softmax_rows(torch::Tensor x);"
    sm = cu("Row softmax in CUDA: one block per row.", "kwg_softmax", s_decl, CU_SOFTMAX, "softmax_rows", NO_INIT, "ext.softmax_rows(x)")
    add("softmax_cuda.py", "softmax", "correct", "correct", sm)
    add("softmax_cuda_v2.py", "softmax", "same build, other text", "correct", sm.replace("return ext.softmax_rows(x)", "y = ext.softmax_rows(x)\n        return y"))
    add("softmax_missing_semicolon_cuda.py", "softmax", "compile error", "compile_error",
        cu("Row softmax with a CUDA syntax error.", "kwg_softmax_broken", s_decl, CU_SOFTMAX_BROKEN, "softmax_rows", NO_INIT, "ext.softmax_rows(x)"))
    add("softmax_triton.py", "softmax", "correct", "correct", TRITON_SOFTMAX_OK)
    add("softmax_triton_bad_block.py", "softmax", "Triton compile failure at launch", "runtime_error", TRITON_SOFTMAX_BAD_BLOCK)
    add("softmax_torch.py", "softmax", "torch only", "no_custom_kernel", TORCH_ONLY["softmax"])
    add("softmax_patch_clock.py", "softmax", "static violation", "static_violation", STATIC_TIMER)
    add("logsoftmax_torch.py", "logsoftmax", "torch only", "no_custom_kernel", TORCH_ONLY["logsoftmax"])
    r_decl = "torch::Tensor row_sum(torch::Tensor x);"
    add("rowsum_cuda.py", "rowsum", "correct", "correct",
        cu("Row sum in CUDA: one block per row.", "kwg_rowsum", r_decl, CU_ROWSUM, "row_sum", NO_INIT, "ext.row_sum(x)"))
    rs_wrong = cu("Row sum that skips the last column.", "kwg_rowsum_wrong", r_decl, CU_ROWSUM_WRONG, "row_sum", NO_INIT, "ext.row_sum(x)")
    add("rowsum_skip_last_cuda.py", "rowsum", "wrong", "wrong_output", rs_wrong)
    add("rowsum_skip_last_cuda_v2.py", "rowsum", "same build, other text", "wrong_output",
        rs_wrong.replace('"""Row sum that skips the last column."""', '"""Row sum (fast path)."""'))
    add("rowsum_check_cuda.py", "rowsum", "runtime error", "runtime_error",
        cu("Row sum that insists on a 3-D input.", "kwg_rowsum_check", r_decl, CU_ROWSUM_CHECK, "row_sum", NO_INIT, "ext.row_sum(x)"))
    add("rowsum_triton.py", "rowsum", "correct", "correct", TRITON_ROWSUM)
    add("rowsum_patch_sync.py", "rowsum", "static violation", "static_violation", STATIC_SYNC)
    add("rowmean_keepdim_cuda.py", "rowmean", "shape mismatch", "shape_mismatch",
        cu("Row mean that keeps the reduced dimension.", "kwg_rowmean_shape", "torch::Tensor row_mean(torch::Tensor x);",
           CU_ROWMEAN_SHAPE, "row_mean", NO_INIT, "ext.row_mean(x)"))
    add("rowmean_no_modelnew.py", "rowmean", "no ModelNew", "static_violation", NO_MODELNEW)
    rms_decl = "torch::Tensor rms_norm(torch::Tensor x, torch::Tensor w, double eps);"
    rms = cu("RMSNorm in CUDA: one block per row.", "kwg_rms", rms_decl, CU_RMS, "rms_norm", RMS_INIT, "ext.rms_norm(x, self.weight, self.eps)")
    add("rms_cuda.py", "rms", "correct", "correct", rms)
    add("rms_cuda_v2.py", "rms", "same build, other text", "correct", rms.replace('"""RMSNorm in CUDA: one block per row."""', '"""RMSNorm, fused."""'))
    add("rms_triton.py", "rms", "correct", "correct", TRITON_RMS)
    add("transpose_cuda.py", "transpose", "correct", "correct",
        cu("Transpose-copy in CUDA through shared-memory tiles.", "kwg_transpose", "torch::Tensor transpose12(torch::Tensor x);",
           CU_TRANSPOSE, "transpose12", NO_INIT, "ext.transpose12(x)"))
    add("transpose_syntax_error.py", "transpose", "Python syntax error", "syntax_error", SYNTAX)
    add("bias_no_code.txt", "bias", "no code", "no_code", NO_CODE)
    return _with_duplicates(c, ["gelu_cuda.py", "softmax_cuda.py", "rowsum_cuda.py", "rms_cuda.py", "transpose_cuda.py",
                                "gelu_triton.py", "softmax_triton.py", "gelu_relu_cuda.py", "rowsum_skip_last_cuda.py",
                                "softmax_missing_semicolon_cuda.py", "bias_sub_triton.py", "gelu_torch.py",
                                "softmax_torch.py", "transpose_syntax_error.py"])


def write(name: str, entries) -> None:
    folder = HERE / name
    folder.mkdir(exist_ok=True)
    for old in folder.iterdir():
        if old.suffix in (".py", ".txt"):
            old.unlink()
    manifest = []
    for file, task, kind, verdict, text in entries:
        (folder / file).write_text(text)
        manifest.append({"file": file, "task": T[task], "kind": kind, "expected": verdict})
    (folder / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    print(f"{folder}: {len(entries)} candidates")


if __name__ == "__main__":
    write("cpu", cpu_set())
    write("gpu", gpu_set())
