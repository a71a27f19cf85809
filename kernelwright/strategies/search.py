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
it bought no pre-check passes for 2.4x the generation time, docs/results/grammar-yield.md), +n=K.
A task without a scaffold gets whole programs: n a turn, every one built (nothing to pre-check).
"""

from __future__ import annotations

import logging
import re
import time
from dataclasses import dataclass, field
from typing import Any, Optional

from kernelwright import prompts
from kernelwright.events import Evaluating, Generating, Judged, Searched
from kernelwright.llm.base import ChatMessage, Completion
from kernelwright.records import Attempt, EvalResult, Stage, Verdict
from kernelwright.strategies import feedback, selection
from kernelwright.strategies.base import RunContext

log = logging.getLogger(__name__)

DEFAULT_N = 8
DEFAULT_TURNS = 4
DEFAULT_TEMPERATURE = 0.7  # diverse enough that n samples are not n copies, low enough to stay on task
MAX_BUILDS = 3  # builds a turn; the rest of the survivors wait for a later turn's evidence


@dataclass
class Sample:
    """One drawn answer and what became of it."""

    index: int
    completion: Completion
    code: Optional[str]
    grounding: Any
    extra: dict[str, Any]
    region: str = ""
    key: str = ""  # the region, whitespace-normalised: the duplicate key
    twin: Optional[int] = None  # index of the first sample with the same key
    votes: int = 1  # how many samples drew this region (on the first of them)
    check: Any = None  # PrecheckResult, or None when not pre-checked
    result: Optional[EvalResult] = None
    built: bool = False
    notes: dict[str, Any] = field(default_factory=dict)


def normalise(region: str) -> str:
    """The duplicate key: comments and whitespace do not make a region different."""
    text = re.sub(r"//[^\n]*|#[^\n]*", "", region)
    return re.sub(r"\s+", " ", text).strip()


def run(ctx: RunContext) -> None:
    c = ctx.config
    n = c.n or DEFAULT_N
    turns = c.turns or DEFAULT_TURNS
    temperature = DEFAULT_TEMPERATURE if c.temperature is None else c.temperature
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

def _grammar(ctx: RunContext) -> Optional[str]:
    """The region's language, when there is a region and +grammar asks for it."""
    sc = ctx.scaffold()
    if sc is None or not ctx.config.has("grammar"):
        return None
    from kernelwright.scaffold import region_grammar

    return region_grammar(sc) or None


def prompt_vars(ctx: RunContext) -> dict[str, Any]:
    """The task's prompt variables; under the grammar also how locals are declared in it (t0, t1,
    ...), so the prompt describes the language the answer is held to."""
    if _grammar(ctx) is None:
        return ctx.task_vars()
    from kernelwright.scaffold.grammar import local_decl

    return {**ctx.task_vars(), "local_decl": local_decl(ctx.scaffold())}


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


def _dedupe(samples: list[Sample], tried: set[str]) -> None:
    first: dict[str, Sample] = {}
    for s in samples:
        s.key = normalise(s.region)
        if s.key in first:
            s.twin = first[s.key].index
            first[s.key].votes += 1
        else:
            first[s.key] = s
    for s in samples:
        if s.twin is None and s.key in tried:
            s.notes["seen_before"] = True
    tried.update(first)


def _distinct(samples: list[Sample]) -> list[Sample]:
    return [s for s in samples if s.twin is None and s.code is not None]


def _precheck(ctx: RunContext, samples: list[Sample]) -> None:
    sc = ctx.scaffold()
    if sc is None or ctx.config.has("no_precheck"):
        return
    from kernelwright.device import resolve_size
    from kernelwright.scaffold import plan_task
    from kernelwright.scaffold.precheck import precheck_many

    todo = [s for s in _distinct(samples) if s.region.strip()]
    if not todo:
        return
    # the plan the scaffold was written from (cached): it carries the probes and PyTorch's values
    plan = plan_task(ctx.task, resolve_size(ctx.eval_config.device, ctx.eval_config.size),
                     device=ctx.eval_config.device)
    for s, check in zip(todo, precheck_many(plan, sc.target, [s.region for s in todo])):
        s.check = check


def _refuted(check: Any) -> bool:
    """The pre-check found the region wrong (not merely unable to judge it)."""
    return check is not None and not check.passed and check.status != "unsupported"


def _precheck_verdict(check: Any) -> Verdict:
    """The verdict the evaluator gives what the pre-check found: the pre-check must agree with it
    (a disagreement is a pre-check bug, measured by benchmarks/precheck_confusion.py)."""
    if check.status == "counterexample":
        return Verdict.WRONG_OUTPUT
    if check.status == "compile_error":
        from kernelwright.evaluate.taxonomy import explain

        return explain("BuildFailed", check.error)[0]
    return Verdict.RUNTIME_ERROR


