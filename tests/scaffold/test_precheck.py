"""The region pre-check (kernelwright/scaffold/precheck): probes made with the plan, the comparison,
and the verdicts on real recorded region answers.

Tiers: the probes, the comparison, Triton regions (a NumPy child, no compiler) and the checks that
need no compiler (a host function in CUDA device code, torch calls, a plan without probes) are
fast; C++ and CUDA regions compile (the system `c++` on a few lines, well under a second each on
an idle machine, but a compiler all the same), so those tests are `build`.

The real answers (tests/fixtures/scaffold/precheck_answers.json) are the 1.5B model's own regions
from the study logs, each with the verdict the full evaluator gave it when it was recorded: right
ones must pass, wrong ones must come back with a counterexample, broken ones with the compiler's
error. The confusion matrix over every recorded answer is benchmarks/precheck_confusion.py
(docs/results/precheck-confusion.md).
"""

from __future__ import annotations

import importlib
import json
import math
import struct
from pathlib import Path

import pytest
import torch

from kernelwright.scaffold import PrecheckStatus, SegmentKind, plan_tasks, precheck, precheck_many, write
from kernelwright.scaffold.oracle import region
from kernelwright.scaffold.precheck.compare import close, decode, round_to
from kernelwright.tasks import load_tasks

# the package itself: `kernelwright.scaffold.precheck` is also the name of a function
PRECHECK_PACKAGE = importlib.import_module("kernelwright.scaffold.precheck")
ANSWERS = json.loads((Path(__file__).resolve().parents[1] / "fixtures" / "scaffold" / "precheck_answers.json").read_text())
# one task per layout (as in test_scaffold): elementwise with a broadcast extra, whole rows, one value
# per row in half precision, a bf16 row norm with a weight; and a clamp (edge probes at its bounds)
LAYOUTS = ["builtin/L2/06_channel_affine_hardswish_residual", "builtin/L2/05_linear_softmax_scale",
           "builtin/L1/07_row_max_fp16", "builtin/L2/07_residual_add_rmsnorm_bf16"]
CLAMP = "builtin/L2/02_conv2d_mish_clamp"


@pytest.fixture(scope="module")
def plans():
    ids = sorted({a["task_id"] for a in ANSWERS} | set(LAYOUTS) | {CLAMP, "builtin/L1/01_gelu_tanh",
                                                                 "builtin/L3/08_patch_embed_classifier"})
    tasks = load_tasks("builtin")
    chosen = [t for t in tasks if t.id in ids]
    return dict(zip([t.id for t in chosen], plan_tasks(chosen)))


# ---- fast: probes, comparison, what needs no compiler ---------------------------------------------

def test_probes_hold_the_edge_values_and_what_pytorch_computes_on_them(plans) -> None:
    p = plans["builtin/L1/01_gelu_tanh"]  # gelu(approximate='tanh'), written out here independently
    x = decode(p.probes.inputs["x"])
    expected = decode(p.probes.expected)
    assert len(x) == len(expected) == p.probes.count == 512
    for v, e in zip(x, expected):
        want = 0.5 * v * (1 + math.tanh(math.sqrt(2 / math.pi) * (v + 0.044715 * v ** 3)))
        assert abs(want - e) <= 1e-4 + 1e-4 * abs(want)
    assert 0.0 in x and any(0 < v < 1e-5 for v in x) and any(-1e-5 < v < 0 for v in x)
    assert max(x) >= 8 and min(x) <= -8  # large relative to the drawn values, both signs
    # the segment's own constants, and values just beside them: a clamp's bounds
    values = set(decode(plans[CLAMP].probes.inputs["x"]))
    for bound in (-0.25, 1.5):
        assert any(abs(v - bound) < 1e-6 for v in values)
        assert any(0 < abs(v - bound) < 1e-2 for v in values)
    # and where the clamp bends in x's units: clamp(mish(x), -0.25, 1.5) at mish(x) = 1.5 and at
    # both x where the (non-monotonic) mish(x) = -0.25
    mish = {v: v * math.tanh(math.log1p(math.exp(v))) for v in values}
    assert any(abs(m - 1.5) < 1e-4 for m in mish.values())
    assert len([v for v, m in mish.items() if abs(m + 0.25) < 1e-4]) >= 2


