"""The committed study files load, begin every cell at once, and the subset's kind rule classifies
by what a module computes."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from kernelwright.study.spec import load_spec
from kernelwright.tasks.ranges import parse_numbers

ROOT = Path(__file__).resolve().parents[2]
STUDIES = sorted((ROOT / "studies").glob("kernelbench-*.toml"))  # the device studies of KernelBench


def _script():
    spec = importlib.util.spec_from_file_location("kernelbench_studies", ROOT / "scripts" / "kernelbench_studies.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("path", STUDIES, ids=lambda p: p.name)
def test_study_file_loads_and_begins_every_cell_at_once(path):
    spec = load_spec(path)
    if not spec.devices[0].startswith("cuda"):
        return
    assert spec.regimes == ["search"] and spec.eval.compile_baseline
    ids = [parse_numbers(t.split(":")[3], "id", t) for t in spec.tasks if t.count(":") >= 3]
    problems = sum(hi - lo + 1 for numbers in ids for lo, hi in numbers.spans or ())
    assert spec.jobs >= problems


def test_kinds_come_from_what_the_module_computes():
    kind_of = _script().kind_of
    conv = "import torch.nn as nn\nclass Model(nn.Module):\n    def __init__(s):\n        s.c = nn.Conv2d(3, 3, 3)\n"
    assert kind_of(conv, 1) == "conv" and kind_of(conv + "x = torch.relu(y)\n", 2) == "conv_epilogue"
    assert kind_of("y = a @ b\n", 2) == "gemm_epilogue" and kind_of("y = torch.matmul(a, b)\n", 1) == "gemm"
    assert kind_of("y = torch.sum(x, dim=1)\n", 1) == "reduction_norm"
    assert kind_of("y = torch.sigmoid(x)\n", 1) == "elementwise" and kind_of("y = 1\n", 3) == "network"


def test_each_level_share_is_split_over_its_kinds():
    shares = _script()._shares
    from collections import Counter

    got = shares(Counter(conv=60, elementwise=12, reduction_norm=34, gemm=1), 16)
    assert sum(got.values()) == 16 and got["gemm"] == 1 and got["conv"] > got["reduction_norm"] > got["elementwise"]
