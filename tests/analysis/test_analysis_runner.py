"""``analyze()`` through the child process: a full record, and one-line errors."""

from __future__ import annotations

import pytest

from kernelwright.analysis import AnalysisError, GraphShape, TaskAnalysis, analyze
from kernelwright.analysis.runner import (
    AnalysisJob,
    StageError,
    analyze_job,
    resolve_size,
)
from kernelwright.records import Task
from tests.analysis._helpers import TASKS

BROKEN = '''
import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, x):
        raise RuntimeError("boom: this reference is broken")

def get_inputs():
    print("noise on stdout must not corrupt the reply")
    return [torch.randn(4, 4)]

def get_init_inputs():
    return []
'''


def test_analyze_in_a_child_process():
    analysis = analyze(TASKS["builtin/L2/01_linear_gelu_scale"], device="cpu", size="auto")
    assert isinstance(analysis, TaskAnalysis)
    assert (analysis.size, analysis.device, analysis.device_name) == ("small", "cpu", "cpu")
    assert analysis.graph.inputs[0].shape == [32, 200]  # the small size was set for the child
    assert analysis.classification.shape == GraphShape.LIBRARY_EPILOGUE
    assert analysis.classification.epilogue_targets == ["gelu", "mul"]
    assert [c.targets for c in analysis.chains] == [["gelu", "mul"]]
    assert analysis.roofline.device == "cpu" and analysis.roofline.library_flops == 2 * 32 * 200 * 136
    assert analysis.profile is not None and analysis.profile.top
    assert analysis.fraction_of_floor() is not None and 0 < analysis.fraction_of_floor() <= 1
    lines = analysis.prompt_lines()
    assert 4 <= len(lines) <= 8 and all("\n" not in line for line in lines)
    assert any("epilogue: gelu -> mul" in line for line in lines)
    data = analysis.prompt_data()
    assert data["shape"] == "library_epilogue" and data["top_ops"] and data["roofline"]["bound"] in ("memory", "compute")
    assert TaskAnalysis.model_validate_json(analysis.model_dump_json()) == analysis


def _in_process(task: Task, **kw) -> TaskAnalysis:
    """The child's work without the child (the process boundary is tested above)."""
    return analyze_job(AnalysisJob(task_id=task.id, source=task.source, path=task.path, **kw))


def test_gpu_roofline_without_profiling():
    analysis = _in_process(TASKS["builtin/L1/10_matmul"], profile=False, roofline_device="h200")
    assert analysis.profile is None and analysis.roofline.device == "h200" and not analysis.roofline_local
    assert analysis.fraction_of_floor() is None
    assert analysis.prompt_lines()[-1].startswith("roofline (h200, fp32)")


def test_a_failing_model_gives_one_clear_line():
    task = Task(id="test/broken", name="broken", source=BROKEN)
    with pytest.raises(AnalysisError) as info:
        analyze(task, profile=False)
    message = str(info.value)
    assert "\n" not in message
    assert message == "test/broken: forward: Model.forward raised RuntimeError: boom: this reference is broken"
    assert info.value.stage == "forward"


def test_stage_errors_and_a_timeout():
    with pytest.raises(StageError, match="the task source defines no Model"):
        _in_process(Task(id="test/empty", name="empty", source="x = 1\n"))
    bad_init = BROKEN.replace("return []", "return [1, 2, 3]")
    with pytest.raises(StageError) as info:
        _in_process(Task(id="test/init", name="init", source=bad_init))
    assert info.value.stage == "init" and info.value.message.startswith("Model(*get_init_inputs()) raised TypeError")
    with pytest.raises(AnalysisError, match="timeout"):
        analyze(TASKS["builtin/L1/01_gelu_tanh"], timeout=0.5)


def test_resolve_size():
    assert resolve_size("cpu", "auto") == "small" and resolve_size("cuda:0", "auto") == "full"
    assert resolve_size("cuda", "small") == "small"
    with pytest.raises(ValueError):
        resolve_size("cpu", "huge")


# 65536 x 262144 fp32: 64 GiB, more than this machine (or one GPU) has
HUGE = '''
import torch

batch_size = 65536
dim = 262144


class Model(torch.nn.Module):
    def forward(self, A, s):
        return torch.softmax(A * s, dim=1)


def get_inputs():
    return [torch.randn(batch_size, dim), 2.5]


def get_init_inputs():
    return []
'''

NOT_POSITIVE_DEFINITE = '''
import torch


class Model(torch.nn.Module):
    def forward(self, x):
        return torch.linalg.cholesky(-x @ x.mT)


def get_inputs():
    return [torch.randn(2, 8, 8)]


def get_init_inputs():
    return []
'''


def test_the_graph_comes_from_shapes_at_any_size_and_a_scalar_input_is_an_input():
    analysis = _in_process(Task(id="test/huge", name="huge", source=HUGE), profile=False)
    assert [t.shape for t in analysis.graph.inputs] == [[batch_size := 65536, 262144]]
    assert analysis.graph.outputs[0].shape == [batch_size, 262144]
    assert analysis.graph.ops == ["mul", "softmax"]


def test_a_profile_that_fails_costs_the_record_only_its_profile():
    # cholesky fails on the values only: the shapes are fine, the measurement is not
    analysis = _in_process(Task(id="test/npd", name="npd", source=NOT_POSITIVE_DEFINITE), profile=True,
                           measure_peaks=False, warmup=0, iters=1)
    assert analysis.profile is None and analysis.graph.ops
    assert analysis.profile_error is not None and "linalg" in analysis.profile_error.lower()
