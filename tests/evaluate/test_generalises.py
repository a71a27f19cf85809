"""Shapes the kernel never saw: a candidate correct at the task's shape is checked once more, for
correctness only, at the task's second shape (a different batch and inner size, from
tasks/sizing.py), through the real evaluator on the CPU. A kernel that hard-codes the task's
dimensions is correct, and reported `generalises: false`; an honest one `true`. Python-only
candidates: nothing is compiled."""

from __future__ import annotations

import pytest

from kernelwright.evaluate import evaluate
from kernelwright.records import Task
from kernelwright.strategies import selection
from kernelwright.tasks.sizing import sized_task

TASK = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x) + 1.0


batch_size = 64
features = 256


def get_inputs():
    return [torch.randn(batch_size, features)]


def get_init_inputs():
    return []
'''

HARD_CODED = '''import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        # written for the one shape it was shown: 64 rows of 256
        return torch.relu(x.reshape(64, 256)) + 1.0
'''

HONEST = HARD_CODED.replace("x.reshape(64, 256)", "x").replace("written for the one shape it was shown: 64 rows of 256",
                                                                   "any shape")


@pytest.fixture(scope="module")
def task() -> Task:
    sized = sized_task(Task(id="relu_plus_one", name="relu_plus_one", source=TASK), "full", "cpu")
    assert sized.sizing is not None and sized.sizing.second_shapes == ["(32, 128) float32"]
    return sized


def test_a_hard_coded_kernel_is_correct_at_the_task_shape_and_does_not_generalise(task, fast_cfg):
    r = evaluate(task, HARD_CODED, fast_cfg(time=False))
    assert r.verdict.outputs_match and r.correct
    assert r.generalises is False
    assert "(32, 128)" in r.generalises_note and "runtime_error" in r.generalises_note
    assert r.sizing == task.sizing  # the record says which shapes were used


def test_an_honest_kernel_generalises(task, fast_cfg):
    r = evaluate(task, HONEST, fast_cfg(time=False))
    assert r.verdict.outputs_match and r.generalises is True


def test_a_task_without_sizing_is_not_checked_and_says_why(fast_cfg):
    r = evaluate(Task(id="plain", name="plain", source=TASK), HONEST, fast_cfg(time=False))
    assert r.verdict.outputs_match and r.generalises is None and "not sized" in r.generalises_note


def test_selection_prefers_the_one_that_generalises_at_equal_speed():
    from kernelwright.records import Attempt, EvalResult, TimingStats, Verdict

    def attempt(i: int, median: float, generalises: bool) -> Attempt:
        t = TimingStats(median_ms=median, p25_ms=median * 0.95, p75_ms=median * 1.05, mean_ms=median, calls=10,
                        protocol="test")
        r = EvalResult(verdict=Verdict.CORRECT, correct=True, custom_kernel=True, speedup=2.0 / median, timing=t,
                       generalises=generalises)
        return Attempt(id=f"a{i}", task_id="t", regime="r", turn=0, sample=i, prompt_hash="", messages=[],
                       raw_response="", eval=r)

    fast_specialised, generalising = attempt(0, 1.00, False), attempt(1, 1.02, True)
    assert selection.select([fast_specialised, generalising]) is generalising  # within the noise
    much_faster_specialised = attempt(2, 0.5, False)
    assert selection.select([much_faster_specialised, generalising]) is much_faster_specialised  # beyond it
