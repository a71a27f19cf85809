"""Timing that cannot be gamed (issue #16): hostile candidates aimed at the timing loop, each
through the real evaluator (a real child process, a real C++ build), each with its verdict.

The C++ fixtures share one extension (kw_fixture_timing, built once per session). Its honest
kernel busy-waits 1 ms per call, so a memo that served timed calls would show as a median below
1 ms: with fresh values at fresh addresses in every call, none does.
"""

from __future__ import annotations

import contextlib

import pytest

from kernelwright.evaluate import EvalConfig, EvaluatorError, evaluate
from kernelwright.records import Verdict
from kernelwright.tasks import load_task
from tests.conftest import CANDIDATES, TASKS

HOSTILE = CANDIDATES / "cpu" / "hostile"
KERNEL_FLOOR_MS = 1.0  # the fixtures' busy wait


@pytest.fixture(scope="module")
def bias_relu():
    return load_task(str(TASKS / "bias_relu.py"))


def run(task, name, cfg):
    return evaluate(task, (HOSTILE / name).read_text(), cfg)


MEMOS = ["timing_memo_ptr.py", "timing_memo_id.py", "timing_memo_values.py", "timing_memo_cpp.py"]


@pytest.mark.build
@pytest.mark.parametrize("name", MEMOS)
def test_memo_never_serves_a_timed_call(bias_relu, fast_cfg, name):
    r = run(bias_relu, name, fast_cfg())
    assert r.verdict == Verdict.CORRECT, (r.error, r.output_tail)
    # every timed call computed: the median includes the kernel's busy wait
    assert r.runtime_ms >= KERNEL_FLOOR_MS and r.timing.p25_ms >= KERNEL_FLOOR_MS, r.timing
    assert r.timing.checked_calls == 3 + 20


# (fixture, verdict, reason the record names, verdict with static rules off or None)
CHEATS = [
    ("timing_first_calls.py", Verdict.CHEAT, "wrong output on timed calls", None),
    ("timing_stale_output.py", Verdict.CHEAT, "wrong output on timed calls", None),
    ("timing_stale_cpp.py", Verdict.CHEAT, "wrong output on timed calls", None),
]


# A spot-checked trial call is asked again on the same inputs (judge.Judge._call), so the trials are
# 3 calls or more. These fixtures count inputs: one that counted calls would serve its stale or wrong
# answer in a trial whenever a spot check fell there, a cached result or a wrong output instead of the
# timed-call cheat. Spot checks on 1 call in 4 (not 1 in 16) put a retry in the trials of about half
# the runs of each case (1 in 8 at the default rate).
SPOT_OFTEN = {"KERNELWRIGHT_SPOT_IN_256": "64"}


@pytest.mark.build
@pytest.mark.parametrize("name,verdict,reason,dynamic", CHEATS, ids=[c[0] for c in CHEATS])
def test_gaming_the_timed_calls_is_a_cheat(bias_relu, fast_cfg, name, verdict, reason, dynamic):
    r = run(bias_relu, name, fast_cfg(extra_env=SPOT_OFTEN))
    assert r.verdict == verdict, (r.error, r.output_tail)
    if dynamic is not None:
        r = run(bias_relu, name, fast_cfg(static_checks=False, extra_env=SPOT_OFTEN))
        assert r.verdict == dynamic, (r.error, r.output_tail)
    assert reason in r.cheat_reasons, (r.cheat_reasons, r.error)
    assert r.speedup is None and not r.correct


@pytest.mark.build
def test_a_candidate_cannot_tell_the_trials_from_the_timed_calls(bias_relu, fast_cfg):
    """It looks for the evaluator's trial functions among its callers; in the runner every call comes
    from the same request handler, so it gives its fast wrong answer in the first trial (the
    in-process worker caught it only in the timing loop: cheat)."""
    assert run(bias_relu, "timing_correctness_only.py", fast_cfg()).verdict == Verdict.STATIC_VIOLATION
    r = run(bias_relu, "timing_correctness_only.py", fast_cfg(static_checks=False))
    assert r.verdict == Verdict.WRONG_OUTPUT and r.trials == 1, (r.error, r.output_tail)


def test_rewriting_inputs_in_the_timed_calls_is_a_cheat(bias_relu, fast_cfg):
    r = run(bias_relu, "timing_rewrite_inputs.py", fast_cfg())
    assert r.verdict == Verdict.CHEAT, (r.error, r.output_tail)
    assert "modified its inputs in place during timing" in r.cheat_reasons and r.speedup is None


