"""The interaction regimes: hold the model fixed, vary the information and control flow around it.

REGIMES maps a name to "module:function" (imported lazily). `run_regime` runs one regime on one
task and returns the Cell: every attempt it generated, and the one the ranking key selected.
"""

from __future__ import annotations

import importlib
import time
from typing import Any, Callable, Optional

from kernelwright.evaluate.config import EvalRun
from kernelwright.executors.base import Direct, Executor
from kernelwright.llm.base import Backend
from kernelwright.llm.budget import BudgetSpent
from kernelwright.records import Attempt, Cell, Task, Verdict
from kernelwright.strategies import selection
from kernelwright.strategies.base import ProgressFn, RunContext
from kernelwright.strategies.config import RegimeConfig, RegimeError, parse_regime

REGIMES: dict[str, str] = {
    "zero_shot": "kernelwright.strategies.zero_shot:run",
    "guided": "kernelwright.strategies.guided:run",
    "iterative": "kernelwright.strategies.iterative:run",
    "agentic": "kernelwright.strategies.agentic:run",
    "routed": "kernelwright.strategies.routed:run",
    "search": "kernelwright.strategies.search:run",
}

__all__ = ["REGIMES", "RegimeConfig", "RegimeError", "parse_regime", "run_regime", "load_regime"]


def load_regime(name: str) -> Callable[[RunContext], None]:
    module, _, fn = REGIMES[name].partition(":")
    return getattr(importlib.import_module(module), fn)


def run_regime(task: Task, backend: Backend, config: RegimeConfig, eval_run: EvalRun, *,
               sink: Callable[[Attempt], None] = lambda a: None, progress: ProgressFn = lambda e: None,
               analysis_provider: Optional[Callable[[Task], Any]] = None, config_hash: Optional[str] = None,
               cell_sink: Optional[Callable[[Cell], None]] = None, executor: Optional[Executor] = None) -> Cell:
    """Run the regime and return its Cell. `cell_sink` also gets the Cell when the run is cut short
    (a spent budget, an interrupt, a backend error): the attempts made so far and the pick among
    them, with the reason saying it stopped; the exception still propagates. Candidates are
    evaluated by `executor` (default: executors.base.Direct, a sandboxed child each)."""
    chash = config_hash or config.config_hash(backend.model, {"device": eval_run.device})
    key = f"{chash}/{config.spec}/{task.id}"
    ctx = RunContext(task=task, backend=backend, config=config, eval_run=eval_run, cell_key=key,
                     sink=sink, progress=progress, analysis_provider=analysis_provider,
                     executor=executor or Direct())
    started = time.monotonic()
    try:
        load_regime(config.name)(ctx)
    except BaseException as e:
        if cell_sink is not None:
            # a spent clock says whose ("budget of 3 min spent"), anything else its kind
            stopped = str(e) if isinstance(e, BudgetSpent) else type(e).__name__
            cell_sink(_cell(ctx, task, config, chash, started, stopped=stopped))
        raise
    cell = _cell(ctx, task, config, chash, started)
    if cell_sink is not None:
        cell_sink(cell)
    return cell


def _cell(ctx: RunContext, task: Task, config: RegimeConfig, chash: str, started: float,
          stopped: Optional[str] = None) -> Cell:
    best = selection.select(ctx.attempts)
    route = ctx.notes.get("route")
    stopped = stopped or ctx.notes.get("stopped")  # a clock that ended the regime without raising
    reason = selection.reason(best, len(ctx.attempts))
    return Cell(
        key=ctx.cell_key, task_id=task.id, regime=config.spec, config_hash=chash,
        attempt_ids=[a.id for a in ctx.attempts],
        selected=best.id if best else None,
        reason=f"{reason} (the run stopped: {stopped})" if stopped else reason,
        verdict=best.eval.verdict if best else Verdict.NO_CODE,
        speedup=best.eval.speedup if best else None,
        faster=bool(best and best.eval.faster),
        custom_kernel=bool(best and best.eval.custom_kernel),
        route=f"{route['regime']}: {route['reason']}" if route else None,
        scaffold=_scaffold_line(ctx.notes.get("scaffold")),
        turns=1 + max((a.turn for a in ctx.attempts), default=0),
        wall_s=round(time.monotonic() - started, 2),
        usage=ctx.usage,
        stopped=stopped,
    )


def _scaffold_line(note: Optional[dict[str, Any]]) -> Optional[str]:
    if not note:
        return None
    return ("region: " if note.get("available") else "none (whole programs): ") + str(note.get("reason", ""))
