"""A region a line at a time (kernelwright/scaffold/steps.py): each torch line of an elementwise
segment as its own task with its own probes, and the region composed from the lines' answers.

The oracle writes each line's answer from the line's own task (its torch line, its names): the
answer must pass that line's pre-check and a wrong one must not, and the composition of the right
answers must pass the whole region's pre-check, in each target. C++ and CUDA compile (`build`);
Triton runs on the NumPy `tl` (fast).
"""

from __future__ import annotations

import re
import shutil

import pytest

from kernelwright.scaffold import SegmentKind, plan_tasks, precheck_many, write
from kernelwright.scaffold.oracle import region
from kernelwright.scaffold.precheck.compare import decode
from kernelwright.scaffold.steps import LINE_ELEMENTS, compose, line_target, split, worth_it
from kernelwright.tasks import load_tasks

HARDSWISH = "builtin/L2/06_channel_affine_hardswish_residual"  # 4 lines; the last reads line 3 and the module's x
SOFTPLUS = "builtin/L2/09_conv2d_softplus_scale_bias"  # 3 lines, a broadcast extra on the last
MIXTURE = "builtin/L3/07_two_expert_mixture"  # a line that does not read the module's x at all
GELU = "builtin/L1/01_gelu_tanh"  # one composite line: its definition's three lines
BIAS = "builtin/L1/02_bias_add"  # one line, not composite: the whole region is the line
MISH = "builtin/L2/02_conv2d_mish_clamp"  # mish: softplus's parts, a tanh and a product
RMS = "builtin/L1/09_rms_norm"  # a row: elementwise lines on whole rows and on a value per row, a mean
NORM_SILU = "builtin/L2/03_linear_layernorm_silu"  # a row task with a whole-row result, read back by the next line
ROWMAX = "builtin/L2/08_linear_silu_rowmax"  # one value a row out
SOFTMAX_SCALE = "builtin/L2/05_linear_softmax_scale"
SOFTMAX = "builtin/L1/03_softmax"  # one line, a row task: split into max, exp, sum, divide
LOG_SOFTMAX = "builtin/L1/04_log_softmax"
LAYER_NORM = "builtin/L1/08_layer_norm"  # a LayerNorm module: its weight and bias in the last part
RMS_BF16 = "builtin/L2/07_residual_add_rmsnorm_bf16"  # a line on the norm's weight alone, [cols] wide
LINEAR_GELU = "builtin/L2/01_linear_gelu_scale"  # a GEMM's epilogue (Triton's GEMM skeleton): gelu, then a scale
LINEAR_HARDSWISH = "builtin/L2/10_linear_bias_hardswish_clamp"
MATMUL = "builtin/L1/10_matmul"  # a lone GEMM: its epilogue has no line


@pytest.fixture(scope="module")
def plans():
    tasks = [t for t in load_tasks("builtin") if t.id in (HARDSWISH, SOFTPLUS, MIXTURE, GELU, RMS, NORM_SILU, ROWMAX,
                                                                 SOFTMAX_SCALE, SOFTMAX, RMS_BF16, BIAS, MISH,
                                                                 LOG_SOFTMAX, LAYER_NORM, LINEAR_GELU,
                                                                 LINEAR_HARDSWISH, MATMUL)]
    return dict(zip([t.id for t in tasks], plan_tasks(tasks)))


