"""An output outside the tolerance, judged against the reference run in float64 (measure/compare.py):
as accurate as the reference passes, less accurate fails, whatever the tolerance says."""

from __future__ import annotations

import pytest
import torch

from kernelwright.evaluate import evaluate
from kernelwright.measure.compare import ACCURACY_FACTOR, compare, tolerance_for
from kernelwright.records import Verdict
from kernelwright.tasks import load_task

from tests.conftest import TASKS


def _case(seed: int = 0, n: int = 4096):
    """A float64 'exact' answer, an fp32 reference 1e-3 off it (above the 1e-4 tolerance) and the
    exact answer rounded to fp32 (a candidate far more accurate than the reference)."""
    g = torch.Generator().manual_seed(seed)
    exact = torch.randn(n, generator=g, dtype=torch.float64)
    ref = (exact + 1e-3 * torch.randn(n, generator=g, dtype=torch.float64)).float()
    return exact, ref, exact.float()


def _tol(ref):
    return tolerance_for([ref], None, None)


def test_more_accurate_than_the_reference_passes_and_is_recorded():
    exact, ref, cand = _case()
    assert not compare(ref, cand, _tol(ref), 0).ok  # the tolerance alone refuses it
    result = compare(ref, cand, _tol(ref), 0, lambda: [exact])
    assert result.ok and result.accuracy is not None
    assert result.accuracy.max_abs_err < result.accuracy.ref_max_abs_err


def test_the_float64_run_is_asked_only_when_the_tolerance_refuses():
    exact, ref, _ = _case()
    asked = []
    assert compare(ref, ref.clone(), _tol(ref), 0, lambda: asked.append(1) or [exact]).ok
    assert not asked


@pytest.mark.parametrize("how", ["downgraded", "one_element", "biased", "nonfinite"])
def test_less_accurate_than_the_reference_fails(how):
    exact, ref, cand = _case()
    err = (ref.double() - exact).abs()
    if how == "downgraded":  # bf16 products: ~4e-3 relative, several times the reference's error
        cand = exact.to(torch.bfloat16).float()
    elif how == "one_element":  # exact everywhere but one element, off by 3x the reference's worst
        cand[7] = float(exact[7] + 3 * err.max())
    elif how == "biased":  # every element off by less than the reference's worst, but all of them
        cand = (exact + 0.9 * ACCURACY_FACTOR * err.max()).float()
        assert (cand.double() - exact).abs().max() < ACCURACY_FACTOR * err.max()
    else:
        cand[3] = float("nan")
    result = compare(ref, cand, _tol(ref), 0, lambda: [exact])
    assert not result.ok and result.accuracy is None
    heard = result.mismatch.accuracy
    if how == "nonfinite":
        assert heard is None  # no hearing for NaN where the reference is finite
    else:  # heard, and the record says how much less accurate
        assert heard is not None and heard.max_abs_err > heard.ref_max_abs_err or heard.rms_err > heard.ref_rms_err


@pytest.mark.parametrize("exact", [None, "float32", "shape", "another_run"])
def test_without_a_float64_run_the_tolerance_decides(exact):
    """No float64 run, one that is not float64 (the module cast inside), or one that is not the same
    computation (a reference drawing random numbers: its 'error' would be a bar anything clears)."""
    e, ref, cand = _case()
    noisy = ref.double() + torch.randn(ref.shape, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    run = {None: lambda: None, "float32": lambda: [e.float()], "shape": lambda: [e[:-1]],
           "another_run": lambda: [noisy]}[exact]
    assert not compare(ref, cand, _tol(ref), 0, run).ok
    if exact == "another_run":  # the same candidate passes against the real float64 run
        assert compare(ref, cand, _tol(ref), 0, lambda: [e]).ok


@pytest.fixture(scope="module")
def offset_sum():
    return load_task(str(TASKS / "offset_running_sum.py"))


EXACT = """
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, offset):
        super().__init__()

    def forward(self, x):
        return x.double().sum(1).float()
"""

HALF = EXACT.replace("x.double().sum(1).float()", "x.half().float().sum(1)")


def test_the_evaluator_hears_an_exact_answer_in_every_check(offset_sum, fast_cfg):
    """A plain PyTorch candidate (so no_custom_kernel, a verdict whose outputs matched): each trial,
    timed call and recheck refuses it by the tolerance and passes it against float64."""
    cfg = fast_cfg(trials=3, warmup=2, iters=5)
    result = evaluate(offset_sum, EXACT, cfg)
    assert result.verdict == Verdict.NO_CUSTOM_KERNEL, result.error
    assert result.accuracy is not None and result.accuracy.comparisons >= 3 + 2 + 5 + 1
    assert result.accuracy.max_abs_err < result.accuracy.ref_max_abs_err


def test_the_evaluator_refuses_a_downgrade_as_inaccurate(offset_sum, fast_cfg):
    result = evaluate(offset_sum, HALF, fast_cfg(trials=2, time=False))
    assert result.verdict == Verdict.WRONG_OUTPUT and result.accuracy is None
    heard = result.mismatch.accuracy
    assert heard is not None and heard.max_abs_err > 2 * heard.ref_max_abs_err


def test_the_report_says_which_checks_passed_against_float64():
    from rich.console import Console

    from kernelwright.records import Accuracy, EvalResult
    from kernelwright.report.console import print_result

    console = Console(record=True, width=200)
    r = EvalResult(verdict=Verdict.CORRECT, accuracy=Accuracy(comparisons=47, max_abs_err=4.8e-4, ref_max_abs_err=2.0e-3,
                                                               rms_err=2.9e-5, ref_rms_err=1.5e-4))
    print_result(console, r)
    text = console.export_text()
    assert "47 output check(s) passed against the reference run in float64" in text and "0.002" in text


def test_the_report_says_how_much_less_accurate_a_wrong_output_was():
    from rich.console import Console

    from kernelwright.records import Accuracy, EvalResult, Mismatch
    from kernelwright.report.console import print_result

    console = Console(record=True, width=200)
    heard = Accuracy(comparisons=1, max_abs_err=0.38, ref_max_abs_err=2.0e-3, rms_err=0.05, ref_rms_err=1.5e-4)
    print_result(console, EvalResult(verdict=Verdict.WRONG_OUTPUT, mismatch=Mismatch(trial=0, accuracy=heard)))
    assert "max abs error 0.38 (the reference's 0.002)" in console.export_text()
