"""The keys written to disk and used to link duplicates stay the same values for the same settings.

A study folder finds its finished cells by config hash, an import by its own hash, and executors
link exact duplicates by result key. The values below are those of folders already on disk: a
change to the evaluation config's shape that moved any of them would orphan every one of them.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kernelwright.evaluate import EvalConfig, EvalRun
from kernelwright.executors.dedupe import result_key
from kernelwright.records import Task
from kernelwright.strategies.config import parse_regime
from kernelwright.study.cell_log import CellLog
from kernelwright.study.importer import plan_import
from kernelwright.study.spec import load_spec

TASK = Task(id="pin/relu", name="relu", source="import torch\nclass Model(torch.nn.Module):\n"
            "    def forward(self, x):\n        return x.relu()\n")


@pytest.mark.parametrize("settings,key", [
    (dict(device="cpu"), "664d5cbaaa1266cc7401b0eb2a5f1383f7e0dd4f765c0e992e61a7cf73b9e5d9"),
    (dict(device="cpu", trials=3, time=False, timeout=300.0, cache_dir="/tmp/c", extra_env={"A": "1"},
          compile_baseline=True), "66539dcf10881dedecd23598a3eb6efbc7ec8c9dec7e8a1ad1c600bbd86453ba"),
    (dict(device="cuda:0", compile_only=True, compat="kernelbench"),
     "d9221f756004436263711fc76e8d2c5ed8ced29a764ea8f991e6adaa39b331d2"),
    (dict(memory_limit_mb=1024, scratch_mb=64, unconfined=True, second_shape=False, size="1/8", atol=1e-3, rtol=0.0),
     "d9ed2fe10f69a7f5fe472a25bfb5a125848a3f88bb147802621b1c23591f70fb"),
])
def test_result_keys_are_unchanged(settings, key):
    assert result_key(TASK, "c0de", EvalRun.of(**settings)) == key


# The folders on disk were written by single-shot studies (the regime said: the default is a rule of
# its own, strategies/defaults.py) and by search studies, whose [eval] times torch.compile.
ZERO_SHOT = {"regimes": ["zero_shot"]}


@pytest.mark.parametrize("flags,chash", [
    (ZERO_SHOT, "79d09164821f"),
    ({**ZERO_SHOT, "eval.trials": 2, "eval.time": False, "eval.timeout": 120, "cell_minutes": 3}, "02849e45a186"),
    ({**ZERO_SHOT, "eval.compat": "kernelbench"}, "d1940f0717d2"),
    ({"regimes": ["search+n=4"], "devices": ["cuda:0", "cuda:1"], "eval.size": "1/8", "seeds": [1]}, "596a4e0aeff0"),
    ({"regimes": ["search"]}, "1e084a680416"),
    ({"regimes": ["search"], "eval.trials": 2, "eval.time": False, "eval.timeout": 120, "cell_minutes": 3},
     "2c6cd28768c1"),
])
def test_study_config_hashes_are_unchanged(tmp_path, flags, chash):
    spec = load_spec(None, {"out": str(tmp_path), "model": "replay:x.jsonl", **flags})
    assert spec.config_hash(spec.regime_config(spec.regimes[0], spec.seeds[0]), "replay-model") == chash


def test_one_task_folder_and_import_hashes_are_unchanged(tmp_path):
    # optimize's folder: its evaluation settings as optimize builds them
    settings = EvalConfig(timeout=240.0, iters=50, time=True, size="auto")
    log = CellLog(Path(tmp_path), TASK, "replay-model", "cpu", settings, model_spec="replay:x.jsonl", kind="optimize")
    regime = parse_regime("search", target="cpp", seed=0, max_tokens=1024, scaffold=False)
    assert log.config_hash(regime) == "a3d3d73d5405"
    assert plan_import([], [], "kb", EvalConfig(), "cpu", None)[1] == "3724bdec0d50"
    kb = EvalConfig(compat="kernelbench", trials=3, timeout=600)
    assert plan_import([], [], "kb", kb, "cuda", None)[1] == "9cc2a112394b"


def test_the_config_is_one_frozen_value(tmp_path):
    cfg = EvalConfig(trials=3, timeout=120)
    with pytest.raises(ValueError):
        cfg.trials = 4  # type: ignore[misc]
    assert cfg == EvalConfig(trials=3, timeout=120.0) and hash(cfg) == hash(EvalConfig(trials=3, timeout=120.0))
    assert EvalConfig.model_validate_json(cfg.model_dump_json()) == cfg
    # a study's [eval] is that config, and what its manifest records reads back as the same one
    spec = load_spec(None, {"out": str(tmp_path), **ZERO_SHOT, "eval.trials": 3, "eval.timeout": 120})
    assert spec.eval == cfg and EvalConfig.model_validate(spec.model_dump(mode="json")["eval"]) == cfg
    # a variation is a new value, checked as any: the run's place never enters the config
    run = EvalRun(cfg, device="cpu", priority=1)
    assert run.but(compile_baseline=True).config == cfg.but(compile_baseline=True) and run.config == cfg
    assert result_key(TASK, "c0de", run) == result_key(TASK, "c0de", run.but(priority=0, deadline=1.0))
