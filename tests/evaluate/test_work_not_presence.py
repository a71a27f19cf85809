"""Work, not presence (kernelwright issue #16): custom code counts only if the output depends on it,
and a candidate that reaches the reference is not credited.

The build tier runs real candidates (tests/fixtures/candidates/cpu/hostile/work_*.py) through the
real evaluator; they share one C++ source, so the extension builds once. The unmarked tests drive
evaluate/work.py's parts directly on real tensors and real Python code, without a build.
"""

from __future__ import annotations

import importlib.util
import re
import sys

import pytest
import torch

from kernelwright.evaluate import evaluate, work
from kernelwright.records import Verdict
from kernelwright.tasks import load_task

from tests.conftest import CANDIDATES, TASKS

HOSTILE = CANDIDATES / "cpu" / "hostile"
NOT_CREDITED = {Verdict.NO_CUSTOM_KERNEL, Verdict.CHEAT, Verdict.STATIC_VIOLATION, Verdict.HALLUCINATED_API,
                Verdict.RUNTIME_ERROR}

# (fixture, verdict with static rules on, verdict with them off or None, words the error must hold)
CASES = [
    # custom calls that only copy or fill (C++)
    ("work_identity_then_torch.py", Verdict.NO_CUSTOM_KERNEL, None, "only copied"),
    ("work_copy_kernel.py", Verdict.NO_CUSTOM_KERNEL, None, "only copied"),
    ("work_fill_kernel.py", Verdict.NO_CUSTOM_KERNEL, None, "filled a constant"),
    ("work_computes_returns_input.py", Verdict.NO_CUSTOM_KERNEL, None, "only copied"),
    # custom work whose result the output does not depend on (Python wrappers around real work)
    ("work_discarded.py", Verdict.NO_CUSTOM_KERNEL, None, "does not depend on the custom code"),
    ("work_throwaway_tensor.py", Verdict.NO_CUSTOM_KERNEL, None, "does not depend on the custom code"),
    ("work_out_arg_discarded.py", Verdict.NO_CUSTOM_KERNEL, None, "does not depend on the custom code"),
    # reaching the reference: by module name, by file, through gc, through the call stack
    ("work_import_kw_reference.py", Verdict.HALLUCINATED_API, None, "No module named 'kw_reference'"),
    ("work_import_reference_file.py", Verdict.HALLUCINATED_API, None, "No module named 'reference'"),
    # (the reference is in the judge's process: they find nothing and fall back to PyTorch,
    # discarding their kernel's result)
    ("work_gc_reference.py", Verdict.STATIC_VIOLATION, Verdict.NO_CUSTOM_KERNEL, "does not depend on the custom code"),
    ("work_frame_reference_class.py", Verdict.STATIC_VIOLATION, Verdict.NO_CUSTOM_KERNEL,
     "does not depend on the custom code"),
    # honest: a kernel writing an output argument, and a kernel doing part of the work
    ("work_out_arg.py", Verdict.CORRECT, None, None),
    ("work_partial_kernel.py", Verdict.CORRECT, None, None),
    # operators registered with the dispatcher: probed through a dispatch mode
    ("work_ops.py", Verdict.CORRECT, None, None),
    ("work_ops_discarded.py", Verdict.NO_CUSTOM_KERNEL, None, "does not depend on the custom code"),
]


@pytest.fixture(scope="module")
def bias_relu():
    return load_task(str(TASKS / "bias_relu.py"))


@pytest.mark.build
@pytest.mark.parametrize("name,expected,expected_dynamic,words", CASES, ids=[c[0] for c in CASES])
def test_work_verdicts(bias_relu, fast_cfg, name, expected, expected_dynamic, words):
    source = (HOSTILE / name).read_text()
    result = evaluate(bias_relu, source, fast_cfg(time=False))
    assert result.verdict == expected, (result.verdict, result.error, result.output_tail)
    final = result
    if expected_dynamic is not None:
        final = evaluate(bias_relu, source, fast_cfg(time=False, static_checks=False))
        assert final.verdict == expected_dynamic, (final.verdict, final.error, final.output_tail)
    if words is not None:
        assert words in final.error and final.verdict in NOT_CREDITED and not final.custom_kernel
        if final.verdict == Verdict.CHEAT:
            assert any("ran the reference" in r for r in final.cheat_reasons)
    else:
        assert final.custom_kernel and final.copy_only_calls == []
        assert final.custom_share is not None and 0.0 < final.custom_share <= 1.0


@pytest.mark.build
def test_share_of_time_is_recorded_with_timing(bias_relu, fast_cfg):
    """The share comes from one forward of its own, outside the timing loop: timing keeps its count."""
    r = evaluate(bias_relu, (CANDIDATES / "cpu" / "correct_cpp.py").read_text(), fast_cfg())
    assert r.verdict == Verdict.CORRECT and r.custom_kernel and r.timing.calls == 20
    assert 0.0 < r.custom_share <= 1.0
    assert [s.name for s in r.stages][-2:] == ["recheck", "work"]


