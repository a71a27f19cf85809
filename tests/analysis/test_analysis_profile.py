"""Profiler self times: no double counting, and consistent with per-call wall time.

The 10% check compares summed self time with the first-op-to-last-op span of each call inside the
profiled run (profile.py says why not with the unprofiled forward). Tasks are chosen whose forward
is one user-level op that ATen runs as a nest of ops (softmax -> _softmax, matmul -> mm,
conv2d -> convolution -> _convolution -> mkldnn_convolution): summing total instead of self time
would give 2-4x, and missing the nested ops well under 1. Multi-op forwards at small size leave
Python between their ops (coverage 0.7-0.93 on this CPU), so for them only the upper bound holds.
"""

from __future__ import annotations

import statistics

import pytest

from kernelwright.analysis import profile_reference
from tests.analysis._helpers import reference

RUNS = 3


@pytest.mark.parametrize("task_id,top_target", [
    ("builtin/L1/03_softmax", "softmax"),
    ("builtin/L1/10_matmul", "matmul"),
    ("builtin/L1/11_conv2d", "convolution"),
])
def test_self_time_matches_the_profiled_forward(task_id, top_target):
    model, inputs = reference(task_id)
    reports = [profile_reference(model, inputs, "cpu", warmup=3, iters=10) for _ in range(RUNS)]
    coverage = statistics.median(r.coverage for r in reports)
    assert abs(coverage - 1.0) <= 0.10, [r.coverage for r in reports]
    report = reports[0]
    assert report.top[0].target == top_target and report.top[0].share > 0.5
    assert report.clock == "self_cpu" and report.iters == 10 and report.tolerance == 0.10
    assert sum(o.share for o in report.top) <= 1.0 + 1e-9
    assert report.forward_ms > 0 and report.window_ms > 0 and report.range_cost_ms >= 0
    # Each call's ops lie inside its range, and the window is the range less the calibrated cost of an
    # empty one; the medians keep that order. (A ratio bound failed under CI load: the calibration ran
    # 14 us slow while the forward took 26 us.)
    assert report.span_ms <= report.window_ms + report.range_cost_ms + 1e-6


def test_multi_op_forward_is_never_double_counted():
    model, inputs = reference("builtin/L2/01_linear_gelu_scale")
    reports = [profile_reference(model, inputs, "cpu", warmup=2, iters=8) for _ in range(RUNS)]
    coverage = statistics.median(r.coverage for r in reports)
    assert 0.3 < coverage <= 1.10
    ops = {o.op for o in reports[0].top}
    assert {"aten::addmm", "aten::gelu", "aten::mul"} <= ops
    report = reports[0]
    assert report.host_gap_ms == pytest.approx(max(0.0, report.window_ms - report.self_total_ms))
    assert report.window_coverage <= 1.10
