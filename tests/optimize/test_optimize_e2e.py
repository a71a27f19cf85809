"""`kernelwright optimize` end to end on an example, with the replay backend (a transcript recorded
from the real embedded model, tests/fixtures/transcripts/optimize/) and the real evaluator: every
candidate is built, checked and timed for real, and the output folder is checked as a user would.

The example routes to guided (one greedy generation, no feedback turn), so no timing ever reaches
a prompt and the replay matches with timing on; the recorded prompt facts (--facts) fix the
profile lines the guided prompt shows.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from kernelwright.errors import EXIT_FASTER, EXIT_NOT_FASTER
from kernelwright.optimize.types import Outcome
from kernelwright.records import Attempt
from kernelwright.strategies import selection
from kernelwright.study.log import read_study

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "mlp_block.py"
RECORDED = ROOT / "tests" / "fixtures" / "transcripts" / "optimize"
TRANSCRIPT, FACTS = RECORDED / "mlp_block.jsonl", RECORDED / "mlp_block.facts.json"
# The settings of the recorded run (see docs/results/optimize-cpu.md for the command): the decoding
# budget is part of every request, so it must match for the replay to find its answers. Recorded both
# with --scaffold (the embedded model's default; a record:/replay: spec needs it said) and without:
# the scaffolded answer is a correct custom kernel (0.81x eager), the whole-program one correct PyTorch
# without custom code: both are kept, through the two kinds of "correct" the ranking tells apart.
RECORDED_ARGS = ["--rounds", "1", "--iters", "20", "--max-tokens", "768", "--device", "cpu", "--regime", "routed"]

pytestmark = [pytest.mark.build, pytest.mark.skipif(not TRANSCRIPT.is_file(), reason="no recorded optimize transcript")]

# model_new.py runs in a fresh interpreter, as a user would run it. Its load_inline is served from the
# run's build cache when its arguments are exactly those of a build the evaluator verified (the
# cache's own key and lookup): the same arguments build the same extension, so building them again
# (a minute on 2 cores) proves nothing more. Any other arguments miss and are built here for real.
CHECK_MODEL_NEW = """
import importlib.util, inspect, os, sys, torch
import torch.utils.cpp_extension as cpp_extension
from kernelwright.evaluate import buildcache
real_load_inline = cpp_extension.load_inline
def load_inline(*args, **kwargs):
    bound = inspect.signature(real_load_inline).bind(*args, **kwargs).arguments
    key = buildcache.build_key(dict(bound), os.environ.get("TORCH_CUDA_ARCH_LIST", ""),
                               buildcache.torch_version() or torch.__version__)
    root = os.path.join(os.environ["KERNELWRIGHT_CACHE"], "builds")
    folder, _ = buildcache.lookup(root, buildcache.SHARED, key, bound["name"])
    print("extension", bound["name"], "from the build cache" if folder else "built")
    if folder:
        return cpp_extension._import_module_from_library(bound["name"], folder, bound.get("is_python_module", True))
    return real_load_inline(*args, **kwargs)
cpp_extension.load_inline = load_inline
def load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    m = importlib.util.module_from_spec(spec); sys.modules[name] = m; spec.loader.exec_module(m); return m
ref, new = load(sys.argv[1], "reference"), load(sys.argv[2], "model_new")
torch.manual_seed(42); init = ref.get_init_inputs()
torch.manual_seed(42); r = ref.Model(*init)
torch.manual_seed(42); n = new.ModelNew(*init)
torch.manual_seed(7); x = ref.get_inputs()
with torch.no_grad():
    a, b = n(*x), r(*x)
