"""guided: the base prompt plus what the profiler and the roofline say about the reference on
the target device, and the rule: keep tuned library GEMM/conv, fuse the memory-bound epilogue."""

from __future__ import annotations

from kernelwright import prompts
from kernelwright.strategies.base import RunContext


def run(ctx: RunContext) -> None:
    c = ctx.config
    temperature = 0.0 if c.temperature is None else c.temperature
    analysis = ctx.analysis()
    user = prompts.render("guided", **ctx.task_vars(), **analysis.guided_vars())
    ctx.candidates(user, turn=0, n=c.n or 1, temperature=temperature)