def test_each_line_is_a_task_whose_input_is_its_x(plans) -> None:
    steps = split(plans[HARDSWISH])
    assert [s.line for s in split(plans[HARDSWISH], parts=False)] == [
        "y = x * gain", "y = x + shift", "y = torch.nn.functional.hardswish(x, inplace = False)", "y = x + x_in"]
    # hardswish is a composite op: the lines of its definition, the second reading its input too
    assert [s.line for s in steps] == ["y = x * gain", "y = x + shift", "y = x + 3", "y = torch.clamp(x, 0, 6)",
                                       "y = x * v4", "y = x / 6", "y = x + x_in"]
    assert [s.local for s in steps] == [f"v{k}" for k in range(1, 8)]
    # the line's first input is its x; the module's x, read by the last line too, is its x_in there
    assert steps[0].bindings == [] and steps[2].bindings == [("x", "v2")] and steps[4].inputs == [("x", "v2"), ("v4", "v4")]
    assert steps[6].bindings == [("x", "v6"), ("x_in", "x")]
    last = steps[6].plan
    assert [(a.name, a.main) for a in last.segment.args] == [("x", True), ("x_in", False)]
    # its probes are what PyTorch computed for line 3 (its x) and the module's input (its x_in),
    # and its expected values line 4's, which is the segment's output
    whole = plans[HARDSWISH].probes
    assert decode(last.probes.inputs["x"]) == pytest.approx(decode(whole.steps[2]), rel=1e-6)
    assert last.probes.inputs["x_in"] == whole.inputs["x"]
    assert decode(last.probes.expected) == decode(whole.expected)
    # one op's definition a line: hardswish's on its line only, when not split into its parts
    unsplit = split(plans[HARDSWISH], parts=False)
    assert any("hardswish" in n for n in unsplit[2].plan.segment.op_notes)
    assert not unsplit[0].plan.segment.op_notes and not unsplit[3].plan.segment.op_notes


def test_a_line_that_does_not_read_the_modules_x_does_not_see_it(plans) -> None:
    steps = split(plans[MIXTURE])
    second = steps[1].plan.segment
    assert steps[1].line == "y = x * expert_b_down" and steps[1].bindings == [("x", "getitem_1")]
    assert [a.name for a in second.args] == ["x", "expert_b_down"]


def test_a_single_elementwise_line_is_not_split(plans) -> None:
    assert split(plans[BIAS]) == [] and split(plans[GELU], parts=False) == []


def test_a_composite_op_is_the_lines_of_its_definition(plans) -> None:
    """GELU's tanh form, mish, softmax and a LayerNorm module as the lines of their definitions,
    each checked against the value the planning child computed for it in float32; the last part
    is the op's own value (PyTorch's, within rounding)."""
    assert [s.line for s in split(plans[GELU])] == [
        "y = x * x * x", "y = 0.044715 * x", "y = x + v2", "y = 0.7978845608028654 * x", "y = torch.tanh(x)",
        "y = 1 + x", "y = x * v6", "y = 0.5 * x"]
    mish = split(plans[MISH])
    assert [s.line for s in mish] == ["y = torch.abs(x)", "y = -1.0 * x", "y = torch.exp(x)", "y = torch.log1p(x)",
                                      "y = torch.relu(x)", "y = x + v4", "y = torch.tanh(x)", "y = x * v7",
                                      "y = torch.clamp(x, -0.25, 1.5)"]
    assert mish[4].inputs == [("x", "x")] and mish[5].inputs == [("x", "v5"), ("v4", "v4")]
    # one op a line, each with its own definition (relu's on the relu line)
    assert any(n.startswith("relu(v)") for n in mish[4].plan.segment.op_notes)
    whole = plans[MISH].probes
    assert decode(mish[7].plan.probes.expected) == pytest.approx(decode(whole.steps[0]), rel=1e-5, abs=1e-6)
    soft = split(plans[SOFTMAX])
    assert [(s.row_task, s.per_row) for s in soft] == [(True, True), (False, False), (False, False), (True, True),
                                                       (False, False)]
    assert soft[3].line == "y = torch.sum(x, dim=-1, keepdim=True)" and soft[3].inputs == [("x", "v3")]
    norm = split(plans[LAYER_NORM])
    assert [s.line for s in norm[-2:]] == ["y = x * weight", "y = x + bias"]
    assert [a.name for a in norm[-1].plan.segment.args] == ["x", "bias"]
    # a part that is a row task holds no module: the sum of the squared centred row, then / n
    cols = plans[LAYER_NORM].probes.cols
    assert norm[4].row_task and norm[4].line == "y = torch.sum(x, dim=-1, keepdim=True)" and norm[4].inputs == [("x", "v4")]
    assert norm[5].line == f"y = x / {cols}" and not norm[5].row_task and norm[5].per_row
    # a mean is a row's sum and a division by the row's length (rms_norm's `x.mean(dim = -1, keepdim = True)`)
    rms = split(plans[RMS])
    assert [s.line for s in rms[1:3]] == ["y = torch.sum(x, dim=-1, keepdim=True)", f"y = x / {plans[RMS].probes.cols}"]
    assert [(s.row_task, s.per_row) for s in rms[1:3]] == [(True, True), (False, True)]


