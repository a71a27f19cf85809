"""fp32 GEMM products on a GPU: ways a Triton kernel can multiply fp32 operands, each timed (device
time, triton.testing.do_bench: CUDA events, L2 flushed, median) over an autotune space of its own,
beside cuBLAS's fp32 and TF32 GEMMs, and each one's error against the product in float64. It prints
one table per shape.

    python benchmarks/gemm_products.py --shape 4096x8192x4096 --shape 8192x4096x4096t --out gemm-products.md

A shape is MxKxN; a trailing `t` reads B as nn.Linear's [N, K] weight (transposed, through strides).

The products:
  ieee       fp32 FMA (`input_precision="ieee"`; the skeleton's policy before 3xTF32)
  tf32x3     Triton's own 3xTF32 (operands split into TF32 head and tail inside the K loop)
  split3     the operands split once before the GEMM into TF32-rounded head and tail arrays, K-major
             (one pass over each; B [K, N] is written [N, K], as the tensor cores take TF32
             operands), then three TF32 products a K step (tail x head, head x tail, head x head)
             summed on the tensor cores, the running sum over K in fp32 adds
  split3c    the same with the running sum kept on the tensor cores (chained accumulator)
  kmaj1      one TF32 product a K step on the K-major heads (the tensor cores' ceiling in this layout)
  tf32x3k, tf32k  the same with B read K-major (nn.Linear's weight as it is; a [K, N] B copied)
  tf32       one TF32 pass (1e-3 relative error: what an fp32 reference must not be computed with;
             the tensor cores' ceiling)
`--group` adds the grouped tile order (GROUP_M rows of tiles share B's columns in L2).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch
import triton
import triton.language as tl

# (BLOCK_M, BLOCK_N, BLOCK_K, num_stages, num_warps)
FMA_CONFIGS = [(128, 256, 32, 3, 8), (256, 128, 32, 3, 8), (64, 256, 32, 4, 4), (128, 128, 32, 4, 4),
               (128, 64, 32, 4, 4), (64, 128, 32, 4, 4)]
TC_CONFIGS = [(128, 128, 32, 3, 4), (128, 128, 32, 3, 8), (128, 128, 32, 4, 8), (128, 256, 32, 2, 8),
              (256, 128, 32, 2, 8), (128, 256, 16, 3, 8), (128, 128, 16, 4, 4), (64, 128, 32, 4, 4),
              (128, 64, 32, 4, 4), (128, 128, 64, 2, 8)]


@triton.jit
def _tile_ids(M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, GROUP_M: tl.constexpr):
    pid = tl.program_id(0)
    grid_m = tl.cdiv(M, BLOCK_M)
    grid_n = tl.cdiv(N, BLOCK_N)
    if GROUP_M == 1:
        return pid % grid_m, pid // grid_m
    width = GROUP_M * grid_n
    group = pid // width
    first = group * GROUP_M
    size = tl.minimum(grid_m - first, GROUP_M)
    return first + (pid % width) % size, (pid % width) // size


@triton.jit
def _gemm(a_ptr, b_ptr, c_ptr, M, N, K, sam, sak, sbk, sbn,
          BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
          PRECISION: tl.constexpr):
    pm, pn = _tile_ids(M, N, BLOCK_M, BLOCK_N, GROUP_M)
    rm = (pm * BLOCK_M + tl.arange(0, BLOCK_M)).to(tl.int64)
    rn = (pn * BLOCK_N + tl.arange(0, BLOCK_N)).to(tl.int64)
    rk = tl.arange(0, BLOCK_K)
    a = a_ptr + rm[:, None] * sam + rk[None, :] * sak
    b = b_ptr + rk[:, None] * sbk + rn[None, :] * sbn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        at = tl.load(a, mask=(rm[:, None] < M) & (rk[None, :] + k0 < K), other=0.0)
        bt = tl.load(b, mask=(rk[:, None] + k0 < K) & (rn[None, :] < N), other=0.0)
        acc = tl.dot(at, bt, acc, input_precision=PRECISION)
        a += BLOCK_K * sak
        b += BLOCK_K * sbk
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc, mask=(rm[:, None] < M) & (rn[None, :] < N))


@triton.jit
def _gemm_split3(ah_ptr, al_ptr, bh_ptr, bl_ptr, c_ptr, M, N, K,
                 BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
                 CHAINED: tl.constexpr, TERMS: tl.constexpr):
    """A's head and tail [M, K], B's [N, K] (K-major, as the tensor cores take TF32 operands)."""
    pm, pn = _tile_ids(M, N, BLOCK_M, BLOCK_N, GROUP_M)
    rm = (pm * BLOCK_M + tl.arange(0, BLOCK_M)).to(tl.int64)
    rn = (pn * BLOCK_N + tl.arange(0, BLOCK_N)).to(tl.int64)
    rk = tl.arange(0, BLOCK_K)
    ao = rm[:, None] * K + rk[None, :]
    bo = rn[:, None] * K + rk[None, :]
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        am = (rm[:, None] < M) & (rk[None, :] + k0 < K)
        bm = (rn[:, None] < N) & (rk[None, :] + k0 < K)
        ah = tl.load(ah_ptr + ao, mask=am, other=0.0)
        bh = tl.load(bh_ptr + bo, mask=bm, other=0.0)
        if TERMS == 3:
            al = tl.load(al_ptr + ao, mask=am, other=0.0)
            bl = tl.load(bl_ptr + bo, mask=bm, other=0.0)
        if CHAINED:
            if TERMS == 3:
                acc = tl.dot(al, tl.trans(bh), acc, input_precision="tf32")
                acc = tl.dot(ah, tl.trans(bl), acc, input_precision="tf32")
            acc = tl.dot(ah, tl.trans(bh), acc, input_precision="tf32")
        else:
            # one K step's products summed on the tensor cores, the running sum in fp32 adds
            if TERMS == 3:
                t = tl.dot(al, tl.trans(bh), input_precision="tf32")
                t = tl.dot(ah, tl.trans(bl), t, input_precision="tf32")
                t = tl.dot(ah, tl.trans(bh), t, input_precision="tf32")
            else:
                t = tl.dot(ah, tl.trans(bh), input_precision="tf32")
            acc += t
        ao += BLOCK_K
        bo += BLOCK_K
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc, mask=(rm[:, None] < M) & (rn[None, :] < N))


@triton.jit
def _round_tf32(x):
    """x rounded to the nearest TF32 (10-bit mantissa; ties away from zero), as fp32 bits; where
    rounding up overflows, truncated instead."""
    bits = x.to(tl.uint32, bitcast=True)
    up = ((bits + 0x1000) & 0xFFFFE000).to(tl.float32, bitcast=True)
    down = (bits & 0xFFFFE000).to(tl.float32, bitcast=True)
    return tl.where(tl.abs(up) == float("inf"), down, up)


@triton.jit
def _split(x_ptr, hi_ptr, lo_ptr, R, C, sr, sc, TRANSPOSE: tl.constexpr, BLOCK_R: tl.constexpr,
           BLOCK_C: tl.constexpr):
    """hi = x rounded to TF32, lo = (x - hi) rounded to TF32, both row-major ([R, C], or [C, R] when
    TRANSPOSE); x read through its strides."""
    rr = (tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)).to(tl.int64)
    rc = (tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)).to(tl.int64)
    mask = (rr[:, None] < R) & (rc[None, :] < C)
    x = tl.load(x_ptr + rr[:, None] * sr + rc[None, :] * sc, mask=mask, other=0.0)
    hi = _round_tf32(x)
    lo = _round_tf32(x - hi)
    o = rc[None, :] * R + rr[:, None] if TRANSPOSE else rr[:, None] * C + rc[None, :]
    tl.store(hi_ptr + o, hi, mask=mask)
    tl.store(lo_ptr + o, lo, mask=mask)


def split(x: torch.Tensor, k_major: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """x [R, C] as TF32 head and tail, laid out [R, C] row-major, or [C, R] when not k_major
    (B [K, N] becomes [N, K]: K-major, as the tensor cores take TF32 operands)."""
    r, c = x.shape
    transpose = not k_major
    shape = (c, r) if transpose else (r, c)
    hi = torch.empty(shape, device=x.device, dtype=torch.float32)
    lo = torch.empty_like(hi)
    # reading or writing across rows: square tiles, so both sides stay in whole sectors
    br, bc = (64, 64) if transpose or x.stride(1) != 1 else (8, 512)
    _split[(triton.cdiv(r, br), triton.cdiv(c, bc))](x, hi, lo, r, c, x.stride(0), x.stride(1), TRANSPOSE=transpose,
                                                      BLOCK_R=br, BLOCK_C=bc, num_warps=8)
    return hi, lo


def run(product: str, cfg: tuple, group: int, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    bm, bn, bk, stages, warps = cfg
    m, k = a.shape
    n = b.shape[1]
    c = torch.empty((m, n), device=a.device, dtype=torch.float32)
    grid = (triton.cdiv(m, bm) * triton.cdiv(n, bn),)
    if product.startswith(("split", "kmaj")):
        ah, al = split(a, True)
        bh, bl = split(b.t(), True)  # B^T [N, K]: K-major
        terms = 1 if product.startswith("kmaj") else 3
        _gemm_split3[grid](ah, al, bh, bl, c, m, n, k, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=group,
                           CHAINED=product.endswith("c"), TERMS=terms, num_stages=stages, num_warps=warps)
        return c
    if product.endswith("k"):  # B K-major: nn.Linear's weight as it is, a [K, N] operand copied
        product = product[:-1]
        if b.stride(0) != 1:
            b = b.t().contiguous().t()
    elif b.stride(1) != 1:
        b = b.contiguous()  # the skeleton's row-major copy
    _gemm[grid](a, b, c, m, n, k, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=group, PRECISION=product,
                num_stages=stages, num_warps=warps)
    return c


def bench(fn) -> float:
    return triton.testing.do_bench(fn, return_mode="median")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", action="append", default=[])
    ap.add_argument("--product", action="append", default=[])
    ap.add_argument("--group", type=int, action="append", default=[])
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    shapes = args.shape or ["4096x8192x4096", "8192x4096x4096t"]
    products = args.product or ["ieee", "tf32x3", "tf32x3k", "split3", "split3c", "kmaj1", "tf32", "tf32k"]
    groups = args.group or [1, 8]
    lines = [f"# fp32 GEMM products ({torch.cuda.get_device_name()}, torch {torch.__version__}, "
             f"Triton {triton.__version__})", "", "```", "python " + " ".join(sys.argv), "```", ""]
    torch.manual_seed(0)
    for shape in shapes:
        transposed = shape.endswith("t")
        m, k, n = (int(v) for v in shape.rstrip("t").split("x"))
        a = torch.randn(m, k, device="cuda")
        b = torch.randn(n, k, device="cuda").t() if transposed else torch.randn(k, n, device="cuda")
        exact = a.double() @ b.double()
        rows = []
        torch.backends.cuda.matmul.allow_tf32 = False
        ref = a @ b
        ref_err = float((ref.double() - exact).abs().max())
        cublas = bench(lambda: a @ b)
        rows.append(("cuBLAS fp32", "-", cublas, ref_err))
        torch.backends.cuda.matmul.allow_tf32 = True
        rows.append(("cuBLAS TF32", "-", bench(lambda: a @ b), float(((a @ b).double() - exact).abs().max())))
        torch.backends.cuda.matmul.allow_tf32 = False
        for product in products:
            for group in groups:
                best = None
                for cfg in (FMA_CONFIGS if product.startswith("ieee") else TC_CONFIGS):
                    t0 = time.time()
                    try:
                        out = run(product, cfg, group, a, b)
                        torch.cuda.synchronize()
                        ms = bench(lambda: run(product, cfg, group, a, b))
                    except Exception as e:  # noqa: BLE001 - a config that does not fit: the next
                        print(f"{shape} {product} g{group} {cfg}: {type(e).__name__}: {str(e)[:120]}", flush=True)
                        continue
                    err = float((out.double() - exact).abs().max())
                    print(f"{shape} {product} g{group} {cfg}: {ms:.3f} ms, err {err:.2g} ({time.time() - t0:.1f} s)",
                          flush=True)
                    if best is None or ms < best[1]:
                        best = (cfg, ms, err)
                if best:
                    rows.append((f"Triton {product}, group {group}", str(best[0]), best[1], best[2]))
        lines += [f"## {m} x {k} @ {k} x {n}" + (" (B transposed)" if transposed else ""), "",
                  f"cuBLAS fp32 {cublas:.3f} ms; error of the fp32 reference against float64: {ref_err:.2g}", "",
                  "| product | best config (BM, BN, BK, stages, warps) | ms | x cuBLAS fp32 | max abs err vs float64 | err / reference's |",
                  "|---|---|---|---|---|---|"]
        for name, cfg, ms, err in rows:
            lines.append(f"| {name} | {cfg} | {ms:.3f} | {cublas / ms:.3f} | {err:.2g} | {err / ref_err:.2f} |")
        lines.append("")
        del a, b, exact
        torch.cuda.empty_cache()
    text = "\n".join(lines)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
