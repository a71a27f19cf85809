"""The Triton skeleton: a `@triton.jit` kernel with program id, offsets, masks, loads (to fp32) and
the store, and its launcher (one program per BLOCK elements, or one per row with
`BLOCK = next_power_of_2(cols)`).
"""

from __future__ import annotations

from typing import Optional

from kernelwright.scaffold.types import KernelArg, Scaffold, ScaffoldPlan, Segment, SegmentKind
from kernelwright.scaffold.writers.base import (
    PLACEHOLDER,
    PY_DTYPES,
    RegionWords,
    assemble_program,
    ext_args,
    extra_params,
    launch_line,
    make_scaffold,
    marked_kernel,
    region_words,
    segment_wrapper,
    variables,
)

TRITON_BLOCK = 1024
# The math a region may call: the tl functions the region's own lines and definitions need (as the C
# targets' C_MATH): the whole line ended with the rule for tanh, and on the H200 the model answered
# lines without a tanh (mish's softplus, softplus) with that rule's `2 * tl.sigmoid(2 * x) - 1`.
# a word of the lines or definitions -> the tl functions for it, or the rule where tl has none
TRITON_NEEDS = {
    "exp": "tl.exp", "log": "tl.log", "log1p": "tl.log", "sqrt": "tl.sqrt", "rsqrt": "tl.rsqrt", "erf": "tl.erf",
    "sigmoid": "tl.sigmoid", "tanh": "tl.sigmoid", "max": "tl.maximum", "min": "tl.minimum",
    "clamp": "tl.minimum, tl.maximum", "abs": "tl.abs", "where": "tl.where(cond, a, b)", "cumsum": "tl.cumsum(v, axis=0)",
    "softplus": "tl.exp, tl.log, tl.where(cond, a, b)",
}
TRITON_RULES = {  # what tl does not have, said only where the lines need it
    "tanh": "there is no tl.tanh: tanh(v) = 2 * tl.sigmoid(2 * v) - 1", "pow": "there is no power operator: v * v",
    "log1p": "there is no tl.log1p: tl.log(1 + v)",
}
TRITON_ROW = "tl.sum(v, axis=0), tl.max(v, axis=0), tl.min(v, axis=0)"


def triton_math_line(seg: Segment) -> str:
    """The prompt's line on the tl functions the region may call."""
    words = region_words(seg)
    found: list[str] = []
    for word, text in ([("", TRITON_ROW)] if seg.kind == SegmentKind.ROW else []) + list(TRITON_NEEDS.items()):
        if word in words or not word:
            found += [n for n in text.split(", ") if n not in found]
    rules = [rule for word, rule in TRITON_RULES.items() if word in words]
    head = (f"the tl functions these lines need: {', '.join(found)}" if found
            else "no tl function is needed here (there are no tl.relu/tl.gelu functions)")
    return "; ".join([head, *rules])


def _tri_index(a: KernelArg, flat: str) -> Optional[str]:
    if a.pattern == "same":
        return flat
    if a.pattern == "scalar":
        return None
    return f"(({flat}) // {a.name}_inner) % {a.name}_span"


# A broadcast input read along a row kernel's row, the Triton twin of CUDA's kw_row_bcast: the
# launcher picks MODE from (inner, span, cols), so the position `((row * cols + offs) // inner) %
# span` is found once a row where the shape allows (a 64-bit division and modulo per value
# otherwise: a LayerNorm's weight and bias cost two a value, and a vector read along the row as
# `offs` is a contiguous, vectorised load).
TRITON_ROW_AT = '''@triton.jit
def kw_row_at(row, cols, offs, inner, span, MODE: tl.constexpr):
    if MODE == 0:  # one value per row
        at = (row * cols // inner) % span + offs * 0
    elif MODE == 1:  # a vector along the row
        at = (row * cols) % span + offs
    else:
        at = ((row * cols + offs) // inner) % span
    return at


'''
TRITON_ROW_MODE = '''def _kw_row_mode(inner, span, cols):
    """kw_row_at's MODE for a broadcast input of a row kernel."""
    if inner % cols == 0:
        return 0
    return 1 if inner == 1 and span % cols == 0 else 2


'''