def test_row_probes_include_a_constant_row_and_one_large_value(plans) -> None:
    p = plans["builtin/L2/05_linear_softmax_scale"]
    seg, probes = p.segment, p.probes
    assert seg.kind == SegmentKind.ROW and probes.cols == seg.cols
    x = decode(probes.inputs["x"])
    rows = [x[r * probes.cols:(r + 1) * probes.cols] for r in range(probes.count)]
    assert "constant" in probes.labels and "one large value" in probes.labels
    constant = rows[probes.labels.index("constant")]
    assert len(set(constant)) == 1 and math.log2(abs(constant[0])).is_integer()  # exact sums
    big = rows[probes.labels.index("one large value")]
    assert max(big) >= 4 * max(abs(v) for v in rows[probes.labels.index("drawn")])
    # the broadcast weight arrives materialized, one value per probe column
    assert len(decode(probes.inputs["class_scale"])) == probes.count * probes.cols


def test_designed_rows_reach_pytorch_through_a_strided_input(plans) -> None:
    """The probe rows are written into the tensors the segment reads (here x is a transposed view,
    whose reshape is a copy) and the expected values are PyTorch's on exactly those rows."""
    p = plans["builtin/L3/08_patch_embed_classifier"]  # y = layer_norm(x + position) * weight + bias
    probes, cols = p.probes, p.probes.cols
    vals = {k: torch.tensor(decode(v)).reshape(probes.count, cols) for k, v in probes.inputs.items()}
    x = vals["x"]
    assert len(set(x[probes.labels.index("constant")].tolist())) == 1
    want = torch.nn.functional.layer_norm(x + vals["position"], (cols,), eps=1e-5) * vals["weight"] + vals["bias"]
    got = torch.tensor(decode(probes.expected)).reshape(probes.count, cols)
    assert torch.allclose(got, want, atol=1e-4, rtol=1e-4)


def test_the_comparison_is_the_evaluators(plans) -> None:
    tol = 1e-4
    assert close(1.0 + 0.5e-4, 1.0, tol) and not close(1.0 + 3e-4, 1.0, tol)
    assert close(float("nan"), float("nan"), tol) and not close(float("nan"), 1.0, tol)
    assert close(math.inf, math.inf, tol) and not close(math.inf, -math.inf, tol) and not close(1e30, math.inf, tol)
    # the store's rounding, checked against torch's own casts
    vals = torch.randn(2000) * 1000
    for name, dt in (("float16", torch.float16), ("bfloat16", torch.bfloat16)):
        ours = [round_to(struct.unpack("<f", struct.pack("<f", float(v)))[0], name) for v in vals]
        theirs = vals.to(dt).float().tolist()
        assert ours == theirs, name
    assert round_to(1e6, "float16") == math.inf


def test_what_needs_no_compiler(plans) -> None:
    """A host function in CUDA device code (nvcc's error), torch calls (unsupported), and a plan
    without probes are answered without compiling anything: this test is in the fast tier."""
    p = plans["builtin/L1/03_softmax"]
    got = precheck(p, "cuda", "float m = *std::max_element(x_ptr, x_ptr + cols);\nfor (int64_t j = threadIdx.x; "
                              "j < cols; j += blockDim.x) y[j] = m;")
    assert got.status == PrecheckStatus.COMPILE_ERROR and "__host__ function(\"std::max_element\")" in got.error
    assert precheck(p, "cpp", "y[0] = torch::exp(x(0)).item<float>();").status == PrecheckStatus.UNSUPPORTED
    # the skeleton's own element types are no torch call: such a region is compiled, not refused
    from kernelwright.scaffold.precheck.native_shim import screen

    assert screen("cpp", "y[0] = static_cast<at::Half>(x(0));") == screen("cuda", "y = c10::BFloat16(x);") == ""
    bare = p.model_copy(update={"probes": None})
    got = precheck(bare, "cpp", "y[0] = x(0);")
    assert got.status == PrecheckStatus.UNSUPPORTED and "no probes" in got.error


