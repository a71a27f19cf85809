"""`kernelwright study import`: other tools' generations, mapped onto our tasks and re-scored by
the real evaluator. Inputs are built here from known candidates, so each verdict is known."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kernelwright.cli.main import app
from kernelwright.records import Verdict
from kernelwright.study.importer import read_results_json
from kernelwright.study.log import read_study
from tests.conftest import CANDIDATES

pytestmark = [pytest.mark.build]

ROOT = Path(__file__).resolve().parents[2]
GOOD = ROOT / "examples/candidates/linear_gelu_scale_cpp.py"  # correct on builtin/L2/01_linear_gelu_scale
CPU = CANDIDATES / "cpu"


def run_import(*args: str) -> str:
    r = CliRunner().invoke(app, ["study", "import", *args])
    assert r.exit_code == 0, r.output
    return r.output.replace("\n", " ")


def test_runs_folder_is_mapped_rescored_and_resumable(tmp_path, build_cache):
    runs = tmp_path / "runs" / "nested"
    runs.mkdir(parents=True)
    shutil.copy(GOOD, runs / "level_2_problem_1_sample_0_kernel.py")
    shutil.copy(CPU / "syntax_error.py", runs / "level_1_problem_3_sample_0_kernel.py")
    shutil.copy(CPU / "no_code.txt", runs / "level_1_problem_3_sample_1_kernel.py")
    shutil.copy(CPU / "torch_only.py", runs / "level_9_problem_1_sample_0_kernel.py")  # no such task
    (runs / "notes.py").write_text("# not a run file\n")
    out = tmp_path / "study"
    args = [str(tmp_path / "runs"), "--tasks", "builtin:1-2:1-3", "--out", str(out), "--no-timing", "--trials", "3",
            "--cache-dir", str(build_cache)]
    run_import(*args)
    data = read_study(out)
    cells = {c.task_id: c for c in data.cells}
    # every selected task is a cell (L1 and L2, problems 1-3), plus the problem no task matches
    from kernelwright.tasks import load_tasks

    selected = {t.id for t in load_tasks("builtin:1-2:1-3")}
    assert set(cells) == selected | {"unmatched/L9/1"} and len(selected) == 6
    for tid in selected - {"builtin/L2/01_linear_gelu_scale", "builtin/L1/03_softmax"}:
        # no code in the input for it: a cell that counts as a failure, not a hole in the denominator
        assert cells[tid].status == "ok" and cells[tid].verdict == Verdict.NO_CODE and not cells[tid].attempt_ids
    good = cells["builtin/L2/01_linear_gelu_scale"]
    assert good.verdict == Verdict.CORRECT and good.custom_kernel and good.regime == "import:runs"
    softmax = data.attempts_of(cells["builtin/L1/03_softmax"])
    assert [(a.sample, a.eval.verdict) for a in softmax] == [(0, Verdict.SYNTAX_ERROR), (1, Verdict.NO_CODE)]
    assert all(a.notes["source"].endswith("_kernel.py") for a in softmax)
    missing = cells["unmatched/L9/1"]
    assert missing.status == "failed" and missing.failure == "task_missing" and missing.level == 9
    assert "0 run now" in run_import(*args)  # the same import again: nothing to do
    assert data.manifests[0].study["executor"] == "local"  # re-scoring goes through the pool, as `study run` does


def test_reference_results_json_turns_become_attempts(tmp_path, build_cache):
    good = GOOD.read_text()
    data = {
        "meta": {"model": "someone-elses"},
        "levels": {
            "1": {"3": {"turns": [{"raw_response": "I cannot do that."},
                                  {"raw_response": "```python\n" + (CPU / "syntax_error.py").read_text() + "```"}],
                        "raw_response": "still nothing", "extracted_code": None}},
            "level2": {"1": {"raw_response": f"Here:\n```python\n{good}```", "extracted_code": good,
                             "turns": [{"response": "first try, no code"}, {"code": good}]}},
        },
    }
    path = tmp_path / "results.json"
    path.write_text(json.dumps(data))
    _, found = read_results_json(path)
    # the final answer of L2/1 equals its last turn's code: not counted twice
    assert sorted((c.level, c.problem, c.turn) for c in found) == [(1, 3, 0), (1, 3, 1), (1, 3, 2), (2, 1, 0), (2, 1, 1)]
    out = tmp_path / "study"
    run_import(str(path), "--tasks", "builtin:1-2", "--label", "ref", "--out", str(out), "--no-timing",
               "--trials", "3", "--cache-dir", str(build_cache))
    study = read_study(out)
    cells = {c.task_id: c for c in study.cells}
    l2 = cells["builtin/L2/01_linear_gelu_scale"]
    assert l2.regime == "import:ref" and l2.verdict == Verdict.CORRECT and l2.selected.endswith("/t1/s0")
    assert [a.eval.verdict for a in study.attempts_of(l2)] == [Verdict.NO_CODE, Verdict.CORRECT]
    l1 = study.attempts_of(cells["builtin/L1/03_softmax"])
    assert [a.eval.verdict for a in l1] == [Verdict.NO_CODE, Verdict.SYNTAX_ERROR, Verdict.NO_CODE]


def test_import_times_the_torch_compile_baseline_when_asked(tmp_path, build_cache):
    runs = tmp_path / "runs"
    runs.mkdir()
    shutil.copy(GOOD, runs / "level_2_problem_1_sample_0_kernel.py")
    out = tmp_path / "study"
    run_import(str(runs), "--tasks", "builtin:2:1", "--out", str(out), "--trials", "2", "--iters", "5", "--warmup", "1",
               "--compile-baseline", "--cache-dir", str(build_cache))
    [attempt] = [a for c in read_study(out).cells for a in read_study(out).attempts_of(c)]
    r = attempt.eval
    assert r.verdict == Verdict.CORRECT
    # the baseline ran: a time, or the reason this machine could not compile it (never silence)
    assert r.compile_runtime_ms is not None or r.compile_baseline_error, r
