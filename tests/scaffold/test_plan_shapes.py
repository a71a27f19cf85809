"""Planning reads shapes from a fake full-size run and values from a reduced real one
(scaffold/reduce.py): a module of any size plans as it does at a small size, on any machine,
whatever memory is free; scalar inputs plan; a failure says what went wrong under fx's wrappers.
One planning child for every module here."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from kernelwright.child import one_line
from kernelwright.scaffold import SegmentKind, plan_tasks, write
from kernelwright.tasks import load_task

# 40000 x 430000 fp32 is 64 GiB: more than this machine or one GPU has. The plan must come back
# without allocating it (it would be killed, or fail, if it did).
ROWS = '''
import torch

batch_size = {batch}
dim = {dim}


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.bias = torch.nn.Parameter(torch.randn(1, 1))

    def forward(self, x):
        return torch.softmax(torch.relu(x * 2.0 + self.bias), dim=1)


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
'''
GEMM = '''
import torch

M = {m}
K = {k}
N = {n}


class Model(torch.nn.Module):
    def forward(self, A, B):
        return torch.sigmoid(torch.matmul(A, B)) * 0.5


def get_inputs():
    return [torch.randn(M, K), torch.randn(K, N)]


def get_init_inputs():
    return []
'''
SCALAR = '''
import torch

M = 16384
N = 4096


class Model(torch.nn.Module):
    def forward(self, A: torch.Tensor, s: float) -> torch.Tensor:
        return A * s


def get_inputs():
    return [torch.randn(M, N), 3.14]


def get_init_inputs():
    return []
'''
MISMATCH = '''
import torch


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(7, 5))

    def forward(self, x):
        return torch.relu(torch.matmul(x, self.w))


def get_inputs():
    return [torch.randn(4, 6)]


def get_init_inputs():
    return []
'''
HUGE = {"rows": ROWS.format(batch=40000, dim=430000), "gemm": GEMM.format(m=120000, k=120000, n=100000)}
TINY = {"rows": ROWS.format(batch=16, dim=64), "gemm": GEMM.format(m=32, k=32, n=24)}
# each size of the huge module and the tiny one's in its place
SIZES = {"rows": {40000: 16, 430000: 64}, "gemm": {120000: 32, 100000: 24}}


@pytest.fixture(scope="module")
def plans(tmp_path_factory):
    folder: Path = tmp_path_factory.mktemp("modules")
    files = {f"huge_{k}": v for k, v in HUGE.items()} | {f"tiny_{k}": v for k, v in TINY.items()} | {
        "scalar": SCALAR, "mismatch": MISMATCH}
    tasks = []
    for name, text in files.items():
        (folder / f"{name}.py").write_text(text)
        tasks.append(load_task(str(folder / f"{name}.py")))
    return dict(zip(files, plan_tasks(tasks, "full", timeout=120), strict=True))


def _shapeless(text: str, sizes: dict[int, int]) -> str:
    """``text`` with the huge module's sizes (and their products) as the tiny one's, and the
    extension's name (task id and hash of its source) and the launch settings left out."""
    text = re.sub(r"kw_(huge|tiny)_\w+?_[0-9a-f]{8}\b", "kw_ext", text)
    text = re.sub(r"\{'threads': \d+, 'stage': \d+\}", "LAUNCH", text)  # a row's launch follows its length
    for big, small in sorted(sizes.items(), reverse=True):
        text = re.sub(rf"\b{big}\b", str(small), text)
    for a in sizes:
        for b in sizes:
            text = re.sub(rf"\b{a * b}\b", str(sizes[a] * sizes[b]), text)
    return text


@pytest.mark.parametrize("name", ["rows", "gemm"])
def test_a_module_too_large_for_any_device_plans_as_it_does_at_a_tiny_size(plans, name) -> None:
    huge, tiny = plans[f"huge_{name}"], plans[f"tiny_{name}"]
    assert huge.available and tiny.available, (huge.reason, tiny.reason)
    assert huge.segment.args[0].shape != tiny.segment.args[0].shape  # the full size was planned
    assert huge.probes is not None and tiny.probes is not None
    for target in ("cpp", "cuda", "triton"):
        big, small = write(huge, target), write(tiny, target)
        assert big.available and small.available
        assert _shapeless(big.program, SIZES[name]) == _shapeless(small.program, {}), target
    if name == "rows":
        assert huge.segment.kind == SegmentKind.ROW and huge.segment.targets == ["mul", "add", "relu", "softmax"]
        assert huge.segment.cols == 430000 and huge.segment.rows == 40000
    else:  # the GEMM with its epilogue, Triton's alternative
        assert huge.gemm is not None and huge.gemm.available and tiny.gemm is not None and tiny.gemm.available
        spec = huge.gemm.segment.gemm
        assert (spec.m, spec.k, spec.n) == (120000, 120000, 100000)


def test_a_module_with_a_scalar_input_plans(plans) -> None:
    plan = plans["scalar"]
    assert plan.available, plan.reason
    assert plan.segment.kind == SegmentKind.ELEMENTWISE and plan.segment.targets == ["mul"]
    assert plan.segment.args[0].shape == [16384, 4096]
    assert "def forward(self, A: torch.Tensor, s: float)" in plan.model_new and "kw_fused(" in plan.model_new


def test_a_failure_under_shapeprop_says_what_went_wrong(plans) -> None:
    reason = plans["mismatch"].reason
    assert not plans["mismatch"].available and "\n" not in reason
    assert "ShapeProp error for: node=%matmul" in reason  # where fx was
    assert "caused by RuntimeError" in reason and "[4, 6] X [7, 5]" in reason  # and what went wrong there


def test_one_line_walks_the_cause_chain() -> None:
    try:
        try:
            raise ValueError("the real cause\nsecond line")
        except ValueError as inner:
            raise RuntimeError("a wrapper") from inner
    except RuntimeError as e:
        assert one_line(e) == "RuntimeError: a wrapper; caused by ValueError: the real cause"