@pytest.mark.build
@pytest.mark.parametrize("name", ["timing_resize_inputs.py", "timing_resize_cpp.py"])
def test_inputs_cannot_be_resized(bias_relu, fast_cfg, name):
    """On the CPU the judge hands inputs over as shared memory (evaluate/arena.py): a resize raises in
    the candidate's own call, in the first trial, and the reference has its own copy anyway."""
    r = run(bias_relu, name, fast_cfg())
    assert r.verdict == Verdict.RUNTIME_ERROR and "not resizable" in r.error, (r.error, r.output_tail)


@pytest.mark.build
def test_honest_candidate_timing_record(bias_relu, fast_cfg):
    r = evaluate(bias_relu, (CANDIDATES / "cpu" / "correct_cpp.py").read_text(), fast_cfg())
    assert r.verdict == Verdict.CORRECT, r.error
    for t in (r.timing, r.ref_timing):
        assert t.calls == 20 and t.checked_calls == 23
        assert t.threads is not None and t.threads >= 1
        assert t.runnable_before is not None and t.load_before is not None and t.load_after is not None
        assert t.floor_ms is not None and t.floor_ms > 0
        assert "fresh inputs per call" in t.protocol
    assert r.timing.threads == r.ref_timing.threads


@pytest.mark.parametrize("field,value", [("trials", 0), ("iters", 0), ("warmup", -1), ("input_sets", 0),
                                         ("timeout", -5.0), ("timeout", 0), ("atol", -1e-4), ("rtol", float("nan")),
                                         ("iters", 2.5), ("trials", True)])
def test_bad_evaluator_options_are_bad_input(field, value):
    with pytest.raises(EvaluatorError, match=field):
        EvalConfig(**{field: value})


def test_good_evaluator_options_pass():
    EvalConfig(trials=1, iters=1, warmup=0, input_sets=1, timeout=0.5, atol=0.0, rtol=1e-2)


def test_study_spec_rejects_bad_evaluator_options(tmp_path):
    from kernelwright.study.spec import StudySpecError, load_spec

    with pytest.raises(StudySpecError, match="iters"):
        load_spec(None, {"out": str(tmp_path), "eval.iters": 0})


@pytest.mark.build
def test_a_full_host_disk_is_never_the_candidates(bias_relu, fast_cfg, tiny_disk, monkeypatch, caplog, build_cache):
    import tempfile

    from kernelwright.evaluate import buildcache
    from kernelwright.evaluate.buildspec import literal_builds

    # a build of its own: a comment inside the C++ source changes the build key (builds are shared by
    # key across candidates, and the run's cache is shared), so this candidate must build
    source = (CANDIDATES / "cpu" / "correct_cpp.py").read_text()
    source = source.replace("#include <torch/extension.h>", f"#include <torch/extension.h>\n// {tiny_disk}", 1)
    with open(tiny_disk / "filler", "wb") as f:  # the host's disk, where the scratch folders are, full
        with contextlib.suppress(OSError):
            f.write(b"\0" * (2 << 20))
    # builds run in the box's own tmpfs: the trusted builder cannot deliver its library to the full
    # host folder (nothing half-written is promoted), and the worker builds it itself
    monkeypatch.setattr(tempfile, "tempdir", str(tiny_disk))
    r = evaluate(bias_relu, source, fast_cfg(time=False))
    assert r.verdict == Verdict.CORRECT, (r.verdict, r.error)
    [build] = literal_builds(source).builds
    key = buildcache.build_key(build.arguments, "", buildcache.torch_version())
    assert buildcache.lookup(str(build_cache / "builds"), buildcache.SHARED, key, build.name)[1] in ("miss", "hit")
    monkeypatch.undo()
    # a full build cache only stops the build being kept: the candidate keeps its verdict
    r = evaluate(bias_relu, source, fast_cfg(cache_dir=str(tiny_disk), time=False))
    assert r.verdict == Verdict.CORRECT, (r.verdict, r.error)
    assert "No space left on device" in caplog.text


def _stats(median_ms, floor_ms):
    from kernelwright.records import TimingStats

    return TimingStats(median_ms=median_ms, p25_ms=median_ms, p75_ms=median_ms, mean_ms=median_ms, calls=1,
                       protocol="test", floor_ms=floor_ms)


@pytest.mark.parametrize("cand_ms,ref_ms,floor_ms,expected", [
    (0.01, 5.0, 1.0, True),     # far below a floor the reference respects: no real call is that fast
    (0.6, 5.0, 1.0, False),     # above half the floor
    (0.01, 0.5, 1.0, False),    # the reference itself beats the floor: the model does not fit this task
    (0.001, 5.0, 0.01, False),  # floor under the minimum: call overheads dominate
    (0.01, 5.0, None, False),   # no bandwidth figure: no floor
])
def test_below_floor(cand_ms, ref_ms, floor_ms, expected):
    from kernelwright.measure.timing import below_floor

    assert below_floor(_stats(cand_ms, floor_ms), _stats(ref_ms, floor_ms), 0.5, 0.05) is expected