def _order(samples: list[Sample]) -> list[Sample]:
    """What to build, best first: pre-check passes (or, unchecked, every distinct sample), the
    region more samples agree on first, then sampling order. Regions refuted or built in an
    earlier turn are not built again."""
    keep = [s for s in _distinct(samples) if not s.notes.get("seen_before")
            and not _refuted(s.check)]
    return sorted(keep, key=lambda s: (-s.votes, s.index))


def _build(ctx: RunContext, samples: list[Sample], turn: int) -> None:
    from dataclasses import replace

    todo = _order(samples)[:MAX_BUILDS]
    shared = _shared(ctx, todo)
    for s in todo:
        if any(x.result is not None and selection.tier(x.result) >= 3 for x in samples):
            break
        ctx.progress(Evaluating(turn=turn, sample=s.index, n=len(samples)))
        failed: Optional[Stage] = None
        if shared is not None:
            s.result = ctx.executor.evaluate(ctx.task, shared[s.index], replace(ctx.eval_config))
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
        s.result = ctx.executor.evaluate(ctx.task, _code(s), replace(ctx.eval_config))
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
        note = {"drawn": len(samples), "votes": samples[s.twin].votes if s.twin is not None else s.votes,
                "duplicate_of": s.twin, "built": s.built, "constrained": s.completion.constrained,
                "precheck": s.check.model_dump(mode="json") if s.check is not None else None}
        if s.notes.get("seen_before"):
            note["seen_before"] = True
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


# -- speed search ---------------------------------------------------------------------------------

def _tune(ctx: RunContext, messages: tuple[ChatMessage, ...], batch: list[Attempt], turn: int,
          first_sample: int) -> None:
    """Time the verified kernel under the skeleton's other launch settings (threads per block,
    shared-memory staging of rows, Triton block and warps): the same region and the same
    extension, so no build and no model call. Each variant is evaluated in full (a setting that
    breaks a region is wrong_output, not faster) and recorded as an attempt of this turn; the pick
    among attempts keeps the fastest correct one. Stops at the run's deadline, where it has one."""
    sc = ctx.scaffold()
    if sc is None or sc.segment is None:
        return
    from dataclasses import replace

    from kernelwright.scaffold import launch_variants, with_launch

    verified = [a for a in batch if selection.tier(a.eval) >= 3]
    best = min(verified, key=lambda a: a.eval.runtime_ms if a.eval.runtime_ms is not None else float("inf"))
    code = best.repaired_code or best.code
    variants = launch_variants(sc.segment, sc.target)
    budget = getattr(ctx.backend, "budget", None)  # optimize's wall-clock budget (optimize/budget.py)
    # the answer is the verified one; the variant cost no tokens
    answer = Completion(text=best.raw_response, finish_reason=best.finish_reason, prompt_tokens=0,
                        completion_tokens=0, latency_s=0.0)
    for k, knobs in enumerate(variants):
        program = with_launch(code or "", knobs)
        if program is None or (budget is not None and budget.spent()):
            return
        sample = first_sample + k
        ctx.progress(Evaluating(turn=turn, sample=sample, n=len(variants)))
        result = ctx.executor.evaluate(ctx.task, program, replace(ctx.eval_config))
        attempt = ctx._attempt(messages, answer, program, None, result, turn, sample, 0.0,
                               {"search": {"tune": knobs, "of": best.id}})
        ctx.attempts.append(attempt)
        ctx.sink(attempt)
        ctx.progress(Judged(turn=turn, sample=sample, n=len(variants), verdict=result.verdict.value,
                            speedup=result.speedup, custom=result.custom_kernel))


# -- counterexample repair -----------------------------------------------------------------------

def _repair(ctx: RunContext, base: tuple[ChatMessage, ...], samples: list[Sample],
            batch: list[Attempt]) -> Optional[tuple[ChatMessage, ...]]:
    """The next turn's conversation: the task, the failing region most samples agreed on as the
    model's answer, and what is wrong with it (the pre-check's counterexample or compiler error,
    else the evaluator's distilled report). A follow-up, not a fresh prompt: shown only the lines
    and the region, the 1.5B model answered half its CUDA repair turns with a whole kernel
    function (H200, 2026-12-02). None when there is nothing to show (no code in any answer)."""
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


def follow_up(base: tuple[ChatMessage, ...], fence: str, region: str,
              problem: str) -> tuple[ChatMessage, ...]:
    """`base` answered with `region`, then told what is wrong with it and what to reply."""
    answer = ChatMessage(role="assistant", content=f"```{fence}\n{region.strip()}\n```")
    ask = prompts.render("search_repair", fence=fence, problem=problem.strip(), corrected=True)
    return (*base, answer, ChatMessage(role="user", content=ask))
