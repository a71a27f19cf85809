"""The gemm layout (Triton only): the planner's GEMM alternative, the autotuned tl.dot skeleton with
its epilogue region, the oracle region, the pre-check, and the real evaluator on the CPU under the
Triton interpreter at the tasks' small size (each evaluation ~2 s: the whole file well under a minute).

What must not change is checked too: the CUDA and C++ targets get the plans (and programs) they
got before, and a GEMM followed by a row kernel keeps its row kernel.
"""

from __future__ import annotations

import importlib.util

import pytest
import torch

from kernelwright import prompts
from kernelwright.child import load_task_module
from kernelwright.records import Verdict
from kernelwright.scaffold import SegmentKind, default_launch, launch_variants, plan_tasks, precheck, with_launch, write
from kernelwright.scaffold.gemm_plan import GEMM_HEADER
from kernelwright.scaffold.writers.triton_gemm import FP32_PRODUCTS, write_triton_gemm
from kernelwright.scaffold.oracle import region
from kernelwright.tasks import load_task
from tests.conftest import TASKS

HAVE_TRITON = importlib.util.find_spec("triton") is not None
GELU = "builtin/L2/01_linear_gelu_scale"  # nn.Linear (bias) -> gelu -> * 0.5
MATMUL = "builtin/L1/10_matmul"  # a lone torch.matmul: no segment for CUDA / C++
SOFTMAX = "builtin/L2/05_linear_softmax_scale"  # nn.Linear -> softmax: the row kernel stays
EXAMPLE = "examples/gemm_bias_gelu.py"  # the README's: matmul(x, weight.t()) + bias -> gelu
BMM_FP16 = TASKS / "bmm_relu_fp16.py"  # relu(bmm(a, b) * 0.5) in fp16: batched, tensor cores

@pytest.fixture(scope="module")
def tasks():
    return {t: load_task(t) for t in (GELU, MATMUL, SOFTMAX, EXAMPLE)} | {"bmm": load_task(str(BMM_FP16))}


@pytest.fixture(scope="module")
def plans(tasks):
    return dict(zip(tasks, plan_tasks(list(tasks.values()))))


def test_the_gemm_and_its_epilogue_are_one_segment_for_triton(plans) -> None:
    p = plans[GELU]
    g = p.for_target("triton")
    assert g is p.gemm and g.available and p.for_target("cpp") is p and p.for_target("cuda") is p
    seg = g.segment
    assert seg.kind == SegmentKind.GEMM and seg.targets == ["linear", "gelu", "mul"]
    spec = seg.gemm
    assert (spec.op, spec.b_transposed, spec.batched, spec.m, spec.n, spec.k) == ("linear", True, False, 32, 136, 200)
    assert spec.bias is not None and spec.bias.origin == "linear.bias" and spec.b.origin == "linear.weight"
    # the region keeps the epilogue's names: the accumulator is `x`, the GEMM's line assigns it
    assert seg.torch_lines[:2] == [GEMM_HEADER, "# x = self.linear(x)"] and spec.lines == 2
    assert seg.main.name == "x" and not seg.extras
    assert "fused = kw_fused(x, linear_weight, linear_bias)" in g.model_new and "self.linear" in g.model_new
    assert g.probes is not None
    # the README example: B is a view of the weight (read through its strides), the bias an extra
    ex = plans[EXAMPLE].for_target("triton").segment
    assert ex.kind == SegmentKind.GEMM and ex.gemm.op == "matmul" and ex.gemm.bias is None
    assert ex.torch_lines[:ex.gemm.lines] == [GEMM_HEADER, "# weight = self.weight", "# t = weight.t()",
                                              "# x = torch.matmul(x, t)"]
    assert [a.name for a in ex.extras] == ["bias"]


def test_a_lone_gemm_gets_the_skeleton_with_an_empty_epilogue(plans) -> None:
    p = plans[MATMUL]
    assert not p.available and "no elementwise" in p.reason  # CUDA / C++: the whole program, as before
    seg = p.for_target("triton").segment
    assert seg.kind == SegmentKind.GEMM and seg.targets == ["matmul"] and seg.pass_through
    assert seg.torch_lines == [GEMM_HEADER, "# x = torch.matmul(a, b)", "y = x"]
    sc = write(p, "triton")
    assert sc.available and region(sc) == "y = x" and not write(p, "cpp").available


def test_a_gemm_before_a_row_kernel_keeps_the_row_kernel(plans) -> None:
    p = plans[SOFTMAX]
    assert p.for_target("triton") is p and p.segment.kind == SegmentKind.ROW


