"""search, a whole region a turn: n answers drawn, duplicates merged, every distinct region
pre-checked, the survivors built best first until one is a correct custom kernel (steps 1-6 of the
package's docstring)."""

from __future__ import annotations

import logging
import time
from typing import Optional

from kernelwright import prompts
from kernelwright.events import Evaluating, Generating, Judged, Searched
from kernelwright.llm.base import ChatMessage
from kernelwright.records import Attempt, EvalResult, Stage, Verdict
from kernelwright.strategies import feedback, selection
from kernelwright.strategies.base import RunContext
from kernelwright.strategies.search.parts import (
    Sample,
    answer_grammar,
    dedupe,
    distinct,
    follow_up,
    precheck_verdict,
    prompt_vars,
    refuted,
    sample_note,
    task_plan,
)
from kernelwright.strategies.search.tune import tune

log = logging.getLogger(__name__)

MAX_BUILDS = 3  # builds a turn; the rest of the survivors wait for a later turn's evidence


def search_region(ctx: RunContext, n: int, turns: int, temperature: float) -> None:
    """Up to `turns` turns of n samples of the whole region (or, without a scaffold, whole
    programs), until a turn finds a verified custom kernel."""
    c = ctx.config
    base = ctx.messages(prompts.render("task", **prompt_vars(ctx)))
    conversation = base
    tried: set[str] = set()  # regions already built or refuted in an earlier turn
    for turn in range(turns):
        samples = draw(ctx, conversation, turn, n, temperature)
        dedupe(samples, tried)
        precheck(ctx, samples)
        ctx.progress(_summary(samples, turn))
        _build(ctx, samples, turn)
        batch = _record(ctx, conversation, samples, turn)
        if any(selection.tier(a.eval) >= 3 for a in batch):
            # a verified custom kernel: the next step is speed, not another sample of the math
            if not c.has("no_tune"):
                tune(ctx, conversation, batch, turn, len(samples))
            break
        if c.has("no_repair"):
            conversation = base
            continue
        conversation = _repair(ctx, base, samples, batch) or base


# -- one turn ------------------------------------------------------------------------------------

def draw(ctx: RunContext, messages: tuple[ChatMessage, ...], turn: int, n: int,
         temperature: float) -> list[Sample]:
    """n answers to `messages` in one request, each prepared (spliced into the scaffold, grounded)."""
    request = ctx.request(messages, n, temperature, ctx.config.max_tokens, ctx.config.seed + 1000 * turn,
                          grammar=answer_grammar(ctx))
    ctx.progress(Generating(turn=turn, n=n))
    started = time.monotonic()
    completions = ctx.draw(request)
    per_sample = (time.monotonic() - started) / max(1, len(completions))
    samples = []
    for i, comp in enumerate(completions):
        p = ctx.prepare(comp)
        region = p.notes.get("scaffold", {}).get("region", "") if ctx.scaffold() is not None else (p.code or "")
        samples.append(Sample(index=i, completion=comp, code=p.code, grounding=p.grounding, extra=p.notes,
                              region=region, gen_s=per_sample))
    return samples


def precheck(ctx: RunContext, samples: list[Sample]) -> None:
    """Every distinct region's pre-check (Sample.check), all in one call; none without a scaffold
    or under +no_precheck."""
    sc = ctx.scaffold()
    if sc is None or ctx.config.has("no_precheck"):
        return
    from kernelwright.scaffold.precheck import precheck_many

    todo = [s for s in distinct(samples) if s.region.strip()]
    if not todo:
        return
    for s, check in zip(todo, precheck_many(task_plan(ctx), sc.target, [s.region for s in todo])):
        s.check = check


def _order(samples: list[Sample]) -> list[Sample]:
    """What to build, best first: pre-check passes (or, unchecked, every distinct sample), the
    region more samples agree on first, then sampling order. Regions refuted or built in an
    earlier turn are not built again."""
    keep = [s for s in distinct(samples) if not s.seen_before and not refuted(s.check)]
    return sorted(keep, key=lambda s: (-s.votes, s.index))


def _build(ctx: RunContext, samples: list[Sample], turn: int) -> None:
    todo = _order(samples)[:MAX_BUILDS]
    shared = _shared(ctx, todo)
    for s in todo:
        if any(x.result is not None and selection.tier(x.result) >= 3 for x in samples):
            break
        ctx.progress(Evaluating(turn=turn, sample=s.index, n=len(samples)))
        failed: Optional[Stage] = None
        if shared is not None:
            s.result = ctx.evaluate(shared[s.index])
            if not s.result.verdict.build_failed:
                s.code, s.shared_build = shared[s.index], len(shared)
                s.built = True
                continue
            # one region broke the build for all: every region is built on its own from here, and
            # the failed build stays in this sample's record (its time, and why)
            log.info("%s: the shared build of %d regions failed; building each alone", ctx.task.id, len(shared))
            failed = Stage(name="shared_extension", seconds=round(sum(x.seconds for x in s.result.stages), 4),
                           ok=False, detail=f"one extension for {len(shared)} regions did not build "
                                            f"({s.result.verdict.value}); each region built alone")
            shared = None
        s.result = ctx.evaluate(_code(s))
        if failed is not None:
            s.result.stages.insert(0, failed)
        s.built = True


