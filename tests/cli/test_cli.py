"""The command line as a user meets it: real subprocesses, exit codes, one-line errors."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest import CANDIDATES, TASKS

CPU = CANDIDATES / "cpu"


def kw(*args: str, env_cache=None) -> subprocess.CompletedProcess:
    env = None
    if env_cache is not None:
        import os

        env = {**os.environ, "KERNELWRIGHT_CACHE": str(env_cache)}
    return subprocess.run([sys.executable, "-m", "kernelwright.cli.main", *args], capture_output=True, text=True,
                          timeout=600, env=env)


@pytest.mark.parametrize("args,needle", [
    (["eval", "--task", str(TASKS / "bias_relu.py"), "--candidate", "/nonexistent/cand.py"], "candidate file not found"),
    (["eval", "--task", "/nonexistent/task.py", "--candidate", str(CPU / "torch_only.py")], "/nonexistent/task.py"),
    (["eval", "--task", str(TASKS / "no_model.py"), "--candidate", str(CPU / "torch_only.py")], "Model"),
    (["eval", "--task", str(TASKS / "bias_relu.py"), "--candidate", str(CPU / "torch_only.py"), "--device", "tpu"], "unknown device"),
    (["eval", "--task", "builtin/L9/99_nothing", "--candidate", str(CPU / "torch_only.py")], "builtin"),
    (["tasks", "kernelbench:/nonexistent"], "KernelBench"),
    (["run", "--regime", "telepathy", "--task", "softmax"], "unknown regime"),
    (["eval", "--task", str(TASKS / "bias_relu.py"), "--candidate", str(CPU / "torch_only.py"), "--trials", "0"], "trials"),
    (["eval", "--task", str(TASKS / "bias_relu.py"), "--candidate", str(CPU / "torch_only.py"), "--iters", "0"], "iters"),
    (["eval", "--task", str(TASKS / "bias_relu.py"), "--candidate", str(CPU / "torch_only.py"), "--timeout=-1"], "timeout"),
])
def test_bad_input_is_one_line_and_nonzero(args, needle):
    p = kw(*args)
    assert p.returncode == 2, (p.stdout, p.stderr)
    lines = [line for line in p.stderr.strip().splitlines() if line.strip()]
    assert len(lines) == 1 and needle in lines[0], p.stderr


def test_eval_json_prints_exactly_the_record(build_cache):
    p = kw("eval", "--task", str(TASKS / "bias_relu.py"), "--candidate", str(CPU / "torch_only.py"), "--json",
           "--iters", "5", "--trials", "2", env_cache=build_cache)
    assert p.returncode == 0, p.stderr
    record = json.loads(p.stdout)
    for key in ("verdict", "compiled", "correct", "custom_kernel", "speedup", "runtime_ms", "ref_runtime_ms", "error", "stages"):
        assert key in record
    assert record["verdict"] == "no_custom_kernel" and record["speedup"] is not None


def test_a_failing_candidate_still_exits_zero(build_cache):
    p = kw("eval", "--task", str(TASKS / "bias_relu.py"), "--candidate", str(CPU / "no_code.txt"), env_cache=build_cache)
    assert p.returncode == 0 and "no_code" in p.stdout


def test_tasks_lists_the_builtin_suite():
    p = kw("tasks", "builtin")
    assert p.returncode == 0 and "builtin/L1/03_softmax" in p.stdout and "34 task(s)" in p.stdout


def test_tasks_prints_whole_names_whatever_the_width(tmp_path):
    """Piped output (no terminal, 80 columns) keeps every id and name whole: they are copied."""
    folder = tmp_path / "tasks"
    folder.mkdir()
    long = "a_task_whose_file_name_is_much_longer_than_eighty_columns_of_a_terminal_would_allow"
    (folder / f"{long}.py").write_text((TASKS / "bias_relu.py").read_text())
    p = kw("tasks", str(folder))  # captured: not a terminal, so rich would use 80 columns
    assert p.returncode == 0, p.stderr
    assert long in p.stdout and "1 task(s)" in p.stdout


def test_doctor_says_what_this_machine_can_do():
    p = kw("doctor")
    assert p.returncode in (0, 2), p.stderr  # 2: something required is missing (named on its line)
    lines = p.stdout.splitlines()
    by_name = {name: next((ln for ln in lines if ln.startswith(name + " ")), None)
               for name in ("python", "torch", "c++ compiler", "nvcc", "GPUs", "triton", "embedded model", "sandbox")}
    assert all(by_name.values()), p.stdout
    # this machine (and CI's) builds C++: the compiler's own --version answered
    assert by_name["c++ compiler"].split()[2] == "ok", by_name["c++ compiler"]
    assert lines[-1].startswith("this machine can: ")
    assert (p.returncode == 2) == any(" MISSING " in ln for ln in lines)


@pytest.mark.build  # the recorded answer reaches a C++ build
@pytest.mark.parametrize("executor", ["direct", "local"])
def test_a_run_folder_is_a_study_folder_that_study_report_reads(tmp_path, executor):
    """`run --out` records as `study run` does (study/cell_log.py): the same three files and record
    shapes, so `study report` reads the folder; running again appends a newer line for the cell.
    The executor the command was given is the one on record, with the same verdict either way."""
    from kernelwright.study.log import read_study
    from tests.strategies import plan

    out = tmp_path / "run"
    args = ["run", "--regime", "zero_shot", "--no-scaffold", "--task", plan.L1, "--max-tokens", "768",
            "--model", f"replay:{plan.transcript('zero_shot')}", "--out", str(out), "--json", "--executor", executor]
    first = kw(*args, env_cache=tmp_path / "cache")
    assert first.returncode == 0, first.stderr
    again = kw(*args, env_cache=tmp_path / "cache")
    assert again.returncode == 0, again.stderr
    printed = json.loads(again.stdout)

    data = read_study(out)
    [cell] = data.cells  # the same key twice: the later line is the cell
    assert cell.key == printed["key"] and cell.task_id == plan.L1 and cell.regime == "zero_shot"
    assert cell.model == plan.MODEL and cell.device == "cpu" and cell.task_hash
    [attempt] = data.attempts_of(cell)
    assert attempt.id == cell.selected == printed["selected"] and attempt.cell_key == cell.key
    assert len((out / "attempts.jsonl").read_text().splitlines()) == 2  # both runs' attempts are kept on disk
    runs = data.manifests[0].runs
    assert [(r.kind, r.ended, r.done) for r in runs] == [("run", "completed", 1)] * 2
    assert data.manifests[0].study["executor"] == executor
    assert cell.verdict.value == "compile_error"  # the recorded answer fails to build, whichever evaluates it

    report = kw("study", "report", str(out))
    assert report.returncode == 0, report.stderr
    text = (out / "REPORT.md").read_text()
    assert "1 cell(s), 1 candidate(s)" in text and f"### {plan.L1}" in text
    assert "| zero_shot | 1 |" in text


def test_every_error_a_command_ends_with_maps_to_its_exit_code_in_one_place():
    """The errors a command can end with are one tree (errors.KernelwrightError); the command group
    (cli/console.Commands) turns any of them into one line on stderr and the error's exit code."""
    import typer
    from typer.testing import CliRunner

    from kernelwright.cli.console import Commands
    from kernelwright.errors import EXIT_BAD_INPUT, EXIT_GPU_GONE, GPUUnavailableError, KernelwrightError
    from kernelwright.llm.base import BackendError, ServerUnreachable
    from kernelwright.optimize.inputs import InputError
    from kernelwright.records import NewerSchema
    from kernelwright.report.study_report import ReportError
    from kernelwright.strategies.config import RegimeError
    from kernelwright.study.importer import ImportInputError
    from kernelwright.study.log import StudyBusy
    from kernelwright.study.spec import StudySpecError
    from kernelwright.tasks import TaskError

    raised = {"task": TaskError("no such task: x"), "regime": RegimeError("unknown regime 'x'"),
              "spec": StudySpecError("bad study file"), "import": ImportInputError("no inputs"),
              "input": InputError("no Model"), "report": ReportError("nothing to report"),
              "busy": StudyBusy("held by pid 1"), "schema": NewerSchema("written under schema 9"),
              "backend": BackendError("server said no"), "server": ServerUnreachable("connection refused"),
              "gpu": GPUUnavailableError("cuda:0")}
    app = typer.Typer(cls=Commands)

    @app.command()
    def fails(what: str) -> None:
        raise raised[what]

    @app.command()
    def other() -> None:
        pass

    for what, error in raised.items():
        assert isinstance(error, KernelwrightError)
        result = CliRunner().invoke(app, ["fails", what])
        assert result.exit_code == (EXIT_GPU_GONE if what == "gpu" else EXIT_BAD_INPUT), (what, result.output)
        assert result.output.strip().splitlines() == [f"error: {error}"], (what, result.output)
    assert isinstance(TaskError("x"), ValueError)  # still what callers that catch ValueError expect


