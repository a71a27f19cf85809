"""Derived problem sizes (kernelwright/tasks/sizing.py): which constants scale, what they become,
and that the rewritten module is the same problem, smaller. Measuring runs under FakeTensorMode
(sizing_child.measure_source), in this process for the pure parts and in the real child for
`sized_task`."""

from __future__ import annotations

import ast
from fractions import Fraction

import pytest

from kernelwright.evaluate.evaluator import EvalConfig
from kernelwright.errors import EvaluatorError
from kernelwright.records import Task
from kernelwright.tasks import sizing as sz
from kernelwright.tasks.sizing_child import measure_source

BIG = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x) * 2.0


batch = 4096
dim = 393216  # 6.4 GB of float32 inputs


def get_inputs():
    return [torch.rand(batch, dim)]


def get_init_inputs():
    return []
'''

CONV = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, stride, padding, groups):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, stride=stride, padding=padding, groups=groups)

    def forward(self, x):
        return self.conv(x)


batch_size = 64
in_channels = 96
out_channels = 96
height = width = 256
kernel_size = 3
stride = 2
padding = 1
groups = 12
unused = 4096  # read by nothing the problem builds


def get_inputs():
    return [torch.rand(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size, stride, padding, groups]
'''


def _task(source: str, name: str = "m") -> Task:
    return Task(id=name, name=name, source=source)


def _shape_of(source: str) -> str:
    """The module's AST with every integer literal blanked: equal for the same structure."""
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool):
            node.value = 0
    return ast.dump(tree)


def test_a_6_gb_module_gets_a_derived_size_within_16_mb_with_the_same_structure():
    task = sz.sized_task(_task(BIG), "small", "cpu")
    s = task.sizing
    assert s is not None and s.mode == "budget"
    assert s.input_bytes + s.output_bytes <= 16 * 2**20
    assert s.original_bytes == 2 * 4096 * 393216 * 4  # the input and the output at full size
    values = {c.name: c.value for c in s.constants}
    assert values["batch"] < 4096 and values["dim"] < 393216 and all(v >= 16 for v in values.values())
    assert s.input_shapes == [f"({values['batch']}, {values['dim']}) float32"]
    assert _shape_of(task.source) == _shape_of(BIG)  # only the two literals changed
    assert "# 6.4 GB of float32 inputs" in task.source  # the rest of the text as it was
    # the second shape differs in the batch and in the inner size
    second = {c.name: c.second for c in s.constants}
    assert second["batch"] not in (None, values["batch"]) and second["dim"] not in (None, values["dim"])


def test_conv_constants_kernel_and_stride_kept_groups_still_divide_the_channels():
    slots = sz.find_slots(CONV)
    keys = [s.key for s in slots]
    assert "unused" not in keys  # get_inputs and get_init_inputs never read it
    assert "height=width" in keys  # one chained assignment, one constant
    p = sz.plan(slots, {s.key: s.value for s in slots})
    kept = {k for k, r in p.roles.items() if not r.scaled}
    assert {"kernel_size", "stride", "padding", "groups"} <= kept
    assert {"batch_size", "in_channels", "out_channels", "height=width"}.isdisjoint(kept)
    req = sz.SizeRequest(size="1/16", mode="factor", env_size="full", factor=Fraction(1, 16))

    def measure(assignment):
        return measure_source(sz.rewrite(CONV, slots, assignment, p.values), "conv.py")

    got = sz.choose(p, req, measure, measure(p.assignment()), "conv.py")
    values = p.assignment()
    # 96/16 = 6 is under the floor of 16; the next multiple of the kept group count is 24
    assert values["in_channels"] == 24
    assert values["in_channels"] == values["out_channels"]  # one original value, one derived value
    assert values["kernel_size"] == 3 and values["stride"] == 2 and values["groups"] == 12
    assert values["height=width"] == 16 and values["batch_size"] == 4
    assert got.forward_error is None and got.input_shapes == ["(4, 24, 16, 16) float32"]


def test_a_module_that_cannot_shrink_enough_is_refused_in_one_line():
    source = BIG.replace("torch.rand(batch, dim)", "torch.rand(batch, 3, 4096, 4096)")  # only the batch scales
    slots = sz.find_slots(source)
    p = sz.plan(slots, {s.key: s.value for s in slots})

    def measure(assignment):
        return measure_source(sz.rewrite(source, slots, assignment, p.values), "big.py")

    with pytest.raises(sz.SizingError) as e:
        sz.choose(p, sz.request("small", "cpu", own_sizes=False), measure, measure(p.assignment()), "big.py")
    assert "over the bound of 16 MB" in str(e.value) and "\n" not in str(e.value)


def test_sizes_accepted_and_refused():
    assert sz.parse_factor("1/8") == Fraction(1, 8) and sz.parse_factor("0.5") == Fraction(1, 2)
    for bad in ("2", "0", "-1/8", "tiny", "1/0"):
        with pytest.raises(sz.SizingError):
            sz.check_size(bad)
        with pytest.raises(EvaluatorError):
            EvalConfig(size=bad)
    assert EvalConfig(size="1/8").size == "1/8"
    # a built-in task keeps its own small size; any other module gets the bounded derived one
    assert sz.request("small", "cpu", own_sizes=True).mode == "own"
    assert sz.request("auto", "cpu", own_sizes=False).mode == "budget"
    assert sz.request("auto", "cuda:0", own_sizes=False).mode == "full"
    assert sz.request("1/4", "cpu", own_sizes=True).factor == Fraction(1, 4)


def test_the_forms_a_size_constant_takes():
    source = '''import os
FULL = os.environ.get("KERNELWRIGHT_SIZE") == "full"
batch_size = 8192 * 2
D, H, W = 24, 32, 32
input_shape = (4096,)
rows = 8192 if FULL else 64
groups = batch_size  # follows batch_size: not a constant of its own


def get_inputs():
    return [rows, D, H, W, input_shape, groups]


def get_init_inputs():
    return []
'''
    slots = {s.key: s for s in sz.find_slots(source)}
    assert set(slots) == {"batch_size", "D", "H", "W", "input_shape[0]", "rows"}
    assert slots["batch_size"].value == 16384 and slots["rows"].value is None  # decided when the module runs
    out = sz.rewrite(source, list(slots.values()), {"batch_size": 512, "H": 16, "input_shape[0]": 128, "rows": 32},
                     {"batch_size": 16384, "H": 32, "input_shape[0]": 4096, "rows": 64})
    assert "batch_size = 512\n" in out and "D, H, W = 24, 16, 32" in out and "input_shape = (128,)" in out
    assert "rows = 32\n" in out and "groups = batch_size  # follows" in out
