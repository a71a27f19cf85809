"""routed: pick a regime per task from the module itself (its traced graph), not from a level
number — a user's own module has none. The rule and its reason are recorded in the cell.

The rule follows what the reference study measured: profiling-guided prompting was the best
single regime overall, and only the agent solved fusions after a library op.
"""

from __future__ import annotations

from kernelwright.events import Routed
from kernelwright.strategies.base import RunContext

RULES = {
    "single_op": ("guided", "one operator: the profile says where its time goes; one informed attempt"),
    "library_epilogue": ("agentic", "a library GEMM/conv followed by an epilogue chain: the agent fuses the chain"),
    "fusible_chain": ("agentic", "a chain of memory-bound operators to fuse into one pass"),
    "network": ("guided", "a whole network: keep library ops, fuse where the profile shows memory-bound time"),
}


def route(shape: str) -> tuple[str, str]:
    return RULES.get(shape, ("guided", f"unrecognised graph shape {shape!r}: the safest single regime"))


def run(ctx: RunContext) -> None:
    from kernelwright.strategies import REGIMES, load_regime

    analysis = ctx.analysis()
    regime, why = route(analysis.shape)
    ctx.notes["route"] = {"regime": regime, "shape": analysis.shape, "reason": why}
    ctx.progress(Routed(regime=regime, reason=why))
    assert regime in REGIMES
    load_regime(regime)(ctx)
