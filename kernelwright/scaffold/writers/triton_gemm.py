"""The Triton skeleton of a `gemm` segment: a tiled GEMM whose epilogue is the model's region.

One program computes a BLOCK_M x BLOCK_N tile of the output: a loop over K in steps of BLOCK_K
loads masked tiles of A and B (through their strides: nn.Linear's [N, K] weight is read transposed
without a copy) and accumulates `tl.dot` in fp32; the bias, where the GEMM has one, is added to the
accumulator; the epilogue's extra inputs are loaded per output element (broadcasting resolved as in
the elementwise skeleton: a flat vector read at `(i // inner) % span`); then the region, and one
masked store. The region sees the accumulator tile as `x`, the epilogue's main input, and writes `y`.

Numerics: fp32 operands are multiplied in 3xTF32 (FP32_PRODUCTS = "split3"), never in one TF32
pass: Triton's default for fp32 `tl.dot` on NVIDIA is TF32 (10-bit mantissa), about 1e-3 relative
error, past the evaluator's 1e-4 fp32 tolerance and not what an fp32 reference computes (PyTorch's
matmul default is fp32 too). The launcher splits A and B once into TF32-rounded heads and tails
(`kw_split`: head + tail is the operand to about 2^-22 of it; B laid out [N, K], K-major, as the
tensor cores read TF32), and each K step sums tail x head + head x tail + head x head on the tensor
cores into a fresh partial, added to the fp32 accumulator: chained across the whole K loop instead,
the tensor cores' own accumulation was 10-14 times cuBLAS's error (benchmarks/gemm_products.py,
on the H200). Per step, about five times closer to the float64 product than cuBLAS's fp32 GEMM
and 1.8x faster. It does not round like cuBLAS, so on a long K some outputs differ from the fp32
reference by more than 1e-4: the evaluator then judges them against the reference run in float64
(measure/compare.py, `as_accurate`), where a TF32 pass fails by 70-230 times. The other products
("ieee": fp32 FMA, 0.84x cuBLAS; Triton's own "tf32x3", split inside the loop, 1.0x) stay available
to `products` for gemm_check.py.
fp16 / bf16 operands use the tensor cores as they are, accumulating in fp32.

Launch settings: a `@triton.autotune` list of tile shapes, stages and warps keyed on (M, N, K), not
the `KW_LAUNCH` line the other skeletons carry. The best GEMM tile depends on the shape and the GPU,
and Triton times the configs in the process at the first call, one compile each; a `KW_LAUNCH`
variant is a whole evaluation (search.py's launch sweep). Configs with tiles past the problem's
next power of two are pruned before timing; under the interpreter (TRITON_INTERPRET=1, the CPU
tests) only the first config left is run, its timings saying nothing about a GPU.
"""

from __future__ import annotations

from typing import Optional

from kernelwright.scaffold.types import KernelArg, Scaffold, ScaffoldPlan, Segment, SegmentKind
from kernelwright.scaffold.writers.base import (
    BCAST_HELPER,
    PLACEHOLDER,
    PY_DTYPES,
    abridge,
    extra_params,
    extra_shaping,
    make_scaffold,
    marked_kernel,
)
from kernelwright.scaffold.writers.triton import triton_math_line

# (BLOCK_M, BLOCK_N, BLOCK_K, num_stages, num_warps), largest tiles first: Triton's matmul tutorial's
# list for NVIDIA GPUs. fp32 operands under a one-dot product take BLOCK_K at most 32 (twice the
# bytes per element: the 64-deep tiles overflow shared memory at 3-4 stages).
CONFIGS = [(128, 256, 64, 3, 8), (256, 128, 64, 3, 8), (64, 256, 32, 4, 4), (128, 128, 32, 4, 4),
           (128, 64, 32, 4, 4), (64, 128, 32, 4, 4), (128, 32, 32, 4, 4), (64, 32, 32, 5, 2),
           (32, 64, 32, 5, 2), (32, 32, 32, 4, 2)]
