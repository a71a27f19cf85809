"""The evaluator on a real NVIDIA GPU: honest CUDA and Triton kernels and GPU-specific hacks.

Run on the device machine (see docs/results/evaluator-gpu.md for the command and its output);
skipped where no GPU is visible.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from kernelwright.evaluate import evaluate  # noqa: E402
from kernelwright.records import Verdict  # noqa: E402
from kernelwright.tasks import load_task  # noqa: E402

from tests.conftest import CANDIDATES, TASKS  # noqa: E402

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU")]
GPU = CANDIDATES / "gpu"


@pytest.fixture(scope="module")
def task():
    return load_task(str(TASKS / "bias_relu.py"))


def run(task, name, cfg):
    return evaluate(task, (GPU / name).read_text(), cfg)


@pytest.fixture
def gpu_cfg(fast_cfg):
    def make(**kw):
        return fast_cfg(device="cuda", iters=100, warmup=10, **kw)

    return make


@pytest.mark.parametrize("name,expected", [
    ("correct_cuda.py", Verdict.CORRECT),
    ("correct_triton.py", Verdict.CORRECT),
    ("torch_only_gpu.py", Verdict.NO_CUSTOM_KERNEL),
    ("compiled_then_torch_cuda.py", Verdict.NO_CUSTOM_KERNEL),
    ("cached_output_cuda.py", Verdict.CHEAT),
])
def test_gpu_verdicts(task, gpu_cfg, name, expected):
    r = run(task, name, gpu_cfg())
    assert r.verdict == expected, (r.error, r.output_tail)
    if expected == Verdict.CORRECT:
        assert r.custom_kernel and r.speedup and r.timing.calls == 100
        assert "device-sync in the judge" in r.timing.protocol
        assert r.versions.get("gpu")


def test_uninitialized_gpu_memory_is_not_correct(task, gpu_cfg):
    r = run(task, "uninitialized_output_cuda.py", gpu_cfg())
    assert r.verdict in (Verdict.WRONG_OUTPUT, Verdict.CHEAT), r.error


def test_side_stream_work_is_inside_the_timer(task, gpu_cfg):
    """Stream creation is only a static warning; the dynamic check catches the unjoined work."""
    r = run(task, "side_stream.py", gpu_cfg())
    assert r.verdict == Verdict.CHEAT and "stream" in r.error, (r.verdict, r.error)
    assert any(f.rule == "stream_use" for f in r.findings)


def test_illegal_address_then_next_evaluation_is_unharmed(task, gpu_cfg):
    r = run(task, "illegal_address_cuda.py", gpu_cfg())
    assert r.verdict in (Verdict.RUNTIME_ERROR, Verdict.CRASH), r.error
    assert run(task, "correct_cuda.py", gpu_cfg()).verdict == Verdict.CORRECT


def test_gpu_infinite_loop_times_out_and_gpu_still_answers(task, gpu_cfg):
    run(task, "correct_cuda.py", gpu_cfg(time=False))  # the shared extension is built first
    r = run(task, "spin_cuda.py", gpu_cfg(timeout=45))
    assert r.verdict == Verdict.TIMEOUT
    assert r.gpu_healthy is True
    assert run(task, "correct_cuda.py", gpu_cfg(time=False)).verdict == Verdict.CORRECT


INPUTS_ON = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)


def get_inputs():
    x = torch.randn(64, 256)
    @CHECK@
    return [x]


def get_init_inputs():
    return []
'''
TORCH_ONLY = '''
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.clamp(x, min=0)
'''


@pytest.mark.parametrize("check", [
    # drawn on the GPU: the CPU draw and copy cost ~2 s per 1 GiB input at benchmark sizes
    "assert x.is_cuda, 'get_inputs() ran on the CPU'",
    # a get_inputs() that only works on the CPU still gets its inputs (drawn there, then copied)
    "x = torch.from_numpy(x.numpy())",
])
def test_inputs_are_drawn_on_the_gpu_when_they_can_be(tmp_path, gpu_cfg, check):
    f = tmp_path / "task.py"
    f.write_text(INPUTS_ON.replace("@CHECK@", check))
    r = evaluate(load_task(str(f)), TORCH_ONLY, gpu_cfg())
    assert r.verdict == Verdict.NO_CUSTOM_KERNEL, (r.verdict, r.error)