def test_a_line_on_a_weight_broadcast_against_the_row_is_split(plans) -> None:
    """`weight.float()` has the weight's [cols] shape: its value on the probes is the weight read
    at each probe column, one per element like the others, and its line a task on the weight."""
    steps = split(plans[RMS_BF16], parts=False)
    # the residual add first (in the row kernel since its dtype is read only by the final cast)
    assert len(steps) == 10 and steps[0].line == "y = x + residual"
    assert steps[7].line == "y = x.float()" and steps[7].inputs == [("x", "weight")]
    assert not steps[7].per_row and steps[9].plan.segment.out_dtype == "bfloat16"
    cols = plans[RMS_BF16].probes.cols
    assert decode(steps[7].plan.probes.expected)[:cols] == decode(plans[RMS_BF16].probes.inputs["weight"])[:cols]


@pytest.mark.build  # the pre-check compiles its C++ (cc1plus)
def test_cuda_row_tasks_are_cpp_loops_spread_over_the_block_or_run_by_one_thread(plans) -> None:
    """A CUDA row task is the C++ row kernel's task (a loop over the row, no block reductions);
    a single-line row is worth splitting in CUDA only. Composed, a reduction's loop is strided over
    the block's threads and combined by the op's block reduction; else thread 0 runs it."""
    [one] = split(plans[SOFTMAX], parts=False)
    assert one.row_task and line_target(one, "cuda") == "cpp" and line_target(one, "triton") == "triton"
    assert worth_it([one], "cuda") and not worth_it([one], "cpp") and not worth_it([one], "triton")
    rms = split(plans[RMS], parts=False)
    assert [line_target(st, "cuda") for st in rms] == ["cuda", "cpp", "cuda", "cuda", "cuda", "cuda"]
    # a mean (its lines not split): no combiner of its own, but its answer's loop is a sum into a
    # value of its own, combined after it (_shared_loops); on thread 0 where strided is off
    answers = [region(write(st.plan, line_target(st, "cuda"))) for st in rms]
    composed = compose(rms, answers, plans[RMS].segment, "cuda")
    assert "t0 = block_sum(" in composed and "if (threadIdx.x == 0) {" not in composed
    alone = compose(rms, answers, plans[RMS].segment, "cuda", strided=False)
    assert "__shared__ float kw_sh_v2;" in alone and "if (threadIdx.x == 0) {" in alone
    assert alone.count("__syncthreads();") == 1
    # the row task's loop accumulates in double (a float sum over a long row drifts past atol)
    assert "double y = 0.0;" in composed and "double y = 0.0;" in alone
    # split, the mean is a sum and a division: the sum's loop is spread over the block
    parts = split(plans[RMS])
    answers = [region(write(st.plan, line_target(st, "cuda"))) for st in parts]
    spread = compose(parts, answers, plans[RMS].segment, "cuda")
    assert "j = threadIdx.x; j < cols; j += blockDim.x) { t0 += x(j); }" in spread
    assert "v2 = block_sum(static_cast<float>(y));" in spread and "if (threadIdx.x == 0)" not in spread
    serial = compose(parts, answers, plans[RMS].segment, "cuda", strided=False)
    assert "if (threadIdx.x == 0) {" in serial and "block_sum" not in serial
    assert all(c.passed for c in precheck_many(plans[RMS], "cuda", [spread, serial, composed, alone]))