FP32_MAX_BLOCK_K = 32
# 3xTF32 on split operands: four tiles a stage (heads and tails). H200, 4096 x 8192 x 4096 and
# 8192 x 4096 x 4096: (128, 128, 32, 3, 8) fastest on both (gemm_products.py); smaller ones for
# small problems (the prune keeps tiles within the problem).
SPLIT_CONFIGS = [(128, 128, 32, 3, 8), (128, 256, 32, 2, 8), (256, 128, 32, 2, 8), (128, 128, 32, 3, 4),
                 (128, 64, 32, 4, 4), (64, 128, 32, 4, 4), (64, 64, 32, 4, 4), (32, 64, 32, 4, 2),
                 (32, 32, 32, 4, 2)]
# rows of tiles that take their columns in turn (the programs running together share B's columns in L2)
GROUP_M = 8

PRUNE = '''
def _kw_prune(configs, named_args, **kwargs):
    """Configs whose tile is no larger than the problem needs (a 128-row tile on a 20-row GEMM
    only computes padding), at least one; under the interpreter only the first: its timings say
    nothing about a GPU, and each config costs a whole interpreted run."""
    m, n = named_args["kw_m"], named_args["kw_n"]
    fit = [c for c in configs if c.kwargs["BLOCK_M"] <= max(32, triton.next_power_of_2(m))
           and c.kwargs["BLOCK_N"] <= max(32, triton.next_power_of_2(n))]
    fit = fit or [min(configs, key=lambda c: c.kwargs["BLOCK_M"] * c.kwargs["BLOCK_N"])]
    return fit[:1] if os.environ.get("TRITON_INTERPRET") == "1" else fit
'''


def configs(a_dtype: str, products: str = "") -> list[tuple[int, int, int, int, int]]:
    """The autotune space for operands of ``a_dtype``, distinct, in order."""
    if _split(a_dtype, products):
        return list(SPLIT_CONFIGS)
    out: list[tuple[int, int, int, int, int]] = []
    for bm, bn, bk, stages, warps in CONFIGS:
        c = (bm, bn, min(bk, FP32_MAX_BLOCK_K) if a_dtype == "float32" else bk, stages, warps)
        if c not in out:
            out.append(c)
    return out


# How fp32 operands are multiplied: "split3" (3xTF32 on operands split once, the module's docstring
# says why), or a single `tl.dot` at "ieee" (fp32 FMA) or "tf32x3" (Triton's own split); never "tf32".
# gemm_check.py times the others beside it.
FP32_PRODUCTS = "split3"
PRODUCTS = ("split3", "ieee", "tf32x3", "tf32")


def _split(a_dtype: str, products: str) -> bool:
    return a_dtype == "float32" and (products or FP32_PRODUCTS) == "split3"


def dot_call(a_dtype: str, products: str = "") -> str:
    """The K loop's product on one pair of tiles: fp32 operands at `products`' precision (never one
    TF32 pass by default), tensor cores as they are otherwise."""
    precision = f', input_precision="{products or FP32_PRODUCTS}"' if a_dtype == "float32" else ""
    return f"kw_acc = tl.dot(kw_a_tile, kw_b_tile, kw_acc{precision})"


SPLIT_HELPERS = '''
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

'''

TILE_ORDER = f'''
@triton.jit
def kw_tile(kw_m, kw_n, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """This program's (row, column) of output tiles in grouped order: {GROUP_M} rows of tiles take
    their columns in turn, so the programs running together share B's columns in L2."""
    pid = tl.program_id(0)
    grid_n = tl.cdiv(kw_n, BLOCK_N)
    width = {GROUP_M} * grid_n
    first = (pid // width) * {GROUP_M}
    size = tl.minimum(tl.cdiv(kw_m, BLOCK_M) - first, {GROUP_M})
    return first + (pid % width) % size, (pid % width) // size

'''


