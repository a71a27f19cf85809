"""child.load_task_module: the one way a child runs a task's source (the judge's reference,
analysis, scaffold planning, optimize's probe)."""

from __future__ import annotations

import sys

import pytest

from kernelwright.child import load_task_module

SOURCE = """
import dataclasses
import torch

@dataclasses.dataclass
class Shape:   # dataclasses look their module up in sys.modules while the class is made
    n: int = 4

class Model(torch.nn.Module):
    def forward(self, x):
        return x * 2

def get_inputs():
    return [torch.ones(Shape().n)]

def get_init_inputs():
    return []
"""


def test_a_task_module_runs_and_stays_unimportable_unless_kept():
    module = load_task_module(SOURCE, "<task>", "_kw_test_task")
    assert module.Model()(*module.get_inputs()).tolist() == [2.0] * 4
    assert module.Model.forward.__code__.co_filename == "<task>"  # what tracebacks and the judge read
    assert "_kw_test_task" not in sys.modules
    kept = load_task_module(SOURCE, "/tmp/x/reference.py", "_kw_test_kept", file="/tmp/x/reference.py", keep=True)
    try:
        assert sys.modules["_kw_test_kept"] is kept and kept.__file__ == "/tmp/x/reference.py"
    finally:
        sys.modules.pop("_kw_test_kept", None)


def test_what_the_source_raises_reaches_the_caller_and_nothing_is_left():
    with pytest.raises(ZeroDivisionError):
        load_task_module("x = 1 / 0\n", "<task>", "_kw_test_broken", keep=True)
    with pytest.raises(SyntaxError):
        load_task_module("def f(:\n", "<task>", "_kw_test_syntax")
    assert "_kw_test_broken" not in sys.modules and "_kw_test_syntax" not in sys.modules
