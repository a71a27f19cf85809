"""Every regime end to end on built-in tasks, with the replay backend (transcripts recorded from
the real embedded model) and the real evaluator: each candidate is extracted, grounded, built
and checked for real. Slow-ish (C++ builds), so the transcripts are small."""

from __future__ import annotations

import pytest

from kernelwright.llm import make_backend
from kernelwright.prompts.facts import folder_provider
from kernelwright.strategies import run_regime, selection
from kernelwright.strategies.routed import RULES
from kernelwright.tasks import load_task
from tests.strategies import plan

pytestmark = [pytest.mark.build, pytest.mark.skipif(not plan.TRANSCRIPTS.is_dir(), reason="no recorded transcripts")]


@pytest.mark.parametrize("spec", plan.REGIMES)
def test_regime_runs_end_to_end_on_replay(spec, build_cache):
    path = plan.transcript(spec)
    if not path.is_file():
        pytest.skip(f"{path.name} not recorded")
    backend = make_backend(f"replay:{path}")
    provider = folder_provider(plan.FACTS)
    config = plan.regime_config(spec)
    for task_id in plan.PLAN[spec]:
        task = load_task(task_id)
        logged = []
        cell = run_regime(task, backend, config, plan.eval_run(str(build_cache)), sink=logged.append,
                          analysis_provider=provider)
        # every candidate generated is recorded, not only the kept one, and the pick is the ranking key's
        assert cell.attempt_ids == [a.id for a in logged] and logged
        assert all(a.raw_response and a.eval.verdict for a in logged)
        assert cell.selected == selection.select(logged).id
        assert cell.verdict == selection.select(logged).eval.verdict
        turns = {a.turn for a in logged}
        if config.name in ("zero_shot", "guided"):
            assert len(logged) == 1
        if config.name == "agentic":
            assert all(len([a for a in logged if a.turn == t]) == 2 for t in turns)
        if config.scaffold:
            # the model answered for the region only; its text, the region used and the assembled
            # program are all on the record
            assert all(a.notes["scaffold"]["region"] is not None and "REGION BEGIN" in a.code for a in logged)
            assert all("REGION BEGIN" in a.messages[-1]["content"] for a in logged)
        if config.name == "routed":
            shape = provider(task).shape
            assert cell.route and cell.route.startswith(RULES[shape][0])
