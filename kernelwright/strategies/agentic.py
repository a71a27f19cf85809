"""agentic: five roles on the same model.

code analyzer (LLM)      -> what the module computes, what to fuse, what to leave to the library,
                            and search queries
retrieval researcher     -> BM25 over our own notes (kernelwright/knowledge), condensed by the
                            model into a brief that cites its sources
generator (LLM)          -> best-of-n (default n=4 at temperature 0.7)
evaluator (not an LLM)   -> the sandboxed evaluator, every candidate
feedback analyzer (LLM)  -> reads the best candidate's report and says what to change next turn

Up to 3 turns. Every role can be switched off for ablations (no_analyzer, no_retrieval,
no_feedback_analyzer, single_turn, n=...). `ambition` swaps in the prompts of the failed pilot
(hand-tiled custom code everywhere) instead of the competence-matched default.
"""

from __future__ import annotations

import re

from kernelwright import prompts
from kernelwright.strategies import feedback, selection
from kernelwright.strategies.base import TARGET_NAMES, RunContext

DEFAULT_TURNS = 3
DEFAULT_N = 4
DEFAULT_TEMPERATURE = 0.7
MAX_QUERIES = 4


def split_queries(answer: str) -> tuple[str, list[str]]:
    """The analyzer's answer up to `QUERIES:`, and the queries listed after it."""
    head, sep, tail = answer.partition("QUERIES:")
    if not sep:
        return answer.strip(), []
    queries = [re.sub(r"^[-*\d.)\s]+", "", line).strip() for line in tail.splitlines()]
    return head.strip(), [q for q in queries if len(q) > 3][:MAX_QUERIES]


def fallback_queries(ctx: RunContext) -> list[str]:
    """Deterministic queries from the task's operators, for when the analyzer gives none."""
    target = TARGET_NAMES[ctx.target]
    ops = ctx.analysis().op_names()[:3]
    queries = [f"{target} load_inline kernel example" if ctx.target != "triton" else "triton kernel basics"]
    queries += [f"{op} {target} kernel" for op in ops]
    return queries[:MAX_QUERIES]


def run(ctx: RunContext) -> None:
    c = ctx.config
    turns = 1 if c.has("single_turn") else (c.turns or DEFAULT_TURNS)
    n = c.n or DEFAULT_N
    temperature = DEFAULT_TEMPERATURE if c.temperature is None else c.temperature
    vars_ = ctx.task_vars()

    analysis_text, queries = None, []
    if not c.has("no_analyzer"):
        answer = ctx.ask("analyzer", prompts.render("analyzer", **vars_, graph_lines=ctx.analysis().graph_lines()), turn=0)
        analysis_text, queries = split_queries(answer)
    brief = None
    if c.retrieves:
        from kernelwright.knowledge.retrieval import brief as retrieve

        found = retrieve(queries or fallback_queries(ctx))
        ctx.notes["retrieval"] = {"queries": queries or fallback_queries(ctx), "sources": found.sources}
        condensed = ctx.ask("researcher", prompts.render("researcher", **vars_, excerpts=found.text), turn=0)
        brief = condensed.strip() + "\n\nSources: " + "; ".join(str(s) for s in found.sources)

    best_code, advice = None, None
    for turn in range(turns):
        user = prompts.render("agent_generator", **vars_, analysis=analysis_text, brief=brief,
                              best_code=best_code, feedback=advice)
        batch = ctx.candidates(user, turn=turn, n=n, temperature=temperature)
        if c.early_stop and any(selection.is_goal(a.eval) for a in batch):
            break
        if turn == turns - 1:
            break
        best = selection.select(ctx.attempts)
        assert best is not None
        report = feedback.report(best)
        best_code = feedback.best_code(best) or None
        if c.has("no_feedback_analyzer"):
            advice = report
        else:
            advice = ctx.ask("feedback_analyzer", prompts.render("feedback_analyzer", fence=vars_["fence"], code=best_code or best.raw_response,
                                                                 report=report), turn=turn).strip() + "\n\n" + report
