"""`run`, `study run` and `optimize` given no regime, scaffold or target pick by one rule
(strategies/defaults.py), each through the path its own command takes; `run --help` lists every
regime the registry runs."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from kernelwright.strategies import REGIMES
from tests.optimize.test_bad_input import GOOD  # a module that imports and runs


def _run(model):
    from kernelwright.study.spec import one_cell

    spec = one_cell("builtin/L1/03_softmax", None, 0, "cpu", model=model)
    config = spec.regime_config(spec.regimes[0], 0)
    return config.name, config.scaffold, config.target


def _study(model, tmp_path):
    from kernelwright.study.spec import load_spec

    spec = load_spec(None, {"out": str(tmp_path / "study"), "model": model})
    config = spec.regime_config(spec.regimes[0], spec.seeds[0])
    return config.name, config.scaffold, config.target


def _optimize(model, tmp_path):
    from kernelwright.optimize.request import prepare

    module = tmp_path / "relu.py"
    module.write_text(GOOD)
    opts = prepare(str(module), device="cpu", model=model, size="full").opts
    return opts.regime, opts.scaffold, opts.target


@pytest.mark.parametrize("model,expected", [(None, ("search", True, "cpp")),  # the embedded model
                                            ("replay:/nowhere.jsonl", ("search", False, "cpp"))])
def test_every_command_without_a_regime_picks_by_the_same_rule(tmp_path, model, expected):
    """The rule: search; the scaffold on for the embedded small models only; the target from the
    device. optimize resolves it after checking the module (a child runs it once)."""
    assert _run(model) == _study(model, tmp_path) == _optimize(model, tmp_path) == expected


def test_run_help_lists_every_regime():
    p = subprocess.run([sys.executable, "-m", "kernelwright.cli.main", "run", "--help"], capture_output=True,
                       text=True, timeout=300, env={**os.environ, "COLUMNS": "250"})
    assert p.returncode == 0, p.stderr
    line = next(ln for ln in p.stdout.splitlines() if "--regime" in ln)
    assert all(name in line for name in REGIMES) and "search" in line, line


def test_the_scaffold_flag_overrides_the_rule_alike_and_a_regime_spec_overrides_the_flag(tmp_path):
    from kernelwright.study.spec import load_spec, one_cell

    run = one_cell("builtin/L1/03_softmax", "guided", 0, "cpu", scaffold=False)
    study = load_spec(None, {"out": str(tmp_path), "regimes": ["guided", "guided+scaffold"], "scaffold": False})
    assert not run.regime_config("guided", 0).scaffold and not study.regime_config("guided", 0).scaffold
    assert study.regime_config("guided+scaffold", 0).scaffold