def _load(a: KernelArg) -> str:
    if a.pattern == "scalar":
        return f"    {a.name} = tl.load({a.name}_ptr).to(tl.float32)\n"
    idx = "offs" if a.pattern == "same" else f"(offs // {a.name}_inner) % {a.name}_span"
    return f"    {a.name} = tl.load({a.name}_ptr + {idx}, mask=mask, other=0.0).to(tl.float32)\n"


def _wrap(params: list[str], width: int = 100) -> str:
    """Parameters over several lines, as a person would write them."""
    lines, cur = [], ""
    for p in params:
        if cur and len(cur) + len(p) + 2 > width:
            lines.append(cur + ",")
            cur = ""
        cur = f"{cur}, {p}" if cur else p
    return "\n                    ".join(lines + [cur])


def _k_loop(a_dtype: str, products: str) -> str:
    """The pointers to the first K step's tiles and the loop over K into `kw_acc` (fp32)."""
    if not _split(a_dtype, products):
        return (
            "    kw_a = kw_a_ptr + kw_batch * kw_sab + kw_rm[:, None] * kw_sam + kw_rk[None, :] * kw_sak\n"
            "    kw_b = kw_b_ptr + kw_batch * kw_sbb + kw_rk[:, None] * kw_sbk + kw_rn[None, :] * kw_sbn\n"
            "    kw_acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)\n"
            "    for kw_k0 in range(0, kw_kdim, BLOCK_K):\n"
            "        kw_a_tile = tl.load(kw_a, mask=(kw_rm[:, None] < kw_m) & (kw_rk[None, :] + kw_k0 < kw_kdim), other=0.0)\n"
            "        kw_b_tile = tl.load(kw_b, mask=(kw_rk[:, None] + kw_k0 < kw_kdim) & (kw_rn[None, :] < kw_n), other=0.0)\n"
            f"        {dot_call(a_dtype, products)}\n"
            "        kw_a += BLOCK_K * kw_sak\n"
            "        kw_b += BLOCK_K * kw_sbk\n")
    # heads and tails as kw_split wrote them: A [batch, M, K], B [batch, N, K]
    return (
        "    kw_a = (kw_batch * kw_m + kw_rm[:, None]) * kw_kdim + kw_rk[None, :]\n"
        "    kw_b = (kw_batch * kw_n + kw_rn[:, None]) * kw_kdim + kw_rk[None, :]\n"
        "    kw_acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)\n"
        "    for kw_k0 in range(0, kw_kdim, BLOCK_K):\n"
        "        kw_a_mask = (kw_rm[:, None] < kw_m) & (kw_rk[None, :] + kw_k0 < kw_kdim)\n"
        "        kw_b_mask = (kw_rn[:, None] < kw_n) & (kw_rk[None, :] + kw_k0 < kw_kdim)\n"
        "        kw_a_head = tl.load(kw_a_ptr + kw_a, mask=kw_a_mask, other=0.0)\n"
        "        kw_a_tail = tl.load(kw_a_tail_ptr + kw_a, mask=kw_a_mask, other=0.0)\n"
        "        kw_b_head = tl.trans(tl.load(kw_b_ptr + kw_b, mask=kw_b_mask, other=0.0))\n"
        "        kw_b_tail = tl.trans(tl.load(kw_b_tail_ptr + kw_b, mask=kw_b_mask, other=0.0))\n"
        "        # 3xTF32, the small terms first, summed on the tensor cores for this step only: the\n"
        "        # running sum over K stays in fp32 adds (chained, it was 10x cuBLAS's error)\n"
        '        kw_step = tl.dot(kw_a_tail, kw_b_head, input_precision="tf32")\n'
        '        kw_step = tl.dot(kw_a_head, kw_b_tail, kw_step, input_precision="tf32")\n'
        '        kw_step = tl.dot(kw_a_head, kw_b_head, kw_step, input_precision="tf32")\n'
        "        kw_acc += kw_step\n"
        "        kw_a += BLOCK_K\n"
        "        kw_b += BLOCK_K\n")


