"""A region a line at a time (kernelwright/scaffold/steps.py): each torch line of an elementwise
segment as its own task with its own probes, and the region composed from the lines' answers.

The oracle writes each line's answer from the line's own task (its torch line, its names): the
answer must pass that line's pre-check and a wrong one must not, and the composition of the right
answers must pass the whole region's pre-check, in each target. C++ and CUDA compile (`build`);
Triton runs on the NumPy `tl` (fast).
"""

from __future__ import annotations

import shutil

import pytest

from kernelwright.scaffold import SegmentKind, plan_tasks, precheck_many, write
from kernelwright.scaffold.oracle import region
from kernelwright.scaffold.precheck.compare import decode
from kernelwright.scaffold.steps import compose, line_target, split, worth_it
from kernelwright.tasks import load_tasks

HARDSWISH = "builtin/L2/06_channel_affine_hardswish_residual"  # 4 lines; the last reads line 3 and the module's x
SOFTPLUS = "builtin/L2/09_conv2d_softplus_scale_bias"  # 3 lines, a broadcast extra on the last
MIXTURE = "builtin/L3/07_two_expert_mixture"  # a line that does not read the module's x at all
GELU = "builtin/L1/01_gelu_tanh"  # one line: the whole region is the line
RMS = "builtin/L1/09_rms_norm"  # a row: elementwise lines on whole rows and on a value per row, a mean
NORM_SILU = "builtin/L2/03_linear_layernorm_silu"  # a row task with a whole-row result, read back by the next line
ROWMAX = "builtin/L2/08_linear_silu_rowmax"  # one value a row out
SOFTMAX_SCALE = "builtin/L2/05_linear_softmax_scale"
SOFTMAX = "builtin/L1/03_softmax"  # one line, a row task: split for CUDA only
RMS_BF16 = "builtin/L2/07_residual_add_rmsnorm_bf16"  # a line on the norm's weight alone, [cols] wide


@pytest.fixture(scope="module")
def plans():
    tasks = [t for t in load_tasks("builtin") if t.id in (HARDSWISH, SOFTPLUS, MIXTURE, GELU, RMS, NORM_SILU, ROWMAX,
                                                                 SOFTMAX_SCALE, SOFTMAX, RMS_BF16)]
    return dict(zip([t.id for t in tasks], plan_tasks(tasks)))


def test_each_line_is_a_task_whose_input_is_its_x(plans) -> None:
    steps = split(plans[HARDSWISH])
    assert [s.line for s in steps] == ["y = x * gain", "y = x + shift",
                                       "y = torch.nn.functional.hardswish(x, inplace = False)", "y = x + x_in"]
    assert [s.local for s in steps] == ["v1", "v2", "v3", "v4"]
    # the line's first input is its x; the module's x, read by the last line too, is its x_in there
    assert steps[0].bindings == [] and steps[2].bindings == [("x", "v2")]
    assert steps[3].bindings == [("x", "v3"), ("x_in", "x")]
    last = steps[3].plan
    assert [(a.name, a.main) for a in last.segment.args] == [("x", True), ("x_in", False)]
    # its probes are what PyTorch computed for line 3 (its x) and the module's input (its x_in),
    # and its expected values line 4's, which is the segment's output
    whole = plans[HARDSWISH].probes
    assert last.probes.inputs["x"] == whole.steps[2] and last.probes.inputs["x_in"] == whole.inputs["x"]
    assert decode(last.probes.expected) == decode(whole.expected)
    # one op's definition a line: hardswish's on line 3 only
    assert any("hardswish" in n for n in steps[2].plan.segment.op_notes)
    assert not steps[0].plan.segment.op_notes and not steps[3].plan.segment.op_notes


def test_a_line_that_does_not_read_the_modules_x_does_not_see_it(plans) -> None:
    steps = split(plans[MIXTURE])
    second = steps[1].plan.segment
    assert steps[1].line == "y = x * expert_b_down" and steps[1].bindings == [("x", "getitem_1")]
    assert [a.name for a in second.args] == ["x", "expert_b_down"]


def test_a_single_elementwise_line_is_not_split(plans) -> None:
    assert split(plans[GELU]) == []


def test_a_line_on_a_weight_broadcast_against_the_row_is_split(plans) -> None:
    """`weight.float()` has the weight's [cols] shape: its value on the probes is the weight read
    at each probe column, one per element like the others, and its line a task on the weight."""
    steps = split(plans[RMS_BF16])
    assert len(steps) == 9 and steps[6].line == "y = x.float()" and steps[6].inputs == [("x", "weight")]
    assert not steps[6].per_row and steps[8].plan.segment.out_dtype == "bfloat16"
    cols = plans[RMS_BF16].probes.cols
    assert decode(steps[6].plan.probes.expected)[:cols] == decode(plans[RMS_BF16].probes.inputs["weight"])[:cols]


