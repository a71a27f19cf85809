"""zero_shot: the base prompt, one attempt, greedy by default (as in the reference study)."""

from __future__ import annotations

from kernelwright import prompts
from kernelwright.strategies.base import RunContext


def run(ctx: RunContext) -> None:
    c = ctx.config
    temperature = 0.0 if c.temperature is None else c.temperature
    ctx.candidates(prompts.render("task", **ctx.task_vars()), turn=0, n=c.n or 1, temperature=temperature)
