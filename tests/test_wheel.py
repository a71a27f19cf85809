"""kernelwright as a package (kernelwright issue #22): a wheel built from this checkout, installed into
a fresh virtual environment, answers `kernelwright doctor` and evaluates the bundled candidate.

The fresh environment gets the wheel alone (`--no-deps`); its dependencies (torch and the rest, which
a user installs from their index) come from this checkout's environment through one path line in a
.pth file, so the test needs no network and no second torch. What it proves is the package: that the
wheel holds every file kernelwright reads at run time (prompts, notes, templates, the task suite) and
that the console script runs outside the source tree."""

from __future__ import annotations

import os
import site
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

pytestmark = [pytest.mark.build, pytest.mark.slow]


def _run(cmd: list[str], cwd: Path, env: dict | None = None, timeout: int = 600) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env)


@pytest.fixture(scope="module")
def fresh(tmp_path_factory) -> Path:
    base = tmp_path_factory.mktemp("wheel")
    built = _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                  str(base / "dist"), str(ROOT)], cwd=base)
    assert built.returncode == 0, built.stderr[-3000:]
    [wheel] = (base / "dist").glob("kernelwright-*.whl")
    venv = base / "venv"
    made = _run([sys.executable, "-m", "venv", str(venv)], cwd=base)
    assert made.returncode == 0, made.stderr
    py = venv / "bin" / "python"
    purelib = Path(_run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                        cwd=base).stdout.strip())
    # its own pip, so the console script's first line is its own interpreter
    installed = _run([str(py), "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(wheel)], cwd=base)
    assert installed.returncode == 0, installed.stderr[-3000:]
    # the dependencies, after the wheel's own site-packages (so the wheel's kernelwright comes first)
    (purelib / "zz_dependencies.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    return venv


def test_the_wheel_installs_and_runs_outside_the_checkout(fresh, tmp_path, build_cache):
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["KERNELWRIGHT_CACHE"] = str(build_cache)
    py = str(fresh / "bin" / "python")
    where = _run([py, "-c", "import kernelwright; print(kernelwright.__file__)"], cwd=tmp_path, env=env)
    assert where.returncode == 0 and str(fresh) in where.stdout, (where.stdout, where.stderr)

    script = fresh / "bin" / "kernelwright"
    assert script.exists(), "the console script was not installed"
    doctor = _run([str(script), "doctor"], cwd=tmp_path, env=env)
    assert doctor.returncode == 0, doctor.stderr[-2000:]
    assert "compiler" in doctor.stdout.lower() or "c++" in doctor.stdout.lower(), doctor.stdout

    # the README's evaluator example, with files the wheel does not carry passed by path
    ev = _run([str(script), "eval", "--task", "builtin/L2/01_linear_gelu_scale", "--candidate",
               str(ROOT / "examples" / "candidates" / "linear_gelu_scale_cpp.py"), "--trials", "2", "--iters", "5",
               "--warmup", "1"], cwd=tmp_path, env=env, timeout=900)
    assert ev.returncode == 0, ev.stderr[-3000:]
    assert "correct" in ev.stdout, ev.stdout[-2000:]
    # the built-in suite and the prompts' templates are package data: a listing and a plan need them
    tasks = _run([str(script), "tasks", "builtin"], cwd=tmp_path, env=env)
    assert tasks.returncode == 0 and "builtin/L2/01_linear_gelu_scale" in tasks.stdout, tasks.stderr[-2000:]