def test_cuda_and_cpp_programs_are_what_they_were(plans) -> None:
    """The GEMM alternative is not part of what those targets are written from: their programs
    (extension names included) are those of the plan without it."""
    for task in (GELU, EXAMPLE):
        p = plans[task]
        for target in ("cuda", "cpp"):
            sc = write(p, target)
            assert sc.segment.kind == SegmentKind.ELEMENTWISE
            assert sc.program == write(p.model_copy(update={"gemm": None}), target).program


def test_fp32_products_keep_fp32_accuracy_and_half_products_use_tensor_cores(plans) -> None:
    fp32 = write(plans[GELU], "triton").program
    assert FP32_PRODUCTS == "split3"  # 3xTF32 on split operands, never one TF32 pass
    assert "kw_a, kw_a_tail = kw_split(kw_a[None])" in fp32 and "kw_b, kw_b_tail = kw_split(kw_b[None].transpose(1, 2))" in fp32
    # three products a K step into a fresh partial, the running sum in fp32 adds
    assert fp32.count('input_precision="tf32")') == 3 and "kw_acc += kw_step" in fp32
    assert 'kw_step = tl.dot(kw_a_tail, kw_b_head, input_precision="tf32")' in fp32
    for products in ("ieee", "tf32x3"):  # the single-dot twins a benchmark times beside it
        twin = write_triton_gemm(plans[GELU].for_target("triton"), plans[GELU].for_target("triton").segment, products)
        assert f'tl.dot(kw_a_tile, kw_b_tile, kw_acc, input_precision="{products}")' in twin.program
        assert "kw_split" not in twin.program and "kw_tf32" not in twin.program
    half = write(plans["bmm"], "triton").program
    assert "tl.dot(kw_a_tile, kw_b_tile, kw_acc)" in half and "input_precision" not in half
    assert "@triton.autotune(configs=KW_GEMM_CONFIGS" in fp32 and "KW_LAUNCH" not in fp32
    seg = plans[GELU].for_target("triton").segment
    # launch settings are the autotune list's, not KW_LAUNCH variants
    assert default_launch(seg, "triton") == {} and launch_variants(seg, "triton") == []
    assert with_launch(fp32, {"block": 1024}) is None


def _tf32(t: torch.Tensor) -> torch.Tensor:
    """Round to TF32 (10 mantissa bits, nearest even), as the tensor cores read fp32 operands."""
    bits = t.contiguous().view(torch.int32)
    bits = (bits + 0xFFF + ((bits >> 13) & 1)) & ~0x1FFF
    return bits.view(torch.float32)


def test_a_gemm_skeleton_has_a_library_twin_where_the_region_fits_both(plans) -> None:
    """The twin: the plan without its GEMM (the library's GEMM, then the same lines as an
    elementwise kernel), given where a region for the GEMM skeleton is one for it too; the same
    region makes a whole program of either. A lone GEMM has nothing after it: no twin. The other
    targets never take the GEMM in, so they have none either."""
    for task in (GELU, EXAMPLE):
        sc = write(plans[task], "triton")
        twin = sc.library_twin
        assert sc.segment.kind == SegmentKind.GEMM and twin is not None
        assert twin.segment.kind == SegmentKind.ELEMENTWISE and twin.program == write(
            plans[task].model_copy(update={"gemm": None}), "triton").program
        assert twin.segment.torch_lines == [ln for ln in sc.segment.torch_lines if not ln.startswith("#")]
        whole = twin.program_with(region(sc))
        assert region(sc) in whole and "tl.dot" not in whole
        assert write(plans[task], "cuda").library_twin is None
    assert write(plans[MATMUL], "triton").library_twin is None