def triton_gemm_kernel(seg: Segment, products: str = "") -> tuple[str, str]:
    """(the autotuned `@triton.jit` kernel with PLACEHOLDER where the region goes, the region's indent).
    `products`: how fp32 operands are multiplied (PRODUCTS; default FP32_PRODUCTS)."""
    spec = seg.gemm
    assert spec is not None
    bias = spec.bias is not None
    split = _split(spec.a.dtype, products)
    operands = ["kw_a_ptr", "kw_a_tail_ptr", "kw_b_ptr", "kw_b_tail_ptr"] if split else ["kw_a_ptr", "kw_b_ptr"]
    strides = [] if split else ["kw_sab", "kw_sam", "kw_sak", "kw_sbb", "kw_sbk", "kw_sbn"]
    params = (operands + (["kw_bias_ptr"] if bias else [])
              + [p if p.endswith(("_inner", "_span")) else f"{p}_ptr" for p in extra_params(seg)]
              + ["out_ptr", "kw_m", "kw_n", "kw_kdim"] + strides
              + ["BLOCK_M: tl.constexpr", "BLOCK_N: tl.constexpr", "BLOCK_K: tl.constexpr"])
    indent = "    "
    bias_lines = ("    kw_bias = tl.load(kw_bias_ptr + kw_rn, mask=kw_rn < kw_n, other=0.0).to(tl.float32)\n"
                  "    kw_acc = kw_acc + kw_bias[None, :]\n") if bias else ""
    kernel = (
        '@triton.autotune(configs=KW_GEMM_CONFIGS, key=["kw_m", "kw_n", "kw_kdim"],\n'
        '                 prune_configs_by={"early_config_prune": _kw_prune})\n'
        "@triton.jit\n"
        f"def kw_fused_kernel({_wrap(params)}):\n"
        "    kw_pm, kw_pn = kw_tile(kw_m, kw_n, BLOCK_M, BLOCK_N)\n"
        "    kw_rm = (kw_pm * BLOCK_M + tl.arange(0, BLOCK_M)).to(tl.int64)\n"
        "    kw_rn = (kw_pn * BLOCK_N + tl.arange(0, BLOCK_N)).to(tl.int64)\n"
        "    kw_batch = tl.program_id(1).to(tl.int64)\n"
        "    kw_rk = tl.arange(0, BLOCK_K)\n"
        + _k_loop(spec.a.dtype, products)
        + f"{bias_lines}"
        "    mask = (kw_rm[:, None] < kw_m) & (kw_rn[None, :] < kw_n)\n"
        "    offs = kw_batch * kw_m * kw_n + kw_rm[:, None] * kw_n + kw_rn[None, :]  # flat index of each output\n"
        + "".join(_load(a) for a in seg.extras)
        + f"    {seg.main.name} = kw_acc\n"
        f"    y = {seg.main.name}\n"
        f"{indent}{PLACEHOLDER}\n"
        "    tl.store(out_ptr + offs, y.to(out_ptr.dtype.element_ty), mask=mask)\n")
    return kernel, indent


def _configs_text(a_dtype: str, products: str = "") -> str:
    rows = ",\n".join(f'    triton.Config({{"BLOCK_M": {bm}, "BLOCK_N": {bn}, "BLOCK_K": {bk}}}, num_stages={s}, '
                      f"num_warps={w})" for bm, bn, bk, s, w in configs(a_dtype, products))
    return f"KW_GEMM_CONFIGS = [\n{rows},\n]\n"


