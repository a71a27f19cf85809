"""`--compat kernelbench` (kernelwright issue #19): KernelBench's own definitions, so that a re-score
can be compared line by line. One candidate per definitional difference, each judged both ways by
the real evaluator; then `study import --compat kernelbench` end to end, and its report saying so."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from kernelwright.cli.main import app
from kernelwright.evaluate import EvaluatorError, evaluate
from kernelwright.records import Verdict
from kernelwright.report.study_report import build
from kernelwright.study.log import read_study
from kernelwright.tasks import load_task
from tests.conftest import TASKS

HEAD = '''
import torch
import torch.nn as nn


class ModelNew(nn.Module):
'''

# uses the task module's global `features` (KernelBench's loader leaves the task's names visible)
MODULE_NAMES = HEAD + '''    def __init__(self, n):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(features))

    def forward(self, x):
        return torch.relu(x + self.bias)
'''

INIT_FAILS = HEAD + '''    def __init__(self, n):
        super().__init__()
        raise RuntimeError("this kernel's setup failed")

    def forward(self, x):
        return torch.relu(x)
'''

# right at the small size this machine uses by default, wrong at the task's own (full) size
ONLY_SMALL = HEAD + '''    def __init__(self, n):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(n))

    def forward(self, x):
        if x.shape[0] > 1024:
            raise RuntimeError("this kernel handles at most 1024 rows")
        return torch.relu(x + self.bias)
'''


@pytest.fixture(scope="module")
def task():
    return load_task(str(TASKS / "bias_relu.py"))


@pytest.mark.parametrize("code,ours,theirs,compiled_theirs", [
    (MODULE_NAMES, Verdict.RUNTIME_ERROR, Verdict.NO_CUSTOM_KERNEL, True),
    (INIT_FAILS, Verdict.RUNTIME_ERROR, Verdict.COMPILE_ERROR, False),
    (ONLY_SMALL, Verdict.NO_CUSTOM_KERNEL, Verdict.RUNTIME_ERROR, True),
], ids=["module_names", "init_fails", "only_small"])
def test_each_definitional_difference(task, fast_cfg, code, ours, theirs, compiled_theirs):
    mine = evaluate(task, code, fast_cfg(time=False, trials=2))
    kb = evaluate(task, code, fast_cfg(time=False, trials=2, compat="kernelbench"))
    assert mine.verdict == ours, (mine.verdict, mine.error)
    assert kb.verdict == theirs, (kb.verdict, kb.error)
    assert kb.compiled == compiled_theirs and kb.compat == "kernelbench" and mine.compat is None
    if theirs == Verdict.COMPILE_ERROR:
        assert "KernelBench counts as not compiled" in kb.error and "setup failed" in kb.error


def test_an_unknown_mode_is_bad_input(fast_cfg):
    with pytest.raises(EvaluatorError, match="compat must be kernelwright or kernelbench"):
        fast_cfg(compat="kernelbenchh")
    with pytest.raises(EvaluatorError, match="auto or full with compat kernelbench"):
        fast_cfg(compat="kernelbench", size="small")
    assert fast_cfg(compat="kernelbench").size == "full"  # every resolve_size caller sees the task's own


def test_study_import_in_kernelbench_mode_says_so(tmp_path, build_cache):
    runs = tmp_path / "runs"
    runs.mkdir()
    (runs / "level_1_problem_1_sample_0_kernel.py").write_text(INIT_FAILS)
    out = tmp_path / "study"
    args = ["study", "import", str(runs), "--tasks", "builtin:1:1", "--out", str(out), "--no-timing",
            "--trials", "2", "--cache-dir", str(build_cache), "--compat", "kernelbench"]
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 0, r.output
    [cell] = read_study(out).cells
    [attempt] = read_study(out).attempts_of(cell)
    assert attempt.eval.verdict == Verdict.COMPILE_ERROR and attempt.eval.compat == "kernelbench"
    sources = " ".join(build([out]).sources)
    assert "evaluated in kernelbench mode" in sources, sources
    bad = CliRunner().invoke(app, args[:-1] + ["kernelbenchh"])
    assert bad.exit_code != 0 and "compat must be" in bad.output


def test_the_mode_is_in_the_cell_key_but_old_keys_stay():
    from kernelwright.evaluate import EvalConfig

    assert "compat" not in EvalConfig().keyed()  # folders written before the option keep their cells
    assert EvalConfig(compat="kernelbench").keyed()["compat"] == "kernelbench"
