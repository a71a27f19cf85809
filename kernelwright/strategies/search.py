"""search: many samples of one region against a fast exact check; build only what survives.

Small models are weak at whole programs and decent at small checked pieces, and they improve most
when they can try many times against an exact check. One turn:

1. n answers for the region in one backend request (llama.cpp evaluates the prompt once for all n),
   constrained to the region's language where the backend can apply a grammar (scaffold/grammar.py:
   a fenced block of statements over the names in scope and the target's real math functions, so
   a prose answer or an undefined name cannot be sampled), each spliced into the scaffold;
2. duplicates dropped: regions equal after whitespace normalisation are one candidate;
3. every distinct region pre-checked in milliseconds (scaffold/precheck.py: the region's math
   alone, compiled without torch and run on probe values with edge cases, against PyTorch);
4. the survivors built and evaluated best first — the region most samples agree on first, since
   agreement among independent samples is evidence — until one is a correct custom kernel
   (at most MAX_BUILDS a turn: a build costs 20-60 s, a pre-check milliseconds). Where the target
   builds an extension (CUDA, C++), the turn's survivors share one: every region's kernel in one
   source, a program per region (scaffold.shared_programs), so the first evaluation's build serves
   the rest; if that build fails, each region is built on its own;
5. once one is correct, speed: the verified kernel is timed under the skeleton's other launch
   settings (same region, same extension: no build, no tokens), each variant verified in full, so
   the pick keeps the fastest correct one (+no_tune switches it off);
6. when none is correct, the next turn answers the model's failing region with its concrete
   counterexample or compiler error, as a follow-up in the same conversation (so the kernel and
   where the region goes stay in view), and samples again.

Every sample becomes an Attempt: a pre-check failure gets the verdict the evaluator would give
(wrong_output for a counterexample, compile_error / hallucinated_api for a compiler error) with
one `precheck` stage and no build; a duplicate carries its twin's verdict; a pre-check pass left
unbuilt because a correct kernel was already found is `not_built`. Each attempt's
notes["search"] says which (drawn, distinct, pre-check result, built) and whether the answer was
sampled under the grammar (`constrained`: the backend says, per answer).

Ablations, each part switched off on its own so a study shows what it buys: +no_precheck (build
every distinct sample, in sampling order), +no_repair (every turn samples the base prompt again,
with a new seed), +no_shared_build (each survivor its own extension), +no_tune (no launch variants
after a verified kernel), +grammar (answers constrained to the region's language: off by default,
it bought no pre-check passes for 2.4x the generation time, docs/results/grammar-yield.md), +n=K,
+no_steps (an elementwise region of several lines is sampled whole instead of a line at a time,
search_steps.py), +no_parts (a line at a time, but a composite op's line, softplus or a softmax, one
line rather than its definition's lines: scaffold/decompose.py).
A task without a scaffold gets whole programs: n a turn, every one built (nothing to pre-check).
"""

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
from kernelwright.strategies.search_parts import (  # noqa: F401 -- the regime's names for them
    Sample,
    _dedupe,
    _distinct,
    _grammar,
    _precheck_verdict,
    _refuted,
    _tune,
    follow_up,
    normalise,
    prompt_vars,
    sample_note,
    task_plan,
)

log = logging.getLogger(__name__)

DEFAULT_N = 8
DEFAULT_TURNS = 4
DEFAULT_TEMPERATURE = 0.7  # diverse enough that n samples are not n copies, low enough to stay on task
MAX_BUILDS = 3  # builds a turn; the rest of the survivors wait for a later turn's evidence


def run(ctx: RunContext) -> None:
    c = ctx.config
    n = c.n or DEFAULT_N
    turns = c.turns or DEFAULT_TURNS
    temperature = DEFAULT_TEMPERATURE if c.temperature is None else c.temperature
    from kernelwright.strategies import search_steps

    # an elementwise region of several lines: each line sampled and checked on its own first
    # (search_steps.py); the whole region is sampled where that does not apply
    if search_steps.run(ctx, n, turns, temperature) is not None:
        return
    base = ctx.messages(prompts.render("task", **prompt_vars(ctx)))
    conversation = base
    tried: set[str] = set()  # regions already built or refuted in an earlier turn
    for turn in range(turns):
        samples = _draw(ctx, conversation, turn, n, temperature)
        _dedupe(samples, tried)
        _precheck(ctx, samples)
        ctx.progress(_summary(samples, turn))
        _build(ctx, samples, turn)
        batch = _record(ctx, conversation, samples, turn)
        if any(selection.tier(a.eval) >= 3 for a in batch):
            # a verified custom kernel: the next step is speed, not another sample of the math
            if not c.has("no_tune"):
                _tune(ctx, conversation, batch, turn, len(samples))
            break
        if c.has("no_repair"):
            conversation = base
            continue
        conversation = _repair(ctx, base, samples, batch) or base


# -- one turn ------------------------------------------------------------------------------------