def _wrapper(seg: Segment) -> str:
    """Python `kw_fused(a, b[, bias], *extras)`: A's leading dims folded into M (or one product per
    batch), B read through its strides, the extras shaped against the output, the output shaped back."""
    spec = seg.gemm
    assert spec is not None
    gemm_params = ["kw_a", "kw_b"] + (["kw_bias"] if spec.bias is not None else [])
    extras = [a.name for a in seg.extras]
    lines = [f"def kw_fused({', '.join(gemm_params + extras)}):"]
    if spec.batched:
        lines += ["    shape = (kw_a.shape[0], kw_a.shape[1], kw_b.shape[2])"]
    else:
        n = "kw_b.shape[0]" if spec.b_transposed else "kw_b.shape[1]"
        lines += [f"    shape = tuple(kw_a.shape[:-1]) + ({n},)",
                  "    kw_a = kw_a.reshape(-1, kw_a.shape[-1])  # leading dims fold into M (a view where they can)"]
        if spec.b_transposed:
            lines.append("    kw_b = kw_b.t()  # [N, K] weight as [K, N]: a view (kw_launch lays it out for its loads)")
    if spec.bias is not None:
        lines.append("    kw_bias = kw_bias.contiguous()")
    lines += extra_shaping(seg.extras, "shape", "the output")
    lines.append(f"    return kw_launch({', '.join(gemm_params + extra_params(seg) + ['shape'])})")
    return "\n".join(lines) + "\n"


def _launcher(seg: Segment, products: str = "") -> str:
    spec = seg.gemm
    assert spec is not None
    gemm_params = ["kw_a", "kw_b"] + (["kw_bias"] if spec.bias is not None else [])
    lines = [f"def kw_launch({', '.join(gemm_params + extra_params(seg) + ['shape'])}):"]
    if spec.batched:
        lines += ["    kw_batch, kw_m, kw_kdim = kw_a.shape",
                  "    kw_n = kw_b.shape[2]"]
    else:
        lines += ["    kw_m, kw_kdim = kw_a.shape",
                  "    kw_n = kw_b.shape[1]",
                  "    kw_batch = 1"]
    if _split(spec.a.dtype, products):
        a3, b3 = ("kw_a", "kw_b") if spec.batched else ("kw_a[None]", "kw_b[None]")
        lines += ["    # 3xTF32: A and B split once into TF32 heads and tails, B as [N, K] (K-major, as the",
                  "    # tensor cores read TF32); a weight read transposed needs no copy besides",
                  f"    kw_a, kw_a_tail = kw_split({a3})",
                  f"    kw_b, kw_b_tail = kw_split({b3}.transpose(1, 2))"]
        operands, strides = ["kw_a", "kw_a_tail", "kw_b", "kw_b_tail"], ""
    else:
        # On the H200 the fp32 skeletons that read B transposed (nn.Linear's W^T) ran at
        # 0.47-0.64x eager, the row-major lone matmul at 0.86x; a row-major copy costs one pass
        # over the operand, small beside the GEMM's K passes (with it: 0.88-0.96x eager,
        # docs/results/skeleton-speed-h200.md)
        lines += ["    if kw_a.stride(-1) != 1:",
                  "        kw_a = kw_a.contiguous()  # tile loads along rows: a row-major copy",
                  "    if kw_b.stride(-1) != 1:",
                  "        kw_b = kw_b.contiguous()"]
        if spec.batched:
            lines += ["    kw_sab, kw_sam, kw_sak = kw_a.stride()",
                      "    kw_sbb, kw_sbk, kw_sbn = kw_b.stride()"]
        else:
            lines += ["    kw_sab, kw_sbb = 0, 0",
                      "    kw_sam, kw_sak = kw_a.stride()",
                      "    kw_sbk, kw_sbn = kw_b.stride()"]
        operands = ["kw_a", "kw_b"]
        strides = ",\n                          kw_sab, kw_sam, kw_sak, kw_sbb, kw_sbk, kw_sbn"
    rest = gemm_params[2:] + extra_params(seg)
    lines += [f"    out = torch.empty(shape, device=kw_a.device, dtype={PY_DTYPES[seg.out_dtype]})",
              "    grid = lambda meta: (triton.cdiv(kw_m, meta['BLOCK_M']) * triton.cdiv(kw_n, meta['BLOCK_N']), kw_batch)",
              f"    kw_fused_kernel[grid]({', '.join(operands + rest)}, out, kw_m, kw_n, kw_kdim{strides})",
              "    return out"]
    return "\n".join(lines) + "\n"