def _code(s: Sample) -> str:
    return s.grounding.code if s.grounding is not None else s.code


def _shared(ctx: RunContext, todo: list[Sample]) -> Optional[dict[int, str]]:
    """Sample index -> its program in one extension with the others' (scaffold.shared_programs),
    when the turn builds several regions of a load_inline target; None otherwise, or when a program
    is not the plain splice of its region (grounding changed it: then that text is what is judged)."""
    sc = ctx.scaffold()
    if sc is None or len(todo) < 2 or ctx.config.has("no_shared_build"):
        return None
    if any(_code(s) != sc.program_with(s.region) for s in todo):
        return None
    from kernelwright.scaffold import shared_programs

    programs = shared_programs(sc, [s.region for s in todo])
    return None if programs is None else {s.index: p for s, p in zip(todo, programs)}


def _unbuilt_result(ctx: RunContext, s: Sample, samples: list[Sample]) -> EvalResult:
    """The verdict of a sample that was not built: its twin's, the pre-check's, or not_built."""
    task_id = ctx.task.id
    if s.code is None:
        return EvalResult(verdict=Verdict.NO_CODE, error="no code in the answer", task_id=task_id,
                          stages=[Stage(name="extract", seconds=0.0, ok=False)])
    if s.twin is not None:
        twin = samples[s.twin]
        return twin.result if twin.result is not None else _unbuilt_result(ctx, twin, samples)
    check = s.check
    if check is not None and refuted(check):
        stage = Stage(name="precheck", seconds=round(check.seconds, 4), ok=False, detail=check.status.value)
        return EvalResult(verdict=precheck_verdict(check), error=check.render(), task_id=task_id, stages=[stage])
    why = ("refuted or built in an earlier turn" if s.seen_before
           else "a better-agreed sample was built first")
    stages = [Stage(name="precheck", seconds=round(check.seconds, 4), ok=True)] if check is not None else []
    return EvalResult(verdict=Verdict.NOT_BUILT, error=f"not built: {why}", task_id=task_id, stages=stages)


def _record(ctx: RunContext, messages: tuple[ChatMessage, ...], samples: list[Sample],
            turn: int) -> list[Attempt]:
    out = []
    for s in samples:
        result = s.result if s.result is not None else _unbuilt_result(ctx, s, samples)
        attempt = ctx.record(messages, s.completion, s.code, s.grounding, result, turn, s.index, s.gen_s,
                             {**s.extra, "search": sample_note(s, samples).dump()})
        if s.built:  # the rest are in the turn's summary line
            ctx.progress(Judged(turn=turn, sample=s.index, n=len(samples), verdict=result.verdict.value,
                                speedup=result.speedup, custom=result.custom_kernel))
        out.append(attempt)
    return out


def _summary(samples: list[Sample], turn: int) -> Searched:
    firsts = distinct(samples)
    checked = [s for s in firsts if s.check is not None]
    return Searched(turn=turn, drawn=len(samples), distinct=len(firsts), checked=len(checked),
                    passed=sum(1 for s in checked if s.check.passed), to_build=min(MAX_BUILDS, len(_order(samples))))


# -- counterexample repair -----------------------------------------------------------------------

def _repair(ctx: RunContext, base: tuple[ChatMessage, ...], samples: list[Sample],
            batch: list[Attempt]) -> Optional[tuple[ChatMessage, ...]]:
    """The next turn's conversation: the task, the failing region most samples agreed on as the
    model's answer, and what is wrong with it (the pre-check's counterexample or compiler error,
    else the evaluator's distilled report). A follow-up, not a fresh prompt: shown only the lines
    and the region, the 1.5B model answered half its CUDA repair turns with a whole kernel
    function (on the H200). None when there is nothing to show (no code in any answer)."""
    failing = [s for s in distinct(samples) if s.region.strip()]
    if not failing:
        return None
    s = min(failing, key=lambda x: (not x.built, -x.votes, x.index))  # a built one first, then by votes
    attempt = batch[s.index]
    if s.check is not None and refuted(s.check):
        problem = s.check.render()
    else:
        problem = feedback.report(attempt)
    sc = ctx.scaffold()
    if sc is None:  # whole programs: the iterative regime's prompt, the best program and its report
        return ctx.messages(prompts.render("iterate", **ctx.task_vars(), best_code=s.region, report=problem))
    return follow_up(base, ctx.task_vars()["fence"], s.region, problem)
