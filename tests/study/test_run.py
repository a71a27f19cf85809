"""`kernelwright study run` end to end: 2 regimes x 3 built-in tasks with the replay backend
(transcripts recorded from the real embedded model) and the real evaluator.

One uninterrupted run, a second run that must change nothing, and a run killed with SIGKILL
after its first cell line and then resumed, which must end with the same cells."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kernelwright.cli.main import app
from kernelwright.study.log import ATTEMPTS, CELLS, MANIFEST, read_study
from tests.strategies import plan

pytestmark = [pytest.mark.slow, pytest.mark.build, pytest.mark.skipif(not plan.TRANSCRIPTS.is_dir(), reason="no recorded transcripts")]
REGIMES = ["zero_shot", "guided"]


@pytest.fixture(scope="module")
def replay(tmp_path_factory) -> Path:
    """Both regimes' recorded answers in one replay file (the backend is one model)."""
    path = tmp_path_factory.mktemp("replay") / "both.jsonl"
    path.write_text("".join(plan.transcript(r).read_text() for r in REGIMES))
    return path


def study_args(out: Path, replay: Path, cache: Path, *extra: str) -> list[str]:
    args = ["study", "run", "--out", str(out), "--model", f"replay:{replay}", "--regime", ",".join(REGIMES),
            "--max-tokens", "768", "--no-timing", "--trials", "3", "--timeout", "300",
            "--facts", str(plan.FACTS), "--cache-dir", str(cache), *extra]
    for t in plan.TASKS:
        args += ["--tasks", t]
    return args


def comparable(folder: Path) -> dict[str, tuple]:
    data = read_study(folder)
    return {c.key: (c.status, c.verdict, c.selected, tuple(c.attempt_ids), c.reason,
                    tuple((a.id, a.eval.verdict, a.code_hash) for a in data.attempts_of(c))) for c in data.cells}


@pytest.fixture(scope="module")
def finished(tmp_path_factory, replay, build_cache) -> Path:
    out = tmp_path_factory.mktemp("study") / "s"
    r = CliRunner().invoke(app, study_args(out, replay, build_cache))
    assert r.exit_code == 0, r.output
    return out


def test_one_command_runs_the_matrix(finished):
    data = read_study(finished)
    assert len(data.cells) == len(REGIMES) * len(plan.TASKS)
    assert {(c.regime, c.task_id) for c in data.cells} == {(r, t) for r in REGIMES for t in plan.TASKS}
    for c in data.cells:
        assert c.status == "ok" and c.task_hash and c.model == plan.MODEL
        got = data.attempts_of(c)
        assert [a.id for a in got] == c.attempt_ids and len(got) == 1  # single-shot regimes
        assert c.selected == got[0].id and c.verdict == got[0].eval.verdict
        assert all(a.raw_response and a.messages and a.eval.stages for a in got)
    manifest = (finished / MANIFEST).read_text()
    assert '"torch"' in manifest and '"configs"' in manifest and '"started"' in manifest
    [run] = read_study(finished).manifests[0].runs  # how the invocation ended, and when
    assert run.ended == "completed" and run.finished >= run.started and run.done == 6 and run.failed == 0
    # each attempt says when it was logged: a study cut short still says how long it ran
    from datetime import datetime
    stamps = [datetime.fromisoformat(a.recorded_at) for a in data.all_attempts()]
    assert len(stamps) == 6 and all(datetime.fromisoformat(run.started) <= t <= datetime.fromisoformat(run.finished)
                                    for t in stamps)
    assert read_study(finished).manifests[0].study["executor"] == "local"  # the pool, unless told otherwise
    # the task facts the guided prompts used are kept with the study, for the report's roofline
    assert sorted(p.name for p in (finished / "facts").iterdir()) == sorted(
        t.replace("/", "__") + ".json" for t in plan.TASKS)


def test_a_second_run_is_a_no_op(finished, replay, build_cache):
    from kernelwright.study.log import WRITER_LOCK

    def records():  # the writer lock names whoever held the folder last: not a record
        return {p.name: p.read_bytes() for p in finished.iterdir() if p.is_file() and p.name != WRITER_LOCK}

    before = records()
    r = CliRunner().invoke(app, study_args(finished, replay, build_cache))
    assert r.exit_code == 0, r.output
    assert "6 already done, 0 run now" in r.output.replace("\n", " ")
    assert records() == before