def test_probes_leave_the_programs_as_they_were(plans) -> None:
    """The probes are the pre-check's: the scaffolds (and so the prompts of recorded runs, whose
    replay keys hash them) are the same with or without them."""
    p = plans["builtin/L1/08_layer_norm"]
    for target in ("cpp", "cuda", "triton"):
        assert write(p, target) == write(p.model_copy(update={"probes": None}), target)


def _answer_params():
    # C++ and CUDA answers compile (build tier); Triton's run in a NumPy child (fast)
    return [pytest.param(a, marks=[pytest.mark.build] if a["target"] != "triton" else [],
                         id=f"{a['target']}-{a['task_id'].split('/')[-1]}-{a['recorded_verdict']}") for a in ANSWERS]


@pytest.mark.parametrize("answer", _answer_params())
def test_real_answers(answer, plans) -> None:
    got = precheck(plans[answer["task_id"]], answer["target"], answer["region"])
    verdict = answer["recorded_verdict"]
    if verdict == "correct":
        assert got.status == PrecheckStatus.PASS, got.render()
        assert got.probes >= 512 or got.probes == plans[answer["task_id"]].probes.count
    elif verdict == "wrong_output":
        assert got.status == PrecheckStatus.COUNTEREXAMPLE, (got.status, got.error)
        ce = got.counterexample
        assert not close(ce.got, ce.expected, ce.atol)
        assert "PyTorch gives" in got.render() and "the region gives" in got.render()
        assert ("probe row" in got.render()) == (plans[answer["task_id"]].segment.kind == SegmentKind.ROW)
    elif verdict == "compile_error" or (verdict == "runtime_error" and answer["target"] == "triton"):
        # Triton refuses a kernel while compiling it at its first call: the evaluator's runtime_error
        assert got.status == PrecheckStatus.COMPILE_ERROR, got.render()
        assert "error" in got.error or "attribute" in got.error or "Error" in got.error
    else:  # the evaluator's crash: a segfault on the probes too
        assert got.status == PrecheckStatus.RUNTIME_ERROR and "SIGSEGV" in got.error


@pytest.mark.parametrize("task_id", LAYOUTS)
def test_triton_regions(task_id, plans) -> None:
    """The oracle's Triton region passes; the region plus one, the empty region, a name tl lacks,
    a block indexed like a list, `**` on a block and an out-of-bounds load do not."""
    p = plans[task_id]
    sc = write(p, "triton")
    good = region(sc)
    regions = [good, region(sc, wrong=True), "", good.replace("tl.", "tl.fast_", 1), good + "\ny = y + x[0]",
               good + "\ny = y ** 2", "y = tl.load(x_ptr + offs + 100000000, mask=mask)", good]
    got = precheck_many(p, "triton", regions)
    assert [g.status for g in got] == [PrecheckStatus.PASS, PrecheckStatus.COUNTEREXAMPLE, PrecheckStatus.COUNTEREXAMPLE,
                                       PrecheckStatus.COMPILE_ERROR, PrecheckStatus.COMPILE_ERROR,
                                       PrecheckStatus.COMPILE_ERROR, PrecheckStatus.RUNTIME_ERROR,
                                       PrecheckStatus.PASS], [g.render() for g in got]
    assert "has no attribute 'fast_" in got[3].error and "indexed" in got[4].error and "**" in got[5].error