def test_cuda_row_tasks_are_cpp_loops_run_by_one_thread(plans) -> None:
    """A CUDA row task is the C++ row kernel's task (a loop over the row, no block reductions);
    a single-line row is worth splitting in CUDA only."""
    [one] = split(plans[SOFTMAX])
    assert one.row_task and line_target(one, "cuda") == "cpp" and line_target(one, "triton") == "triton"
    assert worth_it([one], "cuda") and not worth_it([one], "cpp") and not worth_it([one], "triton")
    rms = split(plans[RMS])
    assert [line_target(st, "cuda") for st in rms] == ["cuda", "cpp", "cuda", "cuda", "cuda", "cuda"]
    composed = compose(rms, [region(write(st.plan, line_target(st, "cuda"))) for st in rms], plans[RMS].segment,
                       "cuda")
    assert "__shared__ float kw_sh_v2;" in composed and "if (threadIdx.x == 0) {" in composed
    assert composed.count("__syncthreads();") == 1


def test_a_row_is_split_into_elementwise_lines_and_row_tasks(plans) -> None:
    """rms_norm: x.pow(2) an elementwise line on whole rows, the mean a row task with one value a
    row, the eps and rsqrt elementwise lines on one value a row, the last two on whole rows."""
    steps = split(plans[RMS])
    assert [(s.row_task, s.per_row) for s in steps] == [(False, False), (True, True), (False, True), (False, True),
                                                         (False, False), (False, False)]
    mean = steps[1].plan
    assert mean.segment.kind == SegmentKind.ROW and mean.segment.per_row_output and steps[1].line.startswith("y = x.mean(")
    assert mean.probes.count == plans[RMS].probes.count and len(decode(mean.probes.expected)) == mean.probes.count
    # an elementwise line of a row sees every column of every probe row, a value per row repeated
    eps = steps[2].plan
    cols = plans[RMS].probes.cols
    assert eps.segment.kind == SegmentKind.ELEMENTWISE and eps.probes.count == plans[RMS].probes.count * cols
    assert decode(eps.probes.inputs["x"])[:cols].tolist() == [decode(plans[RMS].probes.steps[1])[0]] * cols
    # the LayerNorm's line holds the norm's weight and bias
    norm = split(plans[NORM_SILU])[0]
    assert norm.row_task and [a.name for a in norm.plan.segment.args] == ["x", "weight", "bias"]


def _check(plan, target: str) -> None:
    steps = split(plan)
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


@pytest.mark.parametrize("task_id", [HARDSWISH, SOFTPLUS, MIXTURE, RMS, NORM_SILU, ROWMAX, RMS_BF16])
def test_right_lines_compose_into_a_right_region_triton(task_id, plans) -> None:
    _check(plans[task_id], "triton")


@pytest.mark.build
@pytest.mark.parametrize("target", ["cpp", "cuda"])
@pytest.mark.parametrize("task_id", [HARDSWISH, SOFTPLUS, RMS, NORM_SILU, ROWMAX, SOFTMAX])
def test_right_lines_compose_into_a_right_region(task_id, target, plans) -> None:
    _check(plans[task_id], target)


def test_a_lines_temporaries_stay_in_its_scope(plans) -> None:
    """Each line's answer runs in its own scope (C) with its own y: two lines may both declare `t`."""
    steps = split(plans[SOFTPLUS])
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
    """The CUDA composition of a row (a softmax written as a C++ loop, run by thread 0 into the
    output row, __syncthreads, a lambda reading it back, the block-strided store) pre-checks right
    and is built by nvcc as on a GPU machine (compile only)."""
    from kernelwright.evaluate import EvalConfig, evaluate

    plan = plans[SOFTMAX_SCALE]
    steps = split(plan)
    assert [s.row_task for s in steps] == [True, False]
    answers = [CPP_SOFTMAX, region(write(steps[1].plan, "cuda"))]
    assert precheck_many(steps[0].plan, "cpp", [CPP_SOFTMAX])[0].passed
    composed = compose(steps, answers, plan.segment, "cuda")
    assert precheck_many(plan, "cuda", [composed])[0].passed, composed
    task = next(t for t in load_tasks("builtin") if t.id == SOFTMAX_SCALE)
    result = evaluate(task, write(plan, "cuda").program_with(composed),
                      EvalConfig(device="cuda", compile_only=True, timeout=900.0, cache_dir=str(tmp_path)))
    assert result.verdict.value == "compiled", result.error