def _split3(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """The skeleton's fp32 product emulated: heads and tails in TF32, tail x head + head x tail +
    head x head with fp32 accumulation (each product of TF32 values is exact in fp32)."""
    ah, bh = _tf32(a), _tf32(b)
    at, bt = _tf32(a - ah), _tf32(b - bh)
    return at @ bh + ah @ bt + ah @ bh


def test_one_tf32_pass_fails_the_evaluators_check_and_3xtf32_passes(tasks) -> None:
    """The policy's numerics on the matmul task's own inputs: a TF32 product is off the fp32 reference
    by more than the tolerance and, against the float64 product, far less accurate than it, so it
    fails both ways the evaluator checks (measure/compare.py); the 3xTF32 split is as accurate as
    the reference, whether or not it also rounds within 1e-4 of it."""
    from kernelwright.measure.compare import compare, tolerance_for

    module = load_task_module(tasks[MATMUL].source, tasks[MATMUL].path, "kw_gemm_tf32")
    torch.manual_seed(0)
    a, b = module.get_inputs()
    ref = a @ b
    exact = a.double() @ b.double()
    tol = tolerance_for([ref], None, None)
    one_pass = compare(ref, _tf32(a) @ _tf32(b), tol, 0, lambda: [exact])
    assert not one_pass.ok and one_pass.mismatch.accuracy.max_abs_err > 2 * one_pass.mismatch.accuracy.ref_max_abs_err
    split = _split3(a, b)
    assert compare(ref, split, tol, 0, lambda: [exact]).ok
    assert (split.double() - exact).abs().max() < 2 * (ref.double() - exact).abs().max()


@pytest.mark.skipif(not HAVE_TRITON, reason="triton is not installed")
def test_kw_split_is_exact_in_head_and_tail(monkeypatch) -> None:
    """The program's split under the interpreter: both parts TF32 (13 low bits zero), their sum x to
    2^-21 of it, read through strides (a transposed weight) and batched."""
    from kernelwright.scaffold.writers import triton_gemm

    monkeypatch.setenv("TRITON_INTERPRET", "1")

    names: dict = {}
    exec("import torch\nimport triton\nimport triton.language as tl\n" + triton_gemm.SPLIT_HELPERS, names)
    torch.manual_seed(0)
    x = torch.randn(3, 70, 50).transpose(1, 2) * torch.logspace(-20, 20, 70)  # strided, wide exponents
    head, tail = names["kw_split"](x)
    assert head.is_contiguous() and head.shape == x.shape
    for part in (head, tail):
        assert bool(((part.view(torch.int32) & 0x1FFF) == 0).all())
    err = (head.double() + tail.double() - x.double()).abs()
    assert bool((err <= x.double().abs() * 2.0 ** -21).all())


def test_the_precheck_runs_the_epilogue(plans) -> None:
    p = plans[GELU]
    sc = write(p, "triton")
    assert precheck(p, "triton", region(sc)).status.value == "pass"
    assert precheck(p, "triton", region(sc, wrong=True)).status.value == "counterexample"
    assert precheck(p, "triton", "y = tl.dot(x, x)").status.value == "unsupported"  # not modelled: the evaluator's
    assert precheck(plans[MATMUL], "triton", "y = x").status.value == "pass"


def test_the_prompt_says_what_the_region_reads(plans) -> None:
    sc = write(plans[GELU], "triton")
    seg = sc.segment
    text = prompts.render("task", task_source="", target="triton", target_name="Triton", ambition=False, fence="python",
                          scaffold={"kernel_view": sc.kernel_view.strip("\n"), "variables": sc.variables,
                                    "torch_lines": seg.torch_lines, "module_notes": seg.module_notes,
                                    "op_notes": seg.op_notes})
    assert f"{GEMM_HEADER}\n# x = self.linear(x)\ngelu = " in text and "self.linear = Linear(in_features=200" in text
    assert "the GEMM's result, `x = self.linear(x)` above, its bias included" in text
    assert "a BLOCK_M x BLOCK_N tile of the output" in text and "accumulated in fp32" in text
    assert "REGION BEGIN" in text and "the loop over K computes this program's BLOCK_M x BLOCK_N tile" in text
    assert "kw_acc" not in sc.kernel_view and "# x: that tile\n    y = x\n" in sc.kernel_view
    # shown abridged (a small model answered `y = x` to the whole loop), run whole
    assert "tl.dot(" not in text and "@triton.autotune" not in text and "tl.dot(" in sc.program


@pytest.mark.skipif(not HAVE_TRITON, reason="triton is not installed")
@pytest.mark.parametrize("task,checks", [(GELU, ("correct", "wrong", "empty")), (MATMUL, ("correct", "wrong")),
                                         (EXAMPLE, ("correct",)), ("bmm", ("correct",))])
def test_the_oracle_program_is_correct_under_the_interpreter(task, checks, tasks, plans, fast_cfg) -> None:
    from kernelwright.evaluate import evaluate

    sc = write(plans[task], "triton")
    cfg = fast_cfg(time=False, extra_env={"TRITON_INTERPRET": "1"})
    regions = {"correct": region(sc), "wrong": region(sc, wrong=True), "empty": ""}
    for check in checks:
        got = evaluate(tasks[task], sc.program_with(regions[check]), cfg)
        if check == "correct":
            assert got.verdict == Verdict.CORRECT and got.custom_kernel, (task, got.verdict, got.error)
        else:
            assert got.verdict != Verdict.CORRECT, (task, check)
