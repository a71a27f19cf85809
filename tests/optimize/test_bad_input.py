"""Bad input to `kernelwright optimize`: one line on stderr, exit 2, and no generation spent.

The model is a replay backend over an empty transcript: any generation would fail with "no
recording for request", so a run that reached the model would say that, not the expected line,
and would leave an attempts.jsonl behind.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

GOOD = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)


def get_inputs():
    return [torch.randn(4, 8)]


def get_init_inputs():
    return []
'''

CASES = {
    "does_not_import": ("import torch\nimport no_such_module_kw\n" + GOOD, [], "ModuleNotFoundError"),
    "syntax_error": ("def broken(:\n", [], "not valid Python"),
    "no_model": (GOOD.replace("class Model(", "class Other("), [], "defines no class Model"),
    "inputs_raise": (GOOD.replace("return [torch.randn(4, 8)]", "raise ValueError('no data here')"), [],
                     "get_inputs() raised ValueError: no data here"),
    # a model written for a GPU, run where there is none: fails on the chosen device (the CPU)
    "fails_on_device": (GOOD.replace("return torch.relu(x)", "return torch.relu(x.cuda())"), [],
                        "Model.forward on cpu raised"),
    "named_class_missing": (GOOD, [":Missing", "--inputs", "get_inputs"], "defines no class Missing"),
    "named_inputs_missing": (GOOD.replace("class Model(", "class Net("), [":Net", "--inputs", "make_batch"],
                             "defines no function make_batch"),
}


def optimize(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kernelwright.cli.main", "optimize", *args], capture_output=True,
                          text=True, timeout=300)


def _one_error_line(p: subprocess.CompletedProcess) -> str:
    assert p.returncode == 2, (p.returncode, p.stdout, p.stderr)
    lines = [line for line in p.stderr.strip().splitlines() if line.strip()]
    assert len(lines) == 1, p.stderr
    assert "no recording" not in lines[0]  # the model was never asked
    return lines[0]


@pytest.fixture
def empty_model(tmp_path: Path) -> str:
    path = tmp_path / "empty.jsonl"
    path.write_text("")
    return f"replay:{path}"


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_input_is_one_line_before_generation(case, tmp_path, empty_model):
    source, extra, needle = CASES[case]
    f = tmp_path / f"{case}.py"
    f.write_text(source)
    out = tmp_path / "out"
    spec = str(f) + (extra[0] if extra and extra[0].startswith(":") else "")
    rest = extra[1:] if extra and extra[0].startswith(":") else extra
    line = _one_error_line(optimize(spec, *rest, "--model", empty_model, "--out", str(out), "--device", "cpu"))
    assert needle in line, line
    assert not (out / "attempts.jsonl").exists()


def test_missing_file_and_unwritable_output(tmp_path, empty_model):
    line = _one_error_line(optimize(str(tmp_path / "nope.py"), "--model", empty_model))
    assert "no such file" in line
    f = tmp_path / "good.py"
    f.write_text(GOOD)
    blocker = tmp_path / "a_file"
    blocker.write_text("not a folder")
    # a folder below a regular file cannot be created, whoever runs the test (root ignores modes)
    line = _one_error_line(optimize(str(f), "--model", empty_model, "--out", str(blocker / "out")))
    assert "cannot write to output folder" in line


def test_target_needs_a_gpu_on_the_cpu(tmp_path, empty_model):
    f = tmp_path / "good.py"
    f.write_text(GOOD)
    line = _one_error_line(optimize(str(f), "--model", empty_model, "--device", "cpu", "--target", "cuda"))
    assert "needs a GPU" in line


@pytest.mark.build  # reaches optimize's torch.compile baseline: inductor compiles C++
def test_good_file_with_named_class_and_inputs_passes_the_checks(tmp_path):
    """The other side of the checks: FILE:ClassName --inputs FUNC is accepted and reaches the model
    (here a replay with nothing recorded, whose one-line complaint proves the model was asked)."""
    f = tmp_path / "net.py"
    f.write_text(GOOD.replace("class Model(", "class Net(").replace("def get_inputs(", "def make_batch(")
                 .replace("def get_init_inputs():\n    return []\n", ""))
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    p = optimize(f"{f}:Net", "--inputs", "make_batch", "--model", f"replay:{empty}", "--out", str(tmp_path / "o"),
                 "--device", "cpu", "--rounds", "1", "--budget-minutes", "5", "--iters", "5", "--regime", "zero_shot")
    assert p.returncode == 2, (p.stdout, p.stderr)
    assert "no recording" in p.stderr
    assert "checked: it imports" in p.stderr


@pytest.mark.build  # reaches optimize's torch.compile baseline: inductor compiles C++
def test_retrieval_library_missing_is_one_line_before_anything(tmp_path, empty_model):
    """The routed regime may retrieve (agentic): without bm25s/PyStemmer it fails at once, naming
    what to install, instead of after the model load and the profile (as it once did on the H200)."""
    f = tmp_path / "good.py"
    f.write_text(GOOD)
    hide = tmp_path / "hide"
    hide.mkdir()
    # a None entry in sys.modules is how Python marks a module as not importable
    (hide / "sitecustomize.py").write_text("import sys\nsys.modules['Stemmer'] = None\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(hide), *filter(None, [os.environ.get("PYTHONPATH")])])}
    p = subprocess.run([sys.executable, "-m", "kernelwright.cli.main", "optimize", str(f), "--model", empty_model,
                        "--device", "cpu", "--out", str(tmp_path / "out"), "--regime", "routed"], capture_output=True,
                       text=True, timeout=300, env=env)
    line = _one_error_line(p)
    assert "PyStemmer" in line and "no_retrieval" in line, line
    assert "checked: it imports" not in p.stderr  # not even the input checks ran
    # without retrieval the same Python gets past that point
    p = subprocess.run([sys.executable, "-m", "kernelwright.cli.main", "optimize", str(f), "--model", empty_model,
                        "--device", "cpu", "--out", str(tmp_path / "out2"), "--regime", "routed+no_retrieval",
                        "--rounds", "1", "--iters", "5"], capture_output=True, text=True, timeout=300, env=env)
    assert "PyStemmer" not in p.stderr and "checked: it imports" in p.stderr, p.stderr


@pytest.mark.parametrize("flag,value", [("--iters", "0"), ("--timeout", "-1")])
def test_bad_evaluator_option_is_one_line_before_anything(flag, value, tmp_path, empty_model):
    f = tmp_path / "good.py"
    f.write_text(GOOD)
    out = tmp_path / "out"
    line = _one_error_line(optimize(str(f), f"{flag}={value}", "--model", empty_model, "--out", str(out),
                                    "--device", "cpu"))
    assert flag.lstrip("-") in line, line
    assert not (out / "attempts.jsonl").exists()