@pytest.mark.parametrize(("answer", "op", "spread"), [
    ("float t = 0.0f;\nfor (int64_t j = 0; j < cols; ++j) { t += x(j); }\ny = t;", "sum", True),
    ("#pragma omp simd\nfor (int64_t j = 0; j < cols; ++j) {\n    y += x(j) * x(j);\n}", "sum", True),
    ("float m = -INFINITY;\nfor (int j = 0; j < cols; j++) m = fmaxf(m, x(j));\ny = m;", "amax", True),
    # not the op's identity to start from, a loop from 1, work after the loop, a second loop, a scan
    ("float s = 1.0f;\nfor (int64_t j = 0; j < cols; ++j) s += x(j);\ny = s;", "sum", False),
    ("y = x(0);\nfor (int64_t j = 1; j < cols; ++j) y = fmaxf(y, x(j));", "amax", False),
    ("float s = 0;\nfor (int64_t j = 0; j < cols; ++j) s += x(j);\ny = s / cols;", "sum", False),
    ("for (int64_t j = 0; j < cols; ++j) y += x(j);\nfor (int64_t j = 0; j < cols; ++j) y += 0;", "sum", False),
    ("float t = 0.0f;\nfor (int64_t j = 0; j < cols; ++j) { t += x(j); y[j] = t; }", "cumsum", False),
])
def test_a_row_reduction_is_strided_only_where_its_answer_allows(answer, op, spread) -> None:
    from kernelwright.scaffold.steps import _strided

    out = _strided(answer, op)
    assert (out is not None) == spread
    if spread:
        assert out.count("for (int64_t j = threadIdx.x; j < cols; j += blockDim.x)") == 1
    from kernelwright.scaffold.steps import _wide

    assert _wide("float s = 0.0f;\nfloat* p = y;\ny = s / (float)cols;") == \
        "double s = 0.0f;\nfloat* p = y;\ny = s / (double)cols;"


SOFTMAX_ROW = """double m = -INFINITY;
for (int64_t j = 0; j < cols; ++j) m = fmax(m, x(j));
double s = 0.0;
for (int64_t j = 0; j < cols; ++j) { y[j] = exp(x(j) - m); s += y[j]; }
for (int64_t j = 0; j < cols; ++j) y[j] /= s;"""
NORM_ROW = """double mean = 0.0f;
double var = 0.0f;
for (int64_t j = 0; j < cols; ++j) {
    mean += x(j);
}
mean /= cols;
for (int64_t j = 0; j < cols; ++j) {
    var += (x(j) - mean) * (x(j) - mean);  // the squared deviation
}
var /= cols;
for (int64_t j = 0; j < cols; ++j) {
    y[j] = (x(j) - mean) / std::sqrt(var + 1e-05) * weight(j) + bias(j);
}"""


@pytest.mark.parametrize(("answer", "combined"), [
    (SOFTMAX_ROW, ["m = block_max", "s = block_sum"]),
    (NORM_ROW, ["mean = block_sum", "var = block_sum"]),
    # one value a row: the scalar y accumulates from its composition's 0.0
    ("double mean = 0;\nfor (int j = 0; j < cols; j++) mean += x(j);\nmean /= cols;\n"
     "for (int j = 0; j < cols; j++) { double d = x(j) - mean; y += d * d; }\ny /= cols;",
     ["mean = block_sum", "y = block_sum"]),
    ("for (int64_t j = 0; j < cols; ++j) y[j] = x(j) * 2.0f;", []),
    # a prefix sum (the running value read in the loop), the row read at another column, a sum
    # from a start that is not its identity, a second sum onto a combined one, a nested loop, a
    # write to the row outside the loops, a value assigned in the loop that is no reduction
    ("double t = 0.0;\nfor (int64_t j = 0; j < cols; ++j) { t += x(j); y[j] = t; }", None),
    ("y[0] = x(0);\nfor (int64_t j = 1; j < cols; ++j) y[j] = y[j - 1] + x(j);", None),
    ("for (int64_t j = 0; j < cols; ++j) y[j] = x(j);\nfor (int64_t j = 0; j < cols; ++j) y[j] += y[cols - 1 - j];", None),
    ("double s = 1.0;\nfor (int64_t j = 0; j < cols; ++j) s += x(j);\nfor (int64_t j = 0; j < cols; ++j) y[j] = s;", None),
    ("double s = 0.0;\nfor (int64_t j = 0; j < cols; ++j) s += x(j);\nfor (int64_t j = 0; j < cols; ++j) s += x(j);\n"
     "for (int64_t j = 0; j < cols; ++j) y[j] = s;", None),
    ("for (int64_t j = 0; j < cols; ++j) { for (int64_t k = 0; k < 4; ++k) y[j] = x(j); }", None),
    ("double last = 0.0;\nfor (int64_t j = 0; j < cols; ++j) { last = x(j); y[j] = last; }", None),
])
def test_a_row_tasks_loops_are_spread_over_the_block_where_every_thread_can_run_them(answer, combined) -> None:
    """A row task the model wrote as several loops (a softmax, a norm): each loop strided over the
    block's threads and each of its reductions combined after it, where that computes what one thread
    would; else None (the task stays on thread 0)."""
    from kernelwright.scaffold.steps import _shared_loops

    out = _shared_loops(answer)
    assert (out is None) == (combined is None)
    if out is not None:
        loops = answer.count("for (")
        assert out.count("j = threadIdx.x; j < cols; j += blockDim.x)") == loops
        assert [ln.split("(")[0].strip() for ln in out.splitlines() if "= block_" in ln] == combined


