"""iterative: up to K turns of generate -> evaluate -> distilled report -> regenerate from the
best candidate so far (by the ranking key, so a broken turn never replaces a working one)."""

from __future__ import annotations

from kernelwright import prompts
from kernelwright.strategies import feedback, selection
from kernelwright.strategies.base import RunContext

DEFAULT_TURNS = 3


def run(ctx: RunContext) -> None:
    c = ctx.config
    temperature = 0.0 if c.temperature is None else c.temperature
    turns = 1 if c.has("single_turn") else (c.turns or DEFAULT_TURNS)
    user = prompts.render("task", **ctx.task_vars())
    for turn in range(turns):
        batch = ctx.candidates(user, turn=turn, n=c.n or 1, temperature=temperature)
        if c.early_stop and any(selection.is_goal(a.eval) for a in batch):
            break
        best = selection.select(ctx.attempts)
        if best is None or turn == turns - 1:
            break
        user = prompts.render("iterate", **ctx.task_vars(), best_code=feedback.best_code(best) or best.raw_response,
                              report=feedback.report(best))
