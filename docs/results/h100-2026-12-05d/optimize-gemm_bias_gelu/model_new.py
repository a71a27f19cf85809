# model_new.py: kept by `kernelwright optimize` for /tmp/kwout/gemm_bias_gelu.py
# best of 18 by the ranking key: correct, custom kernel, faster beyond noise (correct, speedup 1.36x); turn 0, sample 16
# device cuda:0, target triton; the full report is report.md
import math
import os

import torch
import triton
import triton.language as tl

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

KW_GEMM_CONFIGS = [
    triton.Config({"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 32}, num_stages=3, num_warps=8),
    triton.Config({"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 32}, num_stages=2, num_warps=8),
    triton.Config({"BLOCK_M": 256, "BLOCK_N": 128, "BLOCK_K": 32}, num_stages=2, num_warps=8),
    triton.Config({"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 32}, num_stages=3, num_warps=4),
    triton.Config({"BLOCK_M": 128, "BLOCK_N": 64, "BLOCK_K": 32}, num_stages=4, num_warps=4),
    triton.Config({"BLOCK_M": 64, "BLOCK_N": 128, "BLOCK_K": 32}, num_stages=4, num_warps=4),
    triton.Config({"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32}, num_stages=4, num_warps=4),
    triton.Config({"BLOCK_M": 32, "BLOCK_N": 64, "BLOCK_K": 32}, num_stages=4, num_warps=2),
    triton.Config({"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 32}, num_stages=4, num_warps=2),
]


def _kw_prune(configs, named_args, **kwargs):
    """Configs whose tile is no larger than the problem needs (a 128-row tile on a 20-row GEMM
    only computes padding), at least one; under the interpreter only the first: its timings say
    nothing about a GPU, and each config costs a whole interpreted run."""
    m, n = named_args["kw_m"], named_args["kw_n"]
    fit = [c for c in configs if c.kwargs["BLOCK_M"] <= max(32, triton.next_power_of_2(m))
           and c.kwargs["BLOCK_N"] <= max(32, triton.next_power_of_2(n))]
    fit = fit or [min(configs, key=lambda c: c.kwargs["BLOCK_M"] * c.kwargs["BLOCK_N"])]
    return fit[:1] if os.environ.get("TRITON_INTERPRET") == "1" else fit


@triton.jit
def kw_tile(kw_m, kw_n, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """This program's (row, column) of output tiles in grouped order: 8 rows of tiles take
    their columns in turn, so the programs running together share B's columns in L2."""
    pid = tl.program_id(0)
    grid_n = tl.cdiv(kw_n, BLOCK_N)
    width = 8 * grid_n
    first = (pid // width) * 8
    size = tl.minimum(tl.cdiv(kw_m, BLOCK_M) - first, 8)
    return first + (pid % width) % size, (pid % width) // size


@triton.jit
def kw_tf32(v):
    """v rounded to the nearest TF32 (10 mantissa bits) as fp32 bits; truncated where rounding up
    would overflow."""
    bits = v.to(tl.uint32, bitcast=True)
    up = ((bits + 0x1000) & 0xFFFFE000).to(tl.float32, bitcast=True)
    return tl.where(tl.abs(up) == float("inf"), (bits & 0xFFFFE000).to(tl.float32, bitcast=True), up)


@triton.jit
def kw_split_kernel(x_ptr, head_ptr, tail_ptr, rows, cols, s_batch, s_row, s_col,
                    BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr):
    """head = x in TF32, tail = (x - head) in TF32: head + tail is x to about 2^-22 of it; both
    written contiguous [batch, rows, cols], x read through its strides."""
    rr = (tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)).to(tl.int64)
    rc = (tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)).to(tl.int64)
    b = tl.program_id(2).to(tl.int64)
    mask = (rr[:, None] < rows) & (rc[None, :] < cols)
    x = tl.load(x_ptr + b * s_batch + rr[:, None] * s_row + rc[None, :] * s_col, mask=mask, other=0.0)
    head = kw_tf32(x)
    tail = kw_tf32(x - head)
    o = (b * rows + rr[:, None]) * cols + rc[None, :]
    tl.store(head_ptr + o, head, mask=mask)
    tl.store(tail_ptr + o, tail, mask=mask)


def kw_split(x):
    """x [batch, rows, cols] (any strides) as contiguous TF32 head and tail: one pass over it."""
    batch, rows, cols = x.shape
    head = torch.empty((batch, rows, cols), device=x.device, dtype=torch.float32)
    tail = torch.empty_like(head)
    # read across rows: square tiles, so reads and writes both stay in whole sectors
    br, bc = (64, 64) if x.stride(2) != 1 else (8, 512)
    grid = (triton.cdiv(rows, br), triton.cdiv(cols, bc), batch)
    kw_split_kernel[grid](x, head, tail, rows, cols, x.stride(0), x.stride(1), x.stride(2),
                          BLOCK_R=br, BLOCK_C=bc, num_warps=8)
    return head, tail


@triton.autotune(configs=KW_GEMM_CONFIGS, key=["kw_m", "kw_n", "kw_kdim"],
                 prune_configs_by={"early_config_prune": _kw_prune})
@triton.jit
def kw_fused_kernel(kw_a_ptr, kw_a_tail_ptr, kw_b_ptr, kw_b_tail_ptr, bias_ptr, bias_inner, bias_span, out_ptr, kw_m,
                    kw_n, kw_kdim, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    kw_pm, kw_pn = kw_tile(kw_m, kw_n, BLOCK_M, BLOCK_N)
    kw_rm = (kw_pm * BLOCK_M + tl.arange(0, BLOCK_M)).to(tl.int64)
    kw_rn = (kw_pn * BLOCK_N + tl.arange(0, BLOCK_N)).to(tl.int64)
    kw_batch = tl.program_id(1).to(tl.int64)
    kw_rk = tl.arange(0, BLOCK_K)
    kw_a = (kw_batch * kw_m + kw_rm[:, None]) * kw_kdim + kw_rk[None, :]
    kw_b = (kw_batch * kw_n + kw_rn[:, None]) * kw_kdim + kw_rk[None, :]
    kw_acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for kw_k0 in range(0, kw_kdim, BLOCK_K):
        kw_a_mask = (kw_rm[:, None] < kw_m) & (kw_rk[None, :] + kw_k0 < kw_kdim)
        kw_b_mask = (kw_rn[:, None] < kw_n) & (kw_rk[None, :] + kw_k0 < kw_kdim)
        kw_a_head = tl.load(kw_a_ptr + kw_a, mask=kw_a_mask, other=0.0)
        kw_a_tail = tl.load(kw_a_tail_ptr + kw_a, mask=kw_a_mask, other=0.0)
        kw_b_head = tl.trans(tl.load(kw_b_ptr + kw_b, mask=kw_b_mask, other=0.0))
        kw_b_tail = tl.trans(tl.load(kw_b_tail_ptr + kw_b, mask=kw_b_mask, other=0.0))
        # 3xTF32, the small terms first, summed on the tensor cores for this step only: the
        # running sum over K stays in fp32 adds (chained, it was 10x cuBLAS's error)
        kw_step = tl.dot(kw_a_tail, kw_b_head, input_precision="tf32")
        kw_step = tl.dot(kw_a_head, kw_b_tail, kw_step, input_precision="tf32")
        kw_step = tl.dot(kw_a_head, kw_b_head, kw_step, input_precision="tf32")
        kw_acc += kw_step
        kw_a += BLOCK_K
        kw_b += BLOCK_K
    mask = (kw_rm[:, None] < kw_m) & (kw_rn[None, :] < kw_n)
    offs = kw_batch * kw_m * kw_n + kw_rm[:, None] * kw_n + kw_rn[None, :]  # flat index of each output
    bias = tl.load(bias_ptr + (offs // bias_inner) % bias_span, mask=mask, other=0.0).to(tl.float32)
    x = kw_acc
    y = x
    # REGION BEGIN
    kw_x_in = x
    y = x
    y = x + bias
    v1 = y
    x = v1
    y = x
    y = x * 0.5 * (1 + tl.erf(x / 1.4142135623730951))
    v2 = y
    x = kw_x_in
    y = v2
    # REGION END
    tl.store(out_ptr + offs, y.to(out_ptr.dtype.element_ty), mask=mask)


def kw_launch(kw_a, kw_b, bias, bias_inner, bias_span, shape):
    kw_m, kw_kdim = kw_a.shape
    kw_n = kw_b.shape[1]
    kw_batch = 1
    # 3xTF32: A and B split once into TF32 heads and tails, B as [N, K] (K-major, as the
    # tensor cores read TF32); a weight read transposed needs no copy besides
    kw_a, kw_a_tail = kw_split(kw_a[None])
    kw_b, kw_b_tail = kw_split(kw_b[None].transpose(1, 2))
    out = torch.empty(shape, device=kw_a.device, dtype=torch.float32)
    grid = lambda meta: (triton.cdiv(kw_m, meta['BLOCK_M']) * triton.cdiv(kw_n, meta['BLOCK_N']), kw_batch)
    kw_fused_kernel[grid](kw_a, kw_a_tail, kw_b, kw_b_tail, bias, bias_inner, bias_span, out, kw_m, kw_n, kw_kdim)
    return out



def _kw_bcast(t, shape, cols=0):
    """t broadcast against `shape`, as (flat contiguous values, inner, span): element i of the
    broadcast tensor (row-major) is values[(i // inner) % span]. `cols`: a row kernel's row length;
    a pattern that is neither one value a row nor a vector along it is laid out like x, so that the
    kernel finds a row's values once (the CUDA kernel reads those two shapes only)."""
    nd, td = len(shape), t.dim()
    if td and tuple(t.shape) == shape[nd - td:]:
        # x's trailing dims (a bias): the common case first, as a small kernel's call is mostly
        # this Python (the general path and a reshape: 4-5 us a call on the 2-core CPU)
        if not cols or t.numel() % cols == 0:
            return (t if td == 1 else t.reshape(-1)).contiguous(), 1, t.numel()
    dims = [1] * (nd - td) + list(t.shape)
    varying = [d for d in range(nd) if dims[d] != 1]
    a, b = (varying[0], varying[-1]) if varying else (nd, nd - 1)
    if all(dims[d] == shape[d] for d in range(a, b + 1)):
        inner, span = math.prod(shape[b + 1:]) if varying else 1, math.prod(shape[a:b + 1])
        if not cols or inner % cols == 0 or (inner == 1 and span % cols == 0):
            return t.reshape(-1).contiguous(), inner, span
    full = t.expand(shape).contiguous()  # a pattern with gaps, or across a row: materialize it once
    return full.reshape(-1), 1, full.numel()


def kw_fused(kw_a, kw_b, bias):
    shape = tuple(kw_a.shape[:-1]) + (kw_b.shape[1],)
    kw_a = kw_a.reshape(-1, kw_a.shape[-1])  # leading dims fold into M (a view where they can)
    bias, bias_inner, bias_span = _kw_bcast(bias, shape)
    return kw_launch(kw_a, kw_b, bias, bias_inner, bias_span, shape)


class ModelNew(nn.Module):
    """y = gelu(x @ W^T + b), with the bias kept as its own parameter (the epilogue to fuse)."""

    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(out_features, in_features) / in_features ** 0.5)
        self.bias = nn.Parameter(torch.randn(out_features) * 0.1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        weight = self.weight
        t = weight.t()
        bias = self.bias
        fused = kw_fused(x, t, bias)
        return fused