@pytest.mark.build  # the pre-check compiles its C++ (cc1plus)
@pytest.mark.parametrize(("task", "answer"), [(SOFTMAX, SOFTMAX_ROW), (LAYER_NORM, NORM_ROW)])
def test_a_row_task_of_several_loops_is_spread_and_checked_with_a_blocks_threads(plans, task, answer) -> None:
    """The model's whole-row answers (a softmax, a LayerNorm as mean, variance and write loops) spread
    over the block pass the pre-check, whose host shim runs a block's threads: without the combine
    after the sum, every thread divides by its own share, and the pre-check finds it."""
    steps = split(plans[task], parts=False)
    assert [s.row_task for s in steps] == [True]
    spread = compose(steps, [answer], plans[task].segment, "cuda")
    unsummed = "\n".join(ln for ln in spread.splitlines() if not re.search(r"\b(s|var) = block_sum", ln))
    assert "if (threadIdx.x == 0)" not in spread and unsummed != spread
    got = precheck_many(plans[task], "cuda", [spread, unsummed])
    assert got[0].passed, got[0]
    assert got[1].status.value == "counterexample"


def test_a_row_is_split_into_elementwise_lines_and_row_tasks(plans) -> None:
    """rms_norm: x.pow(2) an elementwise line on whole rows, the mean a row task with one value a
    row, the eps and rsqrt elementwise lines on one value a row, the last two on whole rows."""
    steps = split(plans[RMS], parts=False)
    assert [(s.row_task, s.per_row) for s in steps] == [(False, False), (True, True), (False, True), (False, True),
                                                         (False, False), (False, False)]
    mean = steps[1].plan
    assert mean.segment.kind == SegmentKind.ROW and mean.segment.per_row_output and steps[1].line.startswith("y = x.mean(")
    assert mean.probes.count == plans[RMS].probes.count and len(decode(mean.probes.expected)) == mean.probes.count
    # an elementwise line of a row sees the probe rows' columns as elements (a long row's evenly
    # spaced ones, first and last among them), a value per row repeated
    eps, scaled = steps[2].plan, steps[4].plan
    rows, cols = plans[RMS].probes.count, plans[RMS].probes.cols
    seen = scaled.probes.count // rows
    assert eps.segment.kind == SegmentKind.ELEMENTWISE and eps.probes.count == rows * seen
    assert seen == min(cols, LINE_ELEMENTS // rows)
    assert decode(eps.probes.inputs["x"])[:seen].tolist() == [decode(plans[RMS].probes.steps[1])[0]] * seen
    # `x * v4` on the row's x: its first and last columns are the row's first and last values
    row0 = decode(plans[RMS].probes.inputs["x"])[:cols]
    got = decode(scaled.probes.inputs["x_in"] if "x_in" in scaled.probes.inputs else scaled.probes.inputs["x"])[:seen]
    assert got[0] == row0[0] and got[-1] == row0[-1]
    # the LayerNorm's line holds the norm's weight and bias
    norm = split(plans[NORM_SILU], parts=False)[0]
    assert norm.row_task and [a.name for a in norm.plan.segment.args] == ["x", "weight", "bias"]


def test_a_long_rows_elementwise_line_is_checked_on_spaced_columns() -> None:
    """6 probe rows of 50304 columns (log_softmax at full size): an elementwise line of the row sees
    682 evenly spaced columns of each, the first and the last among them, in order."""
    from kernelwright.scaffold.steps import _columns

    cols = _columns(6, 50304)
    assert len(cols) == LINE_ELEMENTS // 6 and cols[0] == 0 and cols[-1] == 50303 and cols == sorted(set(cols))
    assert _columns(6, 512) == list(range(512))


def _check(plan, target: str, parts: bool = True) -> None:
    steps = split(plan, parts=parts)
    assert steps
    answers = []
    for st in steps:
        sc = write(st.plan, line_target(st, target))
        right, wrong = region(sc), region(sc, wrong=True)
        got = precheck_many(st.plan, line_target(st, target), [right, wrong])
        assert [g.status.value for g in got] == ["pass", "counterexample"], (st.line, got)
        answers.append(right)
    whole = write(plan, target)
    composed = compose(steps, answers, plan.segment, target)
    assert precheck_many(plan, target, [composed])[0].passed, composed
    # a wrong line anywhere makes the composed region wrong
    bad = list(answers)
    bad[-1] = region(write(steps[-1].plan, line_target(steps[-1], target)), wrong=True)
    assert precheck_many(plan, target, [compose(steps, bad, plan.segment, target)])[0].status.value == "counterexample"


COMPOSITE = [GELU, MISH, SOFTMAX, LOG_SOFTMAX, LAYER_NORM]


@pytest.mark.parametrize("task_id", [HARDSWISH, SOFTPLUS, MIXTURE, RMS, NORM_SILU, ROWMAX, RMS_BF16, *COMPOSITE])
def test_right_lines_compose_into_a_right_region_triton(task_id, plans) -> None:
    _check(plans[task_id], "triton")
    if task_id in (HARDSWISH, NORM_SILU):
        _check(plans[task_id], "triton", parts=False)


@pytest.mark.build
@pytest.mark.parametrize("target", ["cpp", "cuda"])
@pytest.mark.parametrize("task_id", [HARDSWISH, SOFTPLUS, RMS, NORM_SILU, ROWMAX, *COMPOSITE])
def test_right_lines_compose_into_a_right_region(task_id, target, plans) -> None:
    _check(plans[task_id], target)


@pytest.mark.parametrize("task_id", [LINEAR_GELU, LINEAR_HARDSWISH])
def test_a_gemms_epilogue_is_written_a_line_at_a_time(task_id, plans) -> None:
    """A GEMM plan's region is its epilogue: its lines (not the GEMM's own, which the K loop
    computes) each an elementwise task on the epilogue's probes, and the right lines composed into
    a region that passes the GEMM plan's pre-check in the GEMM skeleton (a wrong last line fails it)."""
    gemm = plans[task_id].for_target("triton")
    assert gemm.segment.kind == SegmentKind.GEMM and gemm.segment.gemm is not None
    steps = split(gemm)
    assert len(steps) >= 2 and all(st.plan.segment.kind == SegmentKind.ELEMENTWISE for st in steps)
    assert not any("linear" in st.line or "@" in st.line for st in steps)
    assert worth_it(steps, "triton")
    _check(gemm, "triton")


def test_a_lone_gemm_is_not_written_a_line_at_a_time(plans) -> None:
    """A matmul's epilogue has no line: no steps (the search samples the whole, empty epilogue), and
    no error (a study's cell once failed here before its first sample)."""
    gemm = plans[MATMUL].for_target("triton")
    assert gemm.segment.kind == SegmentKind.GEMM and gemm.segment.epilogue().torch_lines == ["y = x"]
    assert split(gemm) == [] and split(gemm, parts=False) == []


def test_a_costly_whole_row_line_read_twice_is_stored_once(plans) -> None:
    """C++: a softmax composed a line at a time computes its exp into a row of its own once (the sum
    and the division then read it); the max's `x - v1`, arithmetic read once, stays a lambda. CUDA
    composes as before (no row of its own)."""
    plan = plans[SOFTMAX]
    steps = split(plan)
    answers = [region(write(st.plan, line_target(st, "cpp"))) for st in steps]
    text = compose(steps, answers, plan.segment, "cpp")
    exp = next(st.local for st in steps if "exp" in st.line)
    assert re.findall(r"kw_row_(v\d+);", text) == [exp]
    assert f"kw_m_{exp}[j] = kw_c_{exp}(j);" in text and text.count(f"kw_c_{exp}(j)") == 1
    # its max pass runs in lanes as the program compiles it (the lines' lambdas' `return y;` once
    # read as a declaration of y kept it scalar)
    from kernelwright.scaffold.compiled import as_compiled

    assert "kw_acc" in as_compiled("cpp", text)
    cuda = compose(steps, [region(write(st.plan, line_target(st, "cuda"))) for st in steps], plan.segment, "cuda")
    assert "kw_row_" not in cuda
    # arithmetic read twice is recomputed: log_softmax's `x - max` feeds the exp and the result
    lsm = split(plans[LOG_SOFTMAX])
    lsm_text = compose(lsm, [region(write(st.plan, line_target(st, "cpp"))) for st in lsm], plans[LOG_SOFTMAX].segment, "cpp")
    assert "kw_row_" not in lsm_text


def test_a_lines_temporaries_stay_in_its_scope(plans) -> None:
    """Each line's answer runs in its own scope (C) with its own y: two lines may both declare `t`."""
    steps = split(plans[SOFTPLUS], parts=False)
    c = compose(steps, ["float t = x;\ny = t;"] * 3, plans[SOFTPLUS].segment, "cpp")
    assert c.count("{") == 3 and c.count("float y = x;") == 3 and c.endswith("y = v3;")
    py = compose(steps, ["y = x"] * 3, plans[SOFTPLUS].segment, "triton")
    # Python has no block scope: the module's x is kept aside and given back after each line that rebinds x
    assert py.splitlines()[0] == "kw_x_in = x" and py.count("\nx = kw_x_in") == 2 and py.splitlines()[-1] == "y = v3"


# How the embedded model writes a row in C++ (std:: math, loops over the row): in CUDA device code too
CPP_SOFTMAX = """float m = -INFINITY;
for (int64_t j = 0; j < cols; ++j) m = std::fmax(m, x(j));
float s = 0.0f;
for (int64_t j = 0; j < cols; ++j) s += std::exp(x(j) - m);
for (int64_t j = 0; j < cols; ++j) y[j] = std::exp(x(j) - m) / s;"""


@pytest.mark.build
@pytest.mark.nvcc
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not on PATH")
def test_a_composed_cuda_row_region_compiles(plans, tmp_path) -> None:
    """The CUDA composition of a row (a softmax written as C++ loops, spread over the block with its
    max and sum combined, or run by thread 0 into the output row; __syncthreads, a lambda reading it
    back, the block-strided store) pre-checks right and is built by nvcc as on a GPU machine
    (compile only)."""
    from kernelwright.evaluate import EvalRun, evaluate

    plan = plans[SOFTMAX_SCALE]
    steps = split(plan, parts=False)
    assert [s.row_task for s in steps] == [True, False]
    answers = [CPP_SOFTMAX, region(write(steps[1].plan, "cuda"))]
    assert precheck_many(steps[0].plan, "cpp", [CPP_SOFTMAX])[0].passed
    composed = compose(steps, answers, plan.segment, "cuda")
    alone = compose(steps, answers, plan.segment, "cuda", strided=False)
    assert "block_max(" in composed and "if (threadIdx.x == 0)" in alone
    assert all(c.passed for c in precheck_many(plan, "cuda", [composed, alone])), composed
    # and the softmax as its definition's lines: two row tasks spread over the block (a max and a
    # sum), three elementwise lines
    parts = split(plan)
    assert [s.row_task for s in parts] == [True, False, False, True, False, False]
    by_parts = compose(parts, [region(write(s.plan, line_target(s, "cuda"))) for s in parts], plan.segment, "cuda")
    assert "block_max(" in by_parts and "block_sum(" in by_parts and "if (threadIdx.x == 0)" not in by_parts
    assert precheck_many(plan, "cuda", [by_parts])[0].passed
    # a bf16 row: the output row is `at::BFloat16*` (the H200's compile_error of 2026-12-03b)
    bf16 = split(plans[RMS_BF16])
    bf16_region = compose(bf16, [region(write(s.plan, line_target(s, "cuda"))) for s in bf16], plans[RMS_BF16].segment,
                          "cuda")
    tasks = {t.id: t for t in load_tasks("builtin") if t.id in (SOFTMAX_SCALE, RMS_BF16)}
    # built: the softmax by its parts, as the model's loops spread over the block, and the bf16 row
    for task_id, program in ((SOFTMAX_SCALE, by_parts), (SOFTMAX_SCALE, composed), (RMS_BF16, bf16_region)):
        result = evaluate(tasks[task_id], write(plans[task_id], "cuda").program_with(program),
                          EvalRun.of(device="cuda", compile_only=True, timeout=900.0, cache_dir=str(tmp_path)))
        assert result.verdict.value == "compiled", (task_id, result.error)


def test_a_definition_carries_the_parameter_its_line_gives():
    """An activation's definition is written with the line's own parameter (a default's value was
    copied over the line's `negative_slope = 0.1`; a bare parameter name was copied undeclared), the
    default where the line gives none, and the name where two lines give two values."""
    from kernelwright.scaffold.semantics import notes_for

    assert notes_for(["leaky_relu"], ["y = torch.nn.functional.leaky_relu(x, negative_slope = 0.1)"]) == [
        "leaky_relu(v) = v if v > 0 else 0.1 * v"]
    assert notes_for(["leaky_relu"], ["y = torch.nn.functional.leaky_relu(x)"]) == [
        "leaky_relu(v) = v if v > 0 else 0.01 * v"]
    two = notes_for(["leaky_relu", "leaky_relu"], ["a = F.leaky_relu(x, negative_slope = 0.1)",
                                                   "y = F.leaky_relu(a, negative_slope=0.2)"])
    assert two == ["leaky_relu(v) = v if v > 0 else negative_slope (as its line gives it; 0.01 by default) * v"]
    assert notes_for(["hardtanh", "elu", "relu"], ["y = F.hardtanh(x, min_val = -2.0, max_val = 2.0)",
                                                   "z = F.elu(y, alpha = 0.5)"]) == [
        "hardtanh(v) = min(max(v, -2.0), 2.0)", "elu(v) = v if v > 0 else 0.5 * (exp(v) - 1)", "relu(v) = max(v, 0)"]


def test_a_lines_prompt_shows_its_activations_parameter(tmp_path):
    """Through the planner: a module's positional slope reaches its line's definition."""
    from kernelwright.scaffold import plan_task
    from kernelwright.scaffold.steps import split
    from kernelwright.tasks import load_task

    path = tmp_path / "leaky.py"
    path.write_text("import torch\nimport torch.nn.functional as F\n\n"
                    "class Model(torch.nn.Module):\n    def forward(self, x):\n"
                    "        return F.leaky_relu(x * 2.0, 0.2)\n\n"
                    "def get_inputs():\n    return [torch.randn(16, 32)]\n\n"
                    "def get_init_inputs():\n    return []\n")
    steps = split(plan_task(load_task(str(path))).for_target("cpp"))
    leaky = [st for st in steps if "leaky_relu" in st.line]
    assert leaky and leaky[0].plan.segment.op_notes == ["leaky_relu(v) = v if v > 0 else 0.2 * v"]
