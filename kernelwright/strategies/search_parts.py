"""The parts search's two ways of sampling share (strategies/search.py: a whole region a turn;
search_steps.py: a line at a time): a drawn answer and its record, the duplicate key, the verdict a
pre-check result stands for, the repair follow-up, and the speed search of a verified kernel."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Optional

from kernelwright import prompts
from kernelwright.events import Evaluating, Judged
from kernelwright.llm.base import ChatMessage, Completion
from kernelwright.records import Attempt, EvalResult, Verdict
from kernelwright.strategies import selection
from kernelwright.strategies.base import RunContext


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


def task_plan(ctx: RunContext) -> Any:
    """The plan the task's scaffold was written from (cached): it carries the probes and PyTorch's
    values on them, which every pre-check reads."""
    from kernelwright.scaffold import plan_task

    return plan_task(ctx.task, ctx.eval_run.size, device=ctx.eval_run.device)


def sample_note(s: Sample, samples: list[Sample]) -> dict[str, Any]:
    """notes["search"] of a drawn sample: what became of it among the turn's samples."""
    note = {"drawn": len(samples), "votes": samples[s.twin].votes if s.twin is not None else s.votes,
            "duplicate_of": s.twin, "built": s.built, "constrained": s.completion.constrained,
            "precheck": s.check.model_dump(mode="json") if s.check is not None else None}
    if s.notes.get("seen_before"):
        note["seen_before"] = True
    return note


def _grammar(ctx: RunContext, sc: Any = None) -> Optional[str]:
    """The language of a region (the task's, or ``sc``'s: a line's), when +grammar asks for it."""
    sc = sc if sc is not None else ctx.scaffold()
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


def _tune(ctx: RunContext, messages: tuple[ChatMessage, ...], batch: list[Attempt], turn: int,
          first_sample: int) -> None:
    """Time the verified kernel under the skeleton's other launch settings (threads per block,
    shared-memory staging of rows, Triton block and warps): the same region and the same
    extension, so no build and no model call; and a GEMM skeleton's region in its library twin
    (the GEMM left to the library, the region as an elementwise epilogue after it:
    Scaffold.library_twin), a build of its own but still no model call. Each variant is evaluated
    in full (a setting that breaks a region is wrong_output, not faster) and recorded as an attempt
    of this turn; the pick among attempts keeps the fastest correct one. Stops at the run's
    deadline, where it has one."""
    sc = ctx.scaffold()
    if sc is None or sc.segment is None:
        return
    from kernelwright.scaffold import launch_variants, with_launch

    verified = [a for a in batch if selection.tier(a.eval) >= 3]
    best = min(verified, key=lambda a: a.eval.runtime_ms if a.eval.runtime_ms is not None else float("inf"))
    code = best.repaired_code or best.code
    variants = launch_variants(sc.segment, sc.target)
    budget = getattr(ctx.backend, "budget", None)  # optimize's or a study cell's clock (llm/budget.py)
    # After other cells' first candidates in a shared pool, and without compiling the reference
    # again: the compile baseline is the task's, measured once by the verified kernel's evaluation
    # (it was 2-5 full evaluations a variant before, on the H200 over half a study's evaluations).
    run = ctx.eval_run.but(priority=1, compile_baseline=False)
    # the answer is the verified one; the variant cost no tokens
    answer = Completion(text=best.raw_response, finish_reason=best.finish_reason, prompt_tokens=0,
                        completion_tokens=0, latency_s=0.0)
    programs = [(knobs, with_launch(code or "", knobs)) for knobs in variants]
    region = (best.notes.get("scaffold") or {}).get("region")
    if sc.library_twin is not None and region is not None:
        programs.append(({"skeleton": "library_twin"}, sc.library_twin.program_with(region)))
    for k, (knobs, program) in enumerate(programs):
        if budget is not None and budget.spent():
            # the clock ends the regime here without an exception (the verified kernel stands):
            # the cell still says what stopped it (Cell.stopped)
            ctx.notes["stopped"] = f"{budget.spent_text} ({len(programs) - k} launch variant(s) not timed)"
            return
        if program is None:
            return
        sample = first_sample + k
        ctx.progress(Evaluating(turn=turn, sample=sample, n=len(programs)))
        result = ctx.executor.evaluate(ctx.task, program, run)
        note = {"tune": knobs, "of": best.id}
        if ctx.eval_run.config.compile_baseline:
            result = _with_baseline(result, best.eval)
            note["compile_baseline_of"] = best.id
        attempt = ctx._attempt(messages, answer, program, None, result, turn, sample, 0.0, {"search": note})
        ctx.attempts.append(attempt)
        ctx.sink(attempt)
        ctx.progress(Judged(turn=turn, sample=sample, n=len(programs), verdict=result.verdict.value,
                            speedup=result.speedup, custom=result.custom_kernel))


def _with_baseline(result: EvalResult, verified: EvalResult) -> EvalResult:
    """A launch variant's result with the compile baseline its verified kernel's evaluation measured:
    timed against it where both were timed, else the baseline's error carried over (torch.compile
    failed on this machine)."""
    if verified.compile_timing is not None and result.timing is not None:
        from kernelwright.measure.timing import against_compile

        return EvalResult.model_validate({**result.model_dump(),
                                          **against_compile(result.timing, verified.compile_timing)})
    if verified.compile_baseline_error:
        return result.model_copy(update={"compile_baseline_error": verified.compile_baseline_error})
    return result


def follow_up(base: tuple[ChatMessage, ...], fence: str, region: str,
              problem: str) -> tuple[ChatMessage, ...]:
    """`base` answered with `region`, then told what is wrong with it and what to reply."""
    answer = ChatMessage(role="assistant", content=f"```{fence}\n{region.strip()}\n```")
    ask = prompts.render("search_repair", fence=fence, problem=problem.strip(), corrected=True)
    return (*base, answer, ChatMessage(role="user", content=ask))