def test_the_ray_executor_gives_the_same_cells(finished, tmp_path, replay, build_cache, monkeypatch):
    """The same study through `--executor ray` (a local cluster started for the run, and stopped
    after it): the same cells, attempts and verdicts as the local pool's run, and where it ran said."""
    pytest.importorskip("ray")
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    out = tmp_path / "ray"
    r = CliRunner().invoke(app, study_args(out, replay, build_cache, "--executor", "ray"))
    assert r.exit_code == 0, r.output
    assert "ray: 1 node(s)" in r.output
    assert comparable(out) == comparable(finished)
    assert read_study(out).manifests[0].study["executor"] == "ray"
    import ray

    assert not ray.is_initialized()  # the run's own cluster went with it


def test_killed_and_resumed_equals_uninterrupted(finished, tmp_path, replay, build_cache):
    out = tmp_path / "killed"
    cmd = [sys.executable, "-m", "kernelwright.cli.main", *study_args(out, replay, build_cache)]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    cells = out / CELLS
    deadline = time.monotonic() + 300
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            if cells.is_file() and cells.read_bytes().count(b"\n") >= 1:
                break
            time.sleep(0.02)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the study and its evaluation children, at once
        proc.wait()
    written = cells.read_bytes().count(b"\n") if cells.is_file() else 0
    assert 1 <= written < 6, f"the kill came at {written} cells: not mid-way"

    r = CliRunner().invoke(app, study_args(out, replay, build_cache))
    assert r.exit_code == 0, r.output
    assert f"{written} already done, {6 - written} run now" in r.output.replace("\n", " ")
    killed, resumed = read_study(out).manifests[0].runs
    assert killed.finished is None and killed.ended is None  # the record of a kill: no end
    assert resumed.ended == "completed" and resumed.done == 6 - written
    assert comparable(out) == comparable(finished)
    # every attempt line of the resumed folder is either read once or belongs to a killed cell
    data = read_study(out)
    lines = (out / ATTEMPTS).read_bytes().count(b"\n")
    assert sum(len(v) for v in data.attempts.values()) + data.dropped_attempts + data.skipped_lines >= 6
    assert lines >= 6


def test_broken_task_and_failing_cell_are_recorded_not_dropped(tmp_path, replay, build_cache):
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    softmax = Path(__file__).resolve().parents[2] / "kernelwright/tasks/suite/level1/03_softmax.py"
    (tasks / "03_softmax.py").write_text(softmax.read_text())  # same source: same prompt as recorded
    (tasks / "broken.py").write_text("import torch\nclass Model(torch.nn.Module):\n    pass\n")  # no get_inputs
    out = tmp_path / "s"
    args = ["study", "run", "--out", str(out), "--model", f"replay:{replay}", "--tasks", str(tasks),
            "--regime", "zero_shot,zero_shot+n=2", "--max-tokens", "768", "--no-timing", "--trials", "3",
            "--cache-dir", str(build_cache)]
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 0, r.output
    cells = {(c.regime, c.task_id): c for c in read_study(out).cells}
    assert len(cells) == 4
    assert cells[("zero_shot", "03_softmax")].status == "ok"
    broken = cells[("zero_shot", "broken")]
    assert broken.status == "failed" and broken.failure == "task_load" and "get_inputs" in broken.error
    # n=2 asks the model something never recorded: the backend fails, the cell records it
    unrecorded = cells[("zero_shot+n=2", "03_softmax")]
    assert unrecorded.status == "failed" and unrecorded.failure == "worker" and "no recording" in unrecorded.error
    # failures are outcomes: a rerun skips them, unless asked to retry
    again = CliRunner().invoke(app, args)
    assert "4 already done" in again.output.replace("\n", " ")
    retry = CliRunner().invoke(app, [*args, "--retry-failed"])
    # the broken task fails for both regimes: three failed cells are redone, the good one is not
    assert "1 already done, 3 run now" in retry.output.replace("\n", " ")
    assert len(read_study(out).cells) == 4
