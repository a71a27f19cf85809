"""A study cell's clock (`cell_minutes`): no model request and no evaluation begun after it; the
cell is recorded with the attempts it made (an answer that came after the clock: unjudged, saying
so) and says the clock stopped it; the clock is part of the cell's key and the report
states it. Real evaluations (a sandboxed child each); the model is a deterministic test double."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from kernelwright.executors.base import Direct
from kernelwright.llm.base import Completion
from kernelwright.records import NOT_JUDGED
from kernelwright.report import study_report
from kernelwright.study.log import read_study
from kernelwright.study.runner import DeviceSlots, config_records, plan_jobs, run_jobs
from kernelwright.study.spec import load_spec
from kernelwright.study.manifest import record_invocation
from kernelwright.tasks import resolve_tasks

pytestmark = pytest.mark.slow  # waits out a clock of 15 s

TASK = '''import torch
class Model(torch.nn.Module):
    def forward(self, x):
        return torch.relu(x)
def get_inputs():
    return [torch.randn(64, 64)]
def get_init_inputs():
    return []
'''

# a whole program that runs and is wrong: the iterative regime asks again, if the clock lets it
WRONG = '''```python
import torch
class ModelNew(torch.nn.Module):
    def forward(self, x):
        return x * 2
```'''


class Slow:
    """A model double that takes `delay` seconds an answer, and counts its calls."""

    model = "slow-double"

    def __init__(self, delay: float) -> None:
        self.delay, self.calls = delay, 0

    def generate(self, requests):
        self.calls += 1
        time.sleep(self.delay)
        return [[Completion(text=WRONG, finish_reason="stop", prompt_tokens=1, completion_tokens=9, latency_s=self.delay)
                 for _ in range(r.n)] for r in requests]


def _study(tmp_path: Path, minutes: float | None):
    (tmp_path / "tasks").mkdir(exist_ok=True)
    (tmp_path / "tasks" / "relu.py").write_text(TASK)
    flags = {"out": str(tmp_path / "s"), "regimes": ["iterative+turns=3+no_scaffold"], "tasks": [str(tmp_path / "tasks")],
             "eval.time": False, "eval.trials": 2, "eval.timeout": 120, "cell_minutes": minutes}
    return load_spec(None, flags)


def test_the_clock_ends_a_cell_after_its_first_turn_and_the_cell_keeps_it(tmp_path):
    # the first request comes after the reference's profile (4 s here), its answer takes 16 s
    spec = _study(tmp_path, 0.25)
    model = Slow(16.0)
    tasks = resolve_tasks(spec.tasks)
    jobs = plan_jobs(spec, model, tasks, None)
    record_invocation(spec.out, spec.model_dump(mode="json"), config_records(spec, model.model), spec.devices, pending=1)
    summary = run_jobs(jobs, spec.out, DeviceSlots(spec.devices), 1, Direct())
    assert summary.done == 1 and summary.failed == 0
    cell = read_study(spec.out).cells[0]
    # one request made (three turns asked for); its answer came after the clock, so it is kept
    # and recorded unjudged, not evaluated; the cell is ok
    assert model.calls == 1 and len(cell.attempt_ids) == 1
    assert cell.status == "ok" and cell.verdict.value == "not_built"
    (attempt,) = read_study(spec.out).attempts_of(cell)
    assert attempt.eval.error.startswith(NOT_JUDGED) and attempt.raw_response == WRONG
    assert cell.stopped == "clock of 0.25 min spent" and "the run stopped: clock of" in cell.reason
    report = study_report.build([spec.out])
    assert any("a clock of 0.25 min per cell" in line and "1 of 1 cell(s) stopped by it" in line
               and "1 candidate(s) left unjudged by it" in line for line in report.sources)


def test_without_a_clock_the_regime_runs_its_turns_and_the_key_differs(tmp_path):
    clocked, free = _study(tmp_path, 0.25), _study(tmp_path, None)
    model = Slow(0.0)
    jobs = plan_jobs(free, model, resolve_tasks(free.tasks), None)
    assert jobs[0].key != plan_jobs(clocked, model, resolve_tasks(clocked.tasks), None)[0].key
    run_jobs(jobs, free.out, DeviceSlots(free.devices), 1, Direct())
    cell = read_study(free.out).cells[0]
    assert model.calls == 3 and len(cell.attempt_ids) == 3 and cell.stopped is None
