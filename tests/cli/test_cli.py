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