def test_the_displays_read_typed_events():
    """What the stages report is a typed record (events.py); off a terminal the displays print one
    permanent line per event worth keeping, and ignore what is only a live step."""
    import io

    from rich.console import Console

    from kernelwright.cli.display import Display
    from kernelwright.cli.progress import StudyProgress
    from kernelwright.events import (
        AttemptDone,
        CellDone,
        CellSkipped,
        Evaluating,
        Generating,
        Judged,
        NoScaffold,
        Routed,
        Searched,
        Step,
    )
    from kernelwright.records import Verdict
    from tests.study._records import attempt, cell, result

    buf = io.StringIO()
    with Display(Console(file=buf, width=200)) as display:
        for e in (Step("profiling the reference"), Routed("search", "a small model"), NoScaffold("no fusible op"),
                  Generating(turn=0, n=8), Searched(turn=0, drawn=8, distinct=5, checked=5, passed=2, to_build=2),
                  Evaluating(turn=0, sample=1, n=8), Judged(turn=0, sample=1, n=8, verdict="correct", speedup=1.5,
                                                            custom=True)):
            display(e)
    lines = [line.split(" ", 1)[1] for line in buf.getvalue().splitlines()]
    assert lines == ["profiling the reference", "routed to search: a small model", "no scaffold: no fusible op",
                     "turn 0: 8 sampled, 5 distinct, 2 of 5 passed the pre-check, building 2",
                     "turn 0 candidate 2/8: correct speedup 1.5x"]
    assert display.verdicts == {"correct": 1}

    buf = io.StringIO()
    study = StudyProgress(Console(file=buf, width=200))
    study.start(1)
    study(AttemptDone(key="k", verdict="wrong_output"))
    a = attempt("h/zero_shot/t", "run1", 0, 0, result(Verdict.WRONG_OUTPUT))
    study(CellDone(key=a.cell_key, cell=cell(a.cell_key, "run1", [a], a)))
    study(CellSkipped(key="k2", why="the model server cannot be reached"))
    study.stop()
    assert study.candidates == 1 and study.verdicts == {"wrong_output": 1}
    assert buf.getvalue().splitlines() == ["[1/1] zero_shot t seed 0: wrong_output",
                                           "left pending: k2: the model server cannot be reached"]