def variables(seg: Segment) -> list[str]:
    """What the region can read and must write, for the prompt."""
    spec = seg.gemm
    assert spec is not None
    main = seg.main
    gemm_line = seg.torch_lines[spec.lines - 1].removeprefix("# ")  # shown commented: computed before the region
    bias = ", its bias included" if spec.bias is not None else ""
    lines = [f"`{main.name}` (float32, a BLOCK_M x BLOCK_N tile of the output): the GEMM's result, `{gemm_line}` above"
             f"{bias}, already accumulated in fp32 by the kernel's loop over K; {main.describe}"]
    for a in seg.extras:
        lines.append(f"`{a.name}` (float32, the same BLOCK_M x BLOCK_N tile, one value per output element): {a.describe}")
    lines.append("`y` (already set to x): assign the result tile to it; it is stored where `mask` is True")
    return lines + [triton_math_line(seg)]


def gemm_view(kernel: str, seg: Segment) -> str:
    """The GEMM kernel as the model is shown it: the autotuning and the loop over K abridged to what
    they leave behind (on the H200, shown whole, 3 of 5 epilogue answers were `y = x`)."""
    spec = seg.gemm
    assert spec is not None
    # the accumulator is not named: a first view that said "in kw_acc" and kept `x = kw_acc` drew 7 of
    # 20 answers naming the kernel's kw_ variables (undefined where the pre-check runs the epilogue
    # on x), passes 3 -> 1 (docs/results/view-yield.md)
    main = seg.main.name
    last = "kw_acc = kw_acc + kw_bias" if spec.bias is not None else "kw_b += BLOCK_K"
    view = abridge(kernel, "kw_pm, kw_pn = ", last, "# ... the loop over K computes this program's BLOCK_M x BLOCK_N tile of "
                   "the product in fp32" + (", the bias added" if spec.bias is not None else ""))
    view = abridge(view, f"{main} = kw_acc", f"{main} = kw_acc", f"# {main}: that tile")
    return abridge(view, "@triton.autotune(", "prune_configs_by", "# (autotuned over BLOCK_M, BLOCK_N, BLOCK_K)")


def write_triton_gemm(plan: ScaffoldPlan, seg: Segment, products: str = "") -> Scaffold:
    """The GEMM skeleton; `products` (PRODUCTS) sets how fp32 operands are multiplied, for a
    benchmark's twins (default FP32_PRODUCTS)."""
    spec = seg.gemm
    assert spec is not None
    kernel, indent = triton_gemm_kernel(seg, products)
    kernel_prog, kernel_view = marked_kernel(kernel, indent, "#", gemm_view(kernel, seg))
    header = "import math\nimport os\n\nimport torch\nimport triton\nimport triton.language as tl\n"
    helper = BCAST_HELPER + "\n\n" if any(a.pattern == "broadcast" for a in seg.extras) else ""
    split = SPLIT_HELPERS if _split(spec.a.dtype, products) else ""
    program = (f"{header}\n{plan.prelude}\n{_configs_text(spec.a.dtype, products)}\n{PRUNE}\n{TILE_ORDER}{split}\n"
               f"{kernel_prog}\n\n{_launcher(seg, products)}\n\n{helper}{_wrapper(seg)}\n\n{plan.model_new}")
    return make_scaffold(plan, seg, "triton", program, kernel_view, indent, "# (empty: y stays x)", "python",
                         variables(seg))


class TritonGemmWriter:
    """The GEMM family on Triton: the kernel computes the GEMM, the region is its epilogue."""

    target = "triton"
    kinds = (SegmentKind.GEMM,)

    def write(self, plan: ScaffoldPlan, seg: Segment) -> Scaffold:
        return write_triton_gemm(plan, seg)

    def default_launch(self, seg: Segment) -> dict[str, int]:
        return {}  # the kernel's @triton.autotune config list picks tiles, stages and warps

    def launch_grid(self, seg: Segment) -> list[dict[str, int]]:
        return []  # autotuned in the kernel: a variant here would be an evaluation per tile shape

    def shared_programs(self, sc: Scaffold, regions: list[str]) -> Optional[list[str]]:
        return None  # a Triton kernel is compiled at launch: there is no build to share