HAVE_TRITON = importlib.util.find_spec("triton") is not None
# Triton under its interpreter on this CPU: no build, a few seconds each
TRITON_CASES = [
    ("work_triton_discarded.py", Verdict.NO_CUSTOM_KERNEL, "does not depend on the custom code"),
    ("work_triton_copy.py", Verdict.NO_CUSTOM_KERNEL, "only copied"),
    ("../../gpu/correct_triton.py", Verdict.CORRECT, None),
]


@pytest.mark.skipif(not HAVE_TRITON, reason="triton is not installed")
@pytest.mark.parametrize("name,expected,words", TRITON_CASES, ids=[c[0].split("/")[-1] for c in TRITON_CASES])
def test_triton_launches_must_do_the_work(bias_relu, fast_cfg, name, expected, words):
    r = evaluate(bias_relu, (HOSTILE / name).read_text(), fast_cfg(time=False, extra_env={"TRITON_INTERPRET": "1"}))
    assert r.verdict == expected, (r.verdict, r.error, r.output_tail)
    if words:
        assert words in r.error and not r.custom_kernel
    else:
        assert r.custom_kernel and 0.0 < r.custom_share <= 1.0


def test_fixtures_share_their_extension_sources():
    """The build tier builds each hostile extension once: work_* fixtures that name the same
    extension carry the same C++ source and the same load_inline call."""
    blocks: dict[str, set[str]] = {}
    for path in HOSTILE.glob("work_*.py"):
        text = path.read_text()
        if "load_inline" not in text:
            continue  # Triton
        m = re.search(r'CPP_SOURCE = r""".*?"""\n\n(?:ext = )?load_inline\(name="(\w+)".*?\)\n', text, re.S)
        assert m, path.name
        blocks.setdefault(m.group(1), set()).add(m.group(0))
    assert set(blocks) == {"kw_fixture_work", "kw_fixture_work_ops"}
    assert all(len(b) == 1 for b in blocks.values())


# --- the parts, on real tensors ------------------------------------------------------------

def _inspect(fn, *args):
    probe = work.InspectProbe()
    probe.call("k", fn, args, {})
    return "k" in probe.work


def test_copies_fills_and_nothing_are_not_work():
    x = torch.randn(8, 16)
    assert not _inspect(lambda t: t, x)  # identity
    assert not _inspect(lambda t: t.clone().reshape(16, 8), x)  # copy into another shape
    assert not _inspect(lambda t: t.to(torch.float64), x)  # a cast
    assert not _inspect(lambda t: torch.zeros_like(t), x)  # a fill
    assert not _inspect(lambda t: None, x)  # nothing

    def copy_into(t, out):
        out.copy_(t)

    def relu_into(t, out):
        torch.clamp(t, min=0.0, out=out)

    assert not _inspect(copy_into, x, torch.full_like(x, 7.0))  # a copy into an argument
    assert _inspect(lambda t: torch.relu(t), x)
    assert _inspect(lambda t: t.sum(), x)  # one value is a result, not a fill
    assert _inspect(relu_into, x, torch.full_like(x, 7.0))  # work written into an argument


def test_perturbation_scrambles_what_a_call_produced_and_nothing_else():
    x = torch.randn(4, 5)
    keep = x.clone()
    probe = work.PerturbProbe({"k"})
    # a returned input is scrambled as a clone: the input itself is left alone
    same = probe.call("k", lambda t: t, (x,), {})
    assert torch.equal(x, keep) and not torch.allclose(same, x)
    # an argument the call wrote is scrambled in place, where it wrote
    out = torch.zeros(4, 5)

    def half(t, o):
        o[:2] = t[:2] + 1

    assert probe.call("k", half, (x, out), {}) is None
    assert torch.equal(out[2:], torch.zeros(2, 5)) and not torch.allclose(out[:2], x[:2] + 1)
    assert torch.equal(x, keep)
    # integer results keep their values (indices stay in range), in other places
    idx = torch.arange(6)
    moved = probe.call("k", lambda t: t + 0, (idx,), {})
    assert sorted(moved.tolist()) == idx.tolist() and not torch.equal(moved, idx)
    # tuples, and calls of other entry points are untouched
    a, b = probe.call("k", lambda t: (t * 2, t * 3), (x,), {})
    assert not torch.allclose(a, x * 2) and not torch.allclose(b, x * 3)
    assert torch.equal(probe.call("other", lambda t: t * 2, (x,), {}), x * 2)


def test_perturbation_is_deterministic():
    x = torch.randn(3, 3)
    first = work.PerturbProbe({"k"}).call("k", torch.relu, (x,), {})
    second = work.PerturbProbe({"k"}).call("k", torch.relu, (x,), {})
    assert torch.equal(first, second) and torch.isfinite(first).all()


REFERENCE = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.relu(x)


def get_inputs():
    return [torch.randn(2, 3)]
'''


def test_reference_is_not_importable():
    before = set(sys.modules)
    mod, filename = work.load_reference(REFERENCE)
    assert set(sys.modules) == before  # no name left to import
    assert not hasattr(mod, "__file__") and filename.startswith("<reference-")
    assert mod.Model()(torch.tensor([-1.0, 2.0])).tolist() == [0.0, 2.0]


