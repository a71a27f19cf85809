"""The study file and the log's read rules: fast, no evaluator."""

from __future__ import annotations

import pytest

from kernelwright.records import Verdict
from kernelwright.study.log import (
    ATTEMPTS,
    CELLS,
    append_record,
    read_records,
    read_study,
)
from kernelwright.study.records import StudyCell
from kernelwright.study.spec import StudySpecError, load_spec
from tests.study._records import attempt, cell, result, write


def test_flags_override_the_study_file(tmp_path):
    f = tmp_path / "study.toml"
    f.write_text('out = "a"\nregimes = ["zero_shot", "agentic+no_retrieval+n=2"]\ntasks = "builtin:1"\n'
                 'seeds = [0, 1]\n[eval]\ntime = false\ntrials = 3\n')
    spec = load_spec(f, {"out": str(tmp_path / "b"), "eval.trials": 5, "model": None})
    assert spec.out == tmp_path / "b" and spec.tasks == ["builtin:1"] and spec.eval.trials == 5 and not spec.eval.time
    assert spec.regime_config("agentic+no_retrieval+n=2", 1).n == 2


def test_config_hash_keys_what_changes_results_and_nothing_else(tmp_path):
    base = load_spec(None, {"out": str(tmp_path), "regimes": ["zero_shot"]})
    h = base.config_hash(base.regime_config("zero_shot", 0), "m")
    assert h != base.config_hash(base.regime_config("zero_shot", 1), "m")  # seed
    assert h != base.config_hash(base.regime_config("zero_shot", 0), "other-model")
    untimed = load_spec(None, {"out": str(tmp_path), "regimes": ["zero_shot"], "eval.time": False})
    assert h != untimed.config_hash(untimed.regime_config("zero_shot", 0), "m")
    # where the work runs is not part of a cell's identity: a resumed study may use other devices
    spread = load_spec(None, {"out": str(tmp_path / "x"), "regimes": ["zero_shot"], "jobs": 5, "slots": 2,
                              "cache_dir": "/c"})
    assert h == spread.config_hash(spread.regime_config("zero_shot", 0), "m")


def test_a_search_study_times_torch_compile_unless_told_not_to(tmp_path):
    out = str(tmp_path)
    assert load_spec(None, {"out": out, "regimes": ["search+n=4", "zero_shot"]}).eval.compile_baseline
    assert not load_spec(None, {"out": out, "regimes": ["zero_shot"]}).eval.compile_baseline
    assert not load_spec(None, {"out": out, "regimes": ["search"], "eval.compile_baseline": False}).eval.compile_baseline
    f = tmp_path / "study.toml"
    f.write_text('regimes = ["search"]\n[eval]\ntrials = 3\n')
    assert load_spec(f, {"out": out}).eval.compile_baseline
    f.write_text('regimes = ["search"]\n[eval]\ncompile_baseline = false\n')
    assert not load_spec(f, {"out": out}).eval.compile_baseline


@pytest.mark.parametrize("overrides,needle", [
    ({"regimes": ["telepathy"]}, "unknown regime"),
    ({"devices": ["cpu", "cuda:0"]}, "mix cpu and cuda"),
    ({"seeds": [1, 1]}, "seeds"),
    ({"target": "fortran"}, "unknown target"),
    ({"slots": 0}, "slots"),
    ({"slots": 2, "executor": "direct"}, "local pool's or Ray's"),
    ({"model_gpu": "own"}, "ray executor"),
    ({"executor": "ray", "model_gpu": "mine"}, "shared or own"),
])
def test_bad_study_input_is_one_line(tmp_path, overrides, needle):
    with pytest.raises(StudySpecError) as e:
        load_spec(None, {"out": str(tmp_path), **overrides})
    assert needle in str(e.value) and "\n" not in str(e.value)


def test_a_torn_last_line_does_not_corrupt_the_next_record(tmp_path):
    r = attempt("h/zero_shot/t1", "run1", 0, 0, result(Verdict.CORRECT))
    path = tmp_path / ATTEMPTS
    append_record(path, r)
    with open(path, "a") as f:  # what a SIGKILL in the middle of a write leaves
        f.write(r.model_dump_json()[:57])
    append_record(path, r.model_copy(update={"id": "second"}))
    got, bad = read_records(path, type(r))
    assert [a.id for a in got] == [r.id, "second"] and bad == 1


def test_a_record_of_a_newer_schema_is_refused_not_skipped(tmp_path):
    """A torn line is skipped and counted; a whole record written under a newer schema is refused with
    one line (`study report` exits 2), never half read as if the fields meant what they mean here."""
    import json
    import subprocess
    import sys

    from kernelwright.records import SCHEMA_VERSION, NewerSchema

    a = attempt("h/zero_shot/t1", "run1", 0, 0, result(Verdict.CORRECT))
    folder = write(tmp_path / "s", [cell("h/zero_shot/t1", "run1", [a], a)], [a])
    assert len(read_study(folder).cells) == 1
    line = json.loads((folder / CELLS).read_text())
    line["schema_version"] = SCHEMA_VERSION + 1
    (folder / CELLS).write_text(json.dumps(line) + "\n")
    with pytest.raises(NewerSchema, match=f"schema {SCHEMA_VERSION + 1}"):
        read_study(folder)
    p = subprocess.run([sys.executable, "-m", "kernelwright.cli", "study", "report", str(folder)],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and "newer kernelwright" in p.stderr and "Traceback" not in p.stderr, p.stderr
    assert len([x for x in p.stderr.splitlines() if x.strip()]) == 1


def test_attempts_of_an_interrupted_cell_are_not_read(tmp_path):
    key = "h/zero_shot/t1"
    killed = [attempt(key, "dead", 0, 0, result(Verdict.WRONG_OUTPUT))]
    redone = [attempt(key, "live", 0, 0, result(Verdict.CORRECT))]
    orphan = attempt("h/zero_shot/t2", "dead", 0, 0, result(Verdict.CORRECT))  # its cell never finished
    write(tmp_path, [cell(key, "live", redone, redone[0])], [*killed, orphan, *redone])
    data = read_study(tmp_path)
    assert [c.key for c in data.cells] == [key]
    assert [(a.run, a.eval.verdict) for a in data.attempts_of(data.cells[0])] == [("live", Verdict.CORRECT)]
    assert data.dropped_attempts == 2


def test_the_last_line_of_a_cell_key_wins(tmp_path):
    key = "h/zero_shot/t1"
    failed = cell(key, "r1", [], None, status="failed")
    a = attempt(key, "r2", 0, 0, result(Verdict.CORRECT))
    write(tmp_path, [failed, cell(key, "r2", [a], a)], [a])
    cells, _ = read_records(tmp_path / CELLS, StudyCell)
    assert len(cells) == 2
    data = read_study(tmp_path)
    assert len(data.cells) == 1 and data.cells[0].status == "ok" and data.selected(data.cells[0]).id == a.id