def _draw(ctx: RunContext, messages: tuple[ChatMessage, ...], turn: int, n: int,
          temperature: float) -> list[Sample]:
    request = ctx._request(messages, n, temperature, ctx.config.max_tokens,
                           ctx.config.seed + 1000 * turn).model_copy(update={"grammar": _grammar(ctx)})
    ctx.progress(Generating(turn=turn, n=n))
    started = time.monotonic()
    completions = ctx._generate(request)
    per_sample = (time.monotonic() - started) / max(1, len(completions))
    samples = []
    for i, comp in enumerate(completions):
        code, grounding, extra = ctx._prepare(comp)
        region = extra.get("scaffold", {}).get("region", "") if ctx.scaffold() is not None else (code or "")
        s = Sample(index=i, completion=comp, code=code, grounding=grounding, extra=extra, region=region)
        s.notes["gen_s"] = per_sample
        samples.append(s)
    return samples


def _precheck(ctx: RunContext, samples: list[Sample]) -> None:
    sc = ctx.scaffold()
    if sc is None or ctx.config.has("no_precheck"):
        return
    from kernelwright.scaffold.precheck import precheck_many

    todo = [s for s in _distinct(samples) if s.region.strip()]
    if not todo:
        return
    for s, check in zip(todo, precheck_many(task_plan(ctx), sc.target, [s.region for s in todo])):
        s.check = check


def _order(samples: list[Sample]) -> list[Sample]:
    """What to build, best first: pre-check passes (or, unchecked, every distinct sample), the
    region more samples agree on first, then sampling order. Regions refuted or built in an
    earlier turn are not built again."""
    keep = [s for s in _distinct(samples) if not s.notes.get("seen_before")
            and not _refuted(s.check)]
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
            s.result = ctx.executor.evaluate(ctx.task, shared[s.index], ctx.eval_run)
            if not s.result.verdict.build_failed:
                s.code, s.notes["shared_build"] = shared[s.index], len(shared)
                s.built = True
                continue
            # one region broke the build for all: every region is built on its own from here, and
            # the failed build stays in this sample's record (its time, and why)
            log.info("%s: the shared build of %d regions failed; building each alone", ctx.task.id, len(shared))
            failed = Stage(name="shared_extension", seconds=round(sum(x.seconds for x in s.result.stages), 4),
                           ok=False, detail=f"one extension for {len(shared)} regions did not build "
                                            f"({s.result.verdict.value}); each region built alone")
            shared = None
        s.result = ctx.executor.evaluate(ctx.task, _code(s), ctx.eval_run)
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
    if _refuted(check):
        stage = Stage(name="precheck", seconds=round(check.seconds, 4), ok=False, detail=check.status.value)
        return EvalResult(verdict=_precheck_verdict(check), error=check.render(), task_id=task_id, stages=[stage])
    why = ("refuted or built in an earlier turn" if s.notes.get("seen_before")
           else "a better-agreed sample was built first")
    stages = [Stage(name="precheck", seconds=round(check.seconds, 4), ok=True)] if check is not None else []
    return EvalResult(verdict=Verdict.NOT_BUILT, error=f"not built: {why}", task_id=task_id, stages=stages)


def _record(ctx: RunContext, messages: tuple[ChatMessage, ...], samples: list[Sample],
            turn: int) -> list[Attempt]:
    out = []
    for s in samples:
        result = s.result if s.result is not None else _unbuilt_result(ctx, s, samples)
        note = sample_note(s, samples)
        if s.notes.get("shared_build"):
            note["shared_build"] = s.notes["shared_build"]  # judged as one of this many programs of one extension
        attempt = ctx._attempt(messages, s.completion, s.code, s.grounding, result, turn, s.index,
                               s.notes["gen_s"], {**s.extra, "search": note})
        ctx.attempts.append(attempt)
        ctx.sink(attempt)
        if s.built:  # the rest are in the turn's summary line
            ctx.progress(Judged(turn=turn, sample=s.index, n=len(samples), verdict=result.verdict.value,
                                speedup=result.speedup, custom=result.custom_kernel))
        out.append(attempt)
    return out


def _summary(samples: list[Sample], turn: int) -> Searched:
    distinct = _distinct(samples)
    checked = [s for s in distinct if s.check is not None]
    return Searched(turn=turn, drawn=len(samples), distinct=len(distinct), checked=len(checked),
                    passed=sum(1 for s in checked if s.check.passed), to_build=min(MAX_BUILDS, len(_order(samples))))


# -- counterexample repair -----------------------------------------------------------------------

def _repair(ctx: RunContext, base: tuple[ChatMessage, ...], samples: list[Sample],
            batch: list[Attempt]) -> Optional[tuple[ChatMessage, ...]]:
    """The next turn's conversation: the task, the failing region most samples agreed on as the
    model's answer, and what is wrong with it (the pre-check's counterexample or compiler error,
    else the evaluator's distilled report). A follow-up, not a fresh prompt: shown only the lines
    and the region, the 1.5B model answered half its CUDA repair turns with a whole kernel
    function (on the H200). None when there is nothing to show (no code in any answer)."""
    failing = [s for s in _distinct(samples) if s.region.strip()]
    if not failing:
        return None
    s = min(failing, key=lambda x: (not x.built, -x.votes, x.index))  # a built one first, then by votes
    attempt = batch[s.index]
    if _refuted(s.check):
        problem = s.check.render()
    else:
        problem = feedback.report(attempt)
    sc = ctx.scaffold()
    if sc is None:  # whole programs: the iterative regime's prompt, the best program and its report
        return ctx.messages(prompts.render("iterate", **ctx.task_vars(), best_code=s.region, report=problem))
    return follow_up(base, ctx.task_vars()["fence"], s.region, problem)


