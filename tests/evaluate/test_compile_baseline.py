"""torch.compile(reference) as a second baseline: timed under the evaluator's protocol, and what
the study's Table I makes of it."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernelwright.evaluate import evaluate
from kernelwright.records import EvalResult, TimingStats, Verdict
from kernelwright.tasks import load_task

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "candidates" / "linear_gelu_scale_cpp.py"


@pytest.mark.build
def test_compile_baseline_is_timed_like_the_reference(fast_cfg):
    task = load_task("builtin/L2/01_linear_gelu_scale")
    r = evaluate(task, EXAMPLE.read_text(), fast_cfg(compile_baseline=True, iters=10))
    assert r.verdict == Verdict.CORRECT and r.custom_kernel
    # either torch.compile ran here and was timed like the eager reference, or the record says why not
    if r.compile_baseline_error is None:
        assert r.compile_runtime_ms and r.compile_timing is not None and r.faster_than_compile is not None
        assert r.compile_timing.protocol == r.ref_timing.protocol
        # the candidate timed first; then compiled (its first call) holding the device shared, and
        # only the compiled model's timing holds it alone
        names = [s.name for s in r.stages]
        assert names.index("timing") < names.index("compile_baseline") == names.index("compile_timing") - 1
    else:
        assert r.compile_runtime_ms is None and r.faster_than_compile is None
    plain = evaluate(task, EXAMPLE.read_text(), fast_cfg(iters=10))
    assert plain.compile_runtime_ms is None and plain.faster_than_compile is None and plain.compile_baseline_error is None


def test_table_i_states_fast_1_against_torch_compile_only_when_measured():
    from kernelwright.report.metrics import GroupStats

    base = dict(group="g", cells=4, compiled=4, correct=2, custom_correct=2, fast=2, untimed_custom_correct=0)
    assert GroupStats(**base, fast_vs_compile=1, uncompiled_custom_correct=0).fast_vs_compile_pct == 25.0
    assert GroupStats(**base, fast_vs_compile=0, uncompiled_custom_correct=1).fast_vs_compile_pct is None
    assert "faster_than_compile" in EvalResult.model_fields


def _stats(ms: float) -> TimingStats:
    return TimingStats(median_ms=ms, p25_ms=ms * 0.98, p75_ms=ms * 1.02, mean_ms=ms, calls=30, protocol="test")


def test_a_torch_compile_more_than_twice_slower_than_eager_is_flagged_and_never_a_headline():
    from kernelwright.measure.timing import against_compile, compile_misbehaves
    from kernelwright.optimize.types import Options, Outcome
    from kernelwright.report.optimize_report import headline

    why = compile_misbehaves(0.1, 7.8)
    assert why and "78x eager" in why and "misbehaving" in why
    assert compile_misbehaves(0.1, 0.19) is None and compile_misbehaves(None, 7.8) is None
    fields = against_compile(_stats(0.09), _stats(7.8), eager=_stats(0.1))
    assert fields["faster_than_compile"] and fields["compile_baseline_suspect"] == why
    assert against_compile(_stats(0.09), _stats(0.15), eager=_stats(0.1))["compile_baseline_suspect"] is None

    # the user's headline never states a ratio against such a baseline, nor against a chained one
    kept = dict(task_id="t", source_path="m.py", options=Options(), model="m", goal=True, kept_id="a",
                speedup_vs_eager=1.1, speedup_vs_compile=95.0)
    assert "against torch.compile" in headline(Outcome(**kept, vs_compile_by="judge"))
    assert "against torch.compile" not in headline(Outcome(**kept, vs_compile_by="judge", vs_compile_caveat=why))


def test_fast_1_against_a_misbehaving_torch_compile_is_fast_1_against_eager():
    from kernelwright.report.metrics import Scored

    def scored(faster: bool, beats_compile: bool, suspect: str | None) -> Scored:
        r = EvalResult(verdict=Verdict.CORRECT, custom_kernel=True, speedup=1.5 if faster else 0.9, faster=faster,
                       faster_than_compile=beats_compile, compile_baseline_suspect=suspect)
        pick = type("Pick", (), {"eval": r})()
        cell = type("Cell", (), {"status": "ok"})()
        return Scored(cell=cell, group="g", pick=pick, attempts=[pick])

    assert scored(True, True, None).fast_vs_compile and not scored(True, False, None).fast_vs_compile
    # a compile 78x slower than eager is beaten by anything correct: only eager counts as the bar
    assert not scored(False, True, "slow").fast_vs_compile and scored(True, True, "slow").fast_vs_compile