print("max abs diff", (a - b).abs().max().item())
assert a.shape == b.shape and torch.allclose(a, b, atol=1e-4, rtol=1e-4)
print("ok")
"""


def optimize(*args: str, cache: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "KERNELWRIGHT_CACHE": str(cache)}
    return subprocess.run([sys.executable, "-m", "kernelwright.cli.main", "optimize", *args], capture_output=True,
                          text=True, timeout=900, env=env)


@pytest.mark.parametrize("mode", ["--scaffold", "--no-scaffold"])
def test_optimize_end_to_end_on_replay(mode, tmp_path, build_cache):
    out = tmp_path / "out"
    p = optimize(str(EXAMPLE), "--model", f"replay:{TRANSCRIPT}", "--facts", str(FACTS), "--out", str(out),
                 *RECORDED_ARGS, mode, cache=build_cache)
    assert p.returncode in (EXIT_FASTER, EXIT_NOT_FASTER), (p.stdout, p.stderr)
    assert {"report.md", "report.html", "attempts.jsonl", "cells.jsonl", "manifest.json",
            "summary.json"} <= {f.name for f in out.iterdir()}

    attempts = [Attempt.model_validate_json(line) for line in (out / "attempts.jsonl").read_text().splitlines()]
    outcome = Outcome.model_validate_json((out / "summary.json").read_text())
    assert attempts and outcome.attempts == len(attempts) and outcome.rounds == 1
    assert outcome.route and outcome.route.startswith("guided")
    assert all(("scaffold" in a.notes) == (mode == "--scaffold") for a in attempts)
    best = selection.select(attempts)
    # the exit code is the ranking key's verdict on the evaluator's records, nothing else
    goal = selection.is_goal(best.eval)
    assert p.returncode == outcome.exit_code == (EXIT_FASTER if goal else EXIT_NOT_FASTER)

    report = (out / "report.md").read_text()
    rows = [line for line in report.splitlines() if re.match(r"\| \d+ \| \d+/\d+/\d+ \|", line)]
    assert len(rows) == len(attempts)
    for row, a in zip(rows, attempts, strict=True):  # every attempt's verdict, in generation order
        assert f"| {a.eval.verdict.value} |" in row
    assert "torch.compile" in report and "eager PyTorch" in report and "roofline floor" in report
    html = (out / "report.html").read_text()
    assert "<html" in html and "Every attempt" in html and "src=\"http" not in html  # opens from disk
    if not goal:
        assert "Nothing verified beats the reference" in report and "Nothing verified beats the reference" in p.stdout

    # the folder is a one-task study (study/cell_log.py): `study report` reads it, one cell per round
    data = read_study(out)
    [cell] = data.cells
    assert cell.task_id == outcome.task_id and [a.id for a in data.attempts_of(cell)] == [a.id for a in attempts]
    assert cell.selected == best.id and data.manifests[0].runs[-1].kind == "optimize"
    assert data.manifests[0].runs[-1].ended == "completed" and data.manifests[0].study["executor"] == "direct"
    studied = subprocess.run([sys.executable, "-m", "kernelwright.cli", "study", "report", str(out)],
                             capture_output=True, text=True, timeout=300)
    assert studied.returncode == 0, studied.stderr
    assert f"1 cell(s), {len(attempts)} candidate(s)" in (out / "REPORT.md").read_text()

    if selection.tier(best.eval) >= 2:  # a correct candidate is kept, runnable as is
        model_new = out / "model_new.py"
        assert best.id in report and outcome.kept_id == best.id
        assert "net of the timing protocol" in report and "time in custom code" in report
        # torch.compile timed beside the kept candidate by the evaluator: one protocol for both
        assert outcome.vs_compile_by == "judge" and outcome.speedup_vs_compile is not None, outcome
        assert "timed beside the kept candidate by the evaluator" in report
        assert outcome.beside_ms and "| torch.compile, beside the kept candidate |" in report
        assert abs(outcome.beside_ms[0] / outcome.beside_ms[1] - outcome.speedup_vs_compile) < 1e-9
        assert "--- reference.py" in report and "+++ model_new.py" in report
        env = {**os.environ, "TORCH_EXTENSIONS_DIR": str(tmp_path / "ext"), "KERNELWRIGHT_CACHE": str(build_cache),
               "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
        check = subprocess.run([sys.executable, "-c", CHECK_MODEL_NEW, str(EXAMPLE), str(model_new)],
                               capture_output=True, text=True, timeout=600, env=env, cwd=tmp_path)
        assert check.returncode == 0 and "ok" in check.stdout, (check.stdout, check.stderr[-2000:])
        # what model_new.py builds is exactly what the evaluator built and verified
        assert "built" not in check.stdout.split(), check.stdout
    else:
        assert not (out / "model_new.py").exists() and "nothing kept" in report


def test_budget_bounds_the_run_before_any_generation(tmp_path, build_cache):
    """A budget spent during profiling: no generation, the baselines skipped, nothing kept, exit 4."""
    out = tmp_path / "out"
    p = optimize(str(EXAMPLE), "--model", f"replay:{TRANSCRIPT}", "--facts", str(FACTS), "--out", str(out),
                 "--budget-minutes", "0.001", *RECORDED_ARGS, "--scaffold", cache=build_cache)
    assert p.returncode == EXIT_NOT_FASTER, (p.stdout, p.stderr)
    outcome = Outcome.model_validate_json((out / "summary.json").read_text())
    assert outcome.attempts == 0 and outcome.stopped == "budget" and outcome.baseline.error
    assert not (out / "model_new.py").exists()
    report = (out / "report.md").read_text()
    assert "no candidate was correct" in report and "the budget was spent" in report