def _tri_loads(seg: Segment, flat: str, indent: str, shown: bool = False) -> str:
    """The kernel's input loads; `shown`: as the model is shown them (the per-value position: the
    view names nothing of the launch machinery, which a small model copies)."""
    out = []
    for a in seg.args:
        if a.pattern == "broadcast" and seg.kind == SegmentKind.ROW and not shown:
            at = f"kw_row_at(row, cols, offs, {a.name}_inner, {a.name}_span, {a.name}_MODE)"
            out.append(f"{indent}{a.name} = tl.load({a.name}_ptr + {at}, mask=mask, other=0.0).to(tl.float32)")
            continue
        idx = _tri_index(a, flat)
        if idx is None:
            out.append(f"{indent}{a.name} = tl.load({a.name}_ptr).to(tl.float32)")
        else:
            out.append(f"{indent}{a.name} = tl.load({a.name}_ptr + {idx}, mask=mask, other=0.0).to(tl.float32)")
    return "\n".join(out) + "\n"


ROW_Y_INIT = "    y = tl.sum(x * 0.0, axis=0)\n"  # a per-row y before the region: a float32 scalar


def triton_kernel(seg: Segment, shown: bool = False) -> tuple[str, str]:
    """(`@triton.jit` kernel with PLACEHOLDER where the region goes, the region's indent): the
    skeleton's and the pre-check's; `shown`: the kernel as the model sees it (a row's broadcast
    inputs read per value, no kw_row_at)."""
    params = []
    for a in seg.args:
        params.append(f"{a.name}_ptr")
        if a.pattern == "broadcast":
            params += [f"{a.name}_inner", f"{a.name}_span"]
    params.append("out_ptr")
    indent = "    "
    if seg.kind == SegmentKind.ELEMENTWISE:
        return ("@triton.jit\n"
                f"def kw_fused_kernel({', '.join(params)}, n, BLOCK: tl.constexpr):\n"
                "    pid = tl.program_id(0).to(tl.int64)\n"
                "    offs = pid * BLOCK + tl.arange(0, BLOCK)\n"
                "    mask = offs < n\n"
                f"{_tri_loads(seg, 'offs', indent)}"
                f"    y = {seg.main.name}\n"
                f"{indent}{PLACEHOLDER}\n"
                "    tl.store(out_ptr + offs, y.to(out_ptr.dtype.element_ty), mask=mask)\n"), indent
    store = ("    tl.store(out_ptr + row, y.to(out_ptr.dtype.element_ty))\n" if seg.per_row_output else
             "    tl.store(out_ptr + row * cols + offs, y.to(out_ptr.dtype.element_ty), mask=mask)\n")
    # MODE 2 (per value) by default: the pre-check's stand-in passes every input as a full array
    modes = "" if shown else "".join(f", {a.name}_MODE: tl.constexpr = 2" for a in seg.args if a.pattern == "broadcast")
    helper = TRITON_ROW_AT if modes else ""
    # the row's length a compile-time constant, as Inductor compiles a shape: the mask, the row's
    # offsets and `/ cols` fold (one build per row length; a module has one). On the H200,
    # device time at each kernel's best warps: log_softmax 0.545 -> 0.404 ms (1.11x -> 1.49x
    # torch.compile), softmax, LayerNorm, RMSNorm and row max within 1% either way
    return (f"{helper}@triton.jit\n"
            f"def kw_fused_kernel({', '.join(params)}, cols: tl.constexpr, BLOCK: tl.constexpr{modes}):\n"
            "    row = tl.program_id(0).to(tl.int64)\n"
            "    offs = tl.arange(0, BLOCK)\n"
            "    mask = offs < cols\n"
            f"{_tri_loads(seg, 'row * cols + offs', indent, shown)}"
            + (ROW_Y_INIT if seg.per_row_output else "    y = x\n")
            + f"{indent}{PLACEHOLDER}\n" + store), indent