@pytest.mark.build
@pytest.mark.parametrize("target", ["cpp", "cuda"])
@pytest.mark.parametrize("task_id", LAYOUTS)
def test_correct_regions_pass_and_broken_ones_do_not(task_id, target, plans) -> None:
    """The oracle's region passes; the region plus one, the empty region, an undefined name, a
    crash and a hang do not, and each costs only its own result (one call, one translation unit)."""
    p = plans[task_id]
    sc = write(p, target)
    good = region(sc)
    regions = [good, region(sc, wrong=True), "", good + "\nfloat z = undefined_name;",
               "volatile int* p = nullptr; *p = 1;", "while (true) {}", good]
    got = precheck_many(p, target, regions)
    assert [g.status for g in got] == [PrecheckStatus.PASS, PrecheckStatus.COUNTEREXAMPLE, PrecheckStatus.COUNTEREXAMPLE,
                                       PrecheckStatus.COMPILE_ERROR, PrecheckStatus.RUNTIME_ERROR,
                                       PrecheckStatus.RUNTIME_ERROR, PrecheckStatus.PASS], [g.render() for g in got]
    assert "was not declared" in got[3].error and got[3].error.startswith("line ")
    assert "SIGSEGV" in got[4].error and "time limit" in got[5].error


@pytest.mark.build
def test_a_second_call_is_answered_from_memory(plans, monkeypatch) -> None:
    p = plans["builtin/L2/01_linear_gelu_scale"]
    text = "y = 0.5f * x * (1.0f + erff(x * 0.70710678f)) * 0.5f;"
    first = precheck(p, "cpp", text)

    def no_second_run(*_):
        raise AssertionError("the region was compiled and run again")

    monkeypatch.setattr(PRECHECK_PACKAGE, "_run", no_second_run)
    again = precheck(p, "cpp", "  " + text + "\n")
    assert again.status == first.status == PrecheckStatus.PASS


# ---- the harness's failures are not the region's --------------------------------------------------
def _mechanisms() -> list[str]:
    from kernelwright import confine

    offered = confine.offer()
    return [m for m in ("bwrap", "unshare") if getattr(offered, m, False)]


@pytest.mark.build
@pytest.mark.parametrize("mechanism", ["bwrap", "unshare"])
def test_the_same_verdicts_under_each_confinement(mechanism, plans, monkeypatch) -> None:
    """On a machine without bubblewrap (the H200) the `unshare` fallback confines the probe run; its
    private /tmp once hid the scratch inside the pre-check's (visible, read-only) cache, and every
    region, right or wrong, came back `runtime_error` (exit 4): the search regime built nothing."""
    if mechanism not in _mechanisms():
        pytest.skip(f"{mechanism} does not work here")
    monkeypatch.setenv("KERNELWRIGHT_CONFINE", mechanism)
    monkeypatch.setattr(PRECHECK_PACKAGE, "_memo", {})
    p = plans["builtin/L2/06_channel_affine_hardswish_residual"]
    sc = write(p, "cpp")
    got = precheck_many(p, "cpp", [region(sc), region(sc, wrong=True), "volatile int* p = nullptr; *p = 1;"])
    assert [g.status for g in got] == [PrecheckStatus.PASS, PrecheckStatus.COUNTEREXAMPLE,
                                       PrecheckStatus.RUNTIME_ERROR], [g.render() for g in got]


@pytest.mark.build
def test_a_harness_that_cannot_keep_values_refutes_nothing(plans) -> None:
    """Exit 4 is the harness failing to write a region's values: not judged (built instead), the
    other regions of the same run keep their verdicts."""
    p = plans["builtin/L2/06_channel_affine_hardswish_residual"]
    sc = write(p, "cpp")
    got = precheck_many(p, "cpp", [region(sc), "_exit(4);", region(sc, wrong=True)])
    assert [g.status for g in got] == [PrecheckStatus.PASS, PrecheckStatus.UNSUPPORTED,
                                       PrecheckStatus.COUNTEREXAMPLE], [g.render() for g in got]


def test_a_triton_child_that_does_not_start_refutes_nothing(plans, monkeypatch, tmp_path) -> None:
    from kernelwright.scaffold.precheck import tl_shim

    broken = tmp_path / "child.py"
    broken.write_text("import sys\nsys.exit(3)\n")
    monkeypatch.setattr(tl_shim, "CHILD", broken)
    p = plans["builtin/L1/01_gelu_tanh"]
    sc = write(p, "triton")
    got = tl_shim.run(p.segment, "triton", p.probes, [region(sc), region(sc, wrong=True)])
    assert all(g.unsupported and not g.runtime_error for g in got), got
