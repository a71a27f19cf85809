"""A composite op split into the lines of its definition (kernelwright/scaffold/decompose.py) only
where those lines reproduce it: the table's parts assume an op's defaults (softplus's beta and
threshold, a softmax over the last dim, float32), and a call that breaks them keeps its one line."""

from __future__ import annotations

import textwrap

from kernelwright.scaffold import plan_tasks
from kernelwright.scaffold.decompose import PARTS
from kernelwright.scaffold.precheck.compare import decode
from kernelwright.scaffold.steps import split
from kernelwright.tasks import load_task

MODULE = """
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def forward(self, x):
        return {body}


def get_inputs():
    return [torch.randn({shape}, dtype=torch.{dtype})]


def get_init_inputs():
    return []
"""


def _plans(tmp_path, cases: dict[str, tuple[str, str, str]]):
    tasks = []
    for name, (body, shape, dtype) in cases.items():
        path = tmp_path / f"{name}.py"
        path.write_text(textwrap.dedent(MODULE.format(body=body, shape=shape, dtype=dtype)))
        tasks.append(load_task(str(path)))
    return dict(zip(cases, plan_tasks(tasks)))


def test_a_split_is_kept_only_where_its_parts_reproduce_the_op(tmp_path) -> None:
    plans = _plans(tmp_path, {
        "softplus": ("F.softplus(x) * 2.0", "64, 256", "float32"),
        "softplus_beta": ("F.softplus(x, beta=2.0, threshold=5.0) * 2.0", "64, 256", "float32"),
        "softmax_dim0": ("torch.softmax(x, dim=0) * 2.0", "64, 256", "float32"),
        "mish_fp16": ("F.mish(x) * 2.0", "64, 256", "float16"),
    })
    ok = plans["softplus"].probes
    assert [p.target for p in ok.step_parts[0]] == [t for t, _ in PARTS["softplus"]] and ok.step_parts[1] == []
    # the last part's value is PyTorch's softplus on the probes, within rounding (the probes include
    # values far beyond the threshold of 20, where log(1 + exp(v)) would overflow)
    assert max(decode(ok.steps[0])) > 20
    got, want = decode(ok.step_parts[0][-1].values), decode(ok.steps[0])
    assert all(abs(g - w) <= 1e-6 + 1e-5 * abs(w) for g, w in zip(got, want, strict=True))
    assert len(split(plans["softplus"])) == len(PARTS["softplus"]) + 1
    for name in ("softplus_beta", "mish_fp16"):
        assert all(p == [] for p in plans[name].probes.step_parts), name
        assert len(split(plans[name])) in (0, 2), name  # its lines as written, or none
    dim0 = plans["softmax_dim0"]
    assert not dim0.available or all(p == [] for p in dim0.probes.step_parts)


def test_a_mean_is_a_sum_and_a_division_by_its_count(tmp_path) -> None:
    """A mean over the last two dims without keepdim: the sum of those dims kept, then / their count
    (the values one a row, as the mean's, in another shape)."""
    plans = _plans(tmp_path, {"mean23": ("torch.relu(x).mean(dim=(2, 3))", "8, 16, 6, 6", "float32")})
    parts = plans["mean23"].probes.step_parts[1]
    assert [(p.target, p.expr, p.per_row) for p in parts] == [
        ("sum", "torch.sum({a}, dim=(-2, -1), keepdim=True)", True), ("div", "{p1} / 36", True)]
    got, want = decode(parts[-1].values), decode(plans["mean23"].probes.steps[1])
    assert all(abs(g - w) <= 1e-6 + 1e-5 * abs(w) for g, w in zip(got, want, strict=True))