TRITON_WORDS = RegionWords(
    value="float32", element="a block of BLOCK elements of",
    elementwise_y="`y` (already set to x): assign the result block to it",
    row_input=("`{name}` (float32, BLOCK lanes, lane j = column j; lanes j >= cols, where `mask` is False, hold "
               "0.0): this row of {describe}"),
    row_loop=(), per_row_y="assign the row's single result (a scalar, e.g. from tl.sum(..., axis=0)) to `y`",
    row_y="assign the row's result block (BLOCK values) to `y`")


class TritonWriter:
    target = "triton"
    kinds = (SegmentKind.ELEMENTWISE, SegmentKind.ROW)

    def default_launch(self, seg: Segment) -> dict[str, int]:
        """Triton's block and warps as its own tutorials pick them."""
        if seg.kind == SegmentKind.ELEMENTWISE:
            return {"block": TRITON_BLOCK, "warps": 4}
        return {"warps": 0}  # 0: chosen from the row's block at call time (4, 8 or 16)

    def launch_grid(self, seg: Segment) -> list[dict[str, int]]:
        return ([{"block": b, "warps": w} for b in (1024, 2048, 4096) for w in (4, 8)]
                if seg.kind == SegmentKind.ELEMENTWISE else [{"warps": w} for w in (4, 8, 16)])

    def shared_programs(self, sc: Scaffold, regions: list[str]) -> Optional[list[str]]:
        return None  # a Triton kernel is compiled at launch: there is no build to share

    def write(self, plan: ScaffoldPlan, seg: Segment) -> Scaffold:
        kernel, indent = triton_kernel(seg)
        if seg.kind == SegmentKind.ELEMENTWISE:
            launch = ("    n = x.numel()\n"
                      f"    out = torch.empty(n, device=x.device, dtype={PY_DTYPES[seg.out_dtype]})\n"
                      '    block = KW_LAUNCH["block"]\n'
                      '    kw_fused_kernel[(triton.cdiv(n, block),)]({args}, out, n, BLOCK=block,\n'
                      '                                              num_warps=KW_LAUNCH["warps"])\n')
            default = "# (empty: y stays x)"
        else:
            size = "rows" if seg.per_row_output else "rows * cols"
            launch = ("    rows = x.numel() // cols\n"
                      f"    out = torch.empty({size}, device=x.device, dtype={PY_DTYPES[seg.out_dtype]})\n"
                      "    block = triton.next_power_of_2(cols)\n"
                      '    warps = KW_LAUNCH["warps"] or (4 if block <= 2048 else (8 if block <= 8192 else 16))\n'
                      "    kw_fused_kernel[(rows,)]({args}, out, cols, BLOCK=block, num_warps=warps{modes})\n")
            default = "# (empty)"
        modes = "".join(f", {a.name}_MODE=_kw_row_mode({a.name}_inner, {a.name}_span, cols)"
                        for a in seg.args if a.pattern == "broadcast" and seg.kind == SegmentKind.ROW)
        launch = launch.replace("{modes}", modes)
        # a per-row y starts as a scalar of the right type so that an empty region compiles; shown, the
        # line was the answer (H200: 6 of 13 row answers were `y = tl.sum(x * 0.0, axis=0)`)
        view = triton_kernel(seg, shown=True)[0]
        view = view.replace(ROW_Y_INIT, "") if seg.per_row_output else view
        kernel_prog, kernel_view = marked_kernel(kernel, indent, "#", view)
        args = ", ".join(["x"] + extra_params(seg))
        launcher = ("def kw_launch(x, " + ", ".join(ext_args(seg)) + "):\n").replace("(x, )", "(x)")
        launcher += launch.replace("{args}", args) + "    return out\n"
        launcher = f"{launch_line(self.default_launch(seg))}\n\n\n{TRITON_ROW_MODE if modes else ''}{launcher}"
        header = "import math\n\nimport torch\nimport triton\nimport triton.language as tl\n"
        call = f"kw_launch({', '.join(['x'] + ext_args(seg))})"
        program = assemble_program(plan, header, kernel_prog + "\n\n" + launcher, segment_wrapper(seg, call))
        return make_scaffold(plan, seg, "triton", program, kernel_view, indent, default, "python",
                             variables(seg, TRITON_WORDS, triton_math_line(seg)))
