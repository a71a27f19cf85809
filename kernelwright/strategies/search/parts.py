"""The parts search's two ways of sampling share (region.py: a whole region a turn; steps.py: a
line at a time): a drawn answer and its note, the duplicate key, the verdict a pre-check result
stands for, the answers' grammar and prompt, and the repair follow-up."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Optional

from kernelwright import prompts
from kernelwright.llm.base import ChatMessage, Completion
from kernelwright.records import EvalResult, Verdict
from kernelwright.scaffold.precheck.types import PrecheckResult
from kernelwright.strategies.base import RunContext
from kernelwright.strategies.search.notes import SampleNote


@dataclass
class Sample:
    """One drawn answer and what became of it."""

    index: int
    completion: Completion
    code: Optional[str]
    grounding: Any
    extra: dict[str, Any]  # the attempt's notes from preparing it (the scaffold's)
    region: str = ""
    gen_s: float = 0.0  # its share of the generation's wall time
    key: str = ""  # the region, whitespace-normalised: the duplicate key
    twin: Optional[int] = None  # index of the first sample with the same key
    votes: int = 1  # how many samples drew this region (on the first of them)
    seen_before: bool = False  # its region was refuted or built in an earlier turn
    check: Optional[PrecheckResult] = None  # None when not pre-checked
    result: Optional[EvalResult] = None
    built: bool = False
    shared_build: Optional[int] = None  # built as one of this many programs of one extension


def normalise(region: str) -> str:
    """The duplicate key: comments and whitespace do not make a region different."""
    text = re.sub(r"//[^\n]*|#[^\n]*", "", region)
    return re.sub(r"\s+", " ", text).strip()


def task_plan(ctx: RunContext) -> Any:
    """The plan the task's scaffold was written from (cached): it carries the probes and PyTorch's
    values on them, which every pre-check reads."""
    from kernelwright.scaffold import plan_task

    return plan_task(ctx.task, ctx.eval_run.size, device=ctx.eval_run.device)


def sample_note(s: Sample, samples: list[Sample], line: Optional[int] = None,
                lines: Optional[int] = None) -> SampleNote:
    """notes["search"] of a drawn sample: what became of it among the turn's samples (`line` of
    `lines`: the line it answers, searched a line at a time)."""
    return SampleNote(drawn=len(samples), votes=samples[s.twin].votes if s.twin is not None else s.votes,
                      duplicate_of=s.twin, built=s.built, constrained=s.completion.constrained, precheck=s.check,
                      seen_before=s.seen_before or None, shared_build=s.shared_build or None, line=line, lines=lines)


def answer_grammar(ctx: RunContext, sc: Any = None) -> Optional[str]:
    """The language of a region (the task's, or ``sc``'s: a line's), when +grammar asks for it."""
    sc = sc if sc is not None else ctx.scaffold()
    if sc is None or not ctx.config.has("grammar"):
        return None
    from kernelwright.scaffold import region_grammar

    return region_grammar(sc) or None


def prompt_vars(ctx: RunContext) -> dict[str, Any]:
    """The task's prompt variables; under the grammar also how locals are declared in it (t0, t1,
    ...), so the prompt describes the language the answer is held to."""
    if answer_grammar(ctx) is None:
        return ctx.task_vars()
    from kernelwright.scaffold.grammar import local_decl

    return {**ctx.task_vars(), "local_decl": local_decl(ctx.scaffold())}


def dedupe(samples: list[Sample], tried: set[str]) -> None:
    """Key every sample by its region; a repeat names its first twin and adds a vote to it. A
    region in `tried` (earlier turns') is marked seen_before; this turn's are added to it."""
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
            s.seen_before = True
    tried.update(first)


def distinct(samples: list[Sample]) -> list[Sample]:
    """The first sample of every region drawn, among those with code."""
    return [s for s in samples if s.twin is None and s.code is not None]


def refuted(check: Optional[PrecheckResult]) -> bool:
    """The pre-check found the region wrong (not merely unable to judge it)."""
    return check is not None and not check.passed and check.status != "unsupported"


def precheck_verdict(check: PrecheckResult) -> Verdict:
    """The verdict the evaluator gives what the pre-check found: the pre-check must agree with it
    (a disagreement is a pre-check bug, measured by benchmarks/precheck_confusion.py)."""
    if check.status == "counterexample":
        return Verdict.WRONG_OUTPUT
    if check.status == "compile_error":
        from kernelwright.evaluate.taxonomy import explain

        return explain("BuildFailed", check.error)[0]
    return Verdict.RUNTIME_ERROR


def follow_up(base: tuple[ChatMessage, ...], fence: str, region: str,
              problem: str) -> tuple[ChatMessage, ...]:
    """`base` answered with `region`, then told what is wrong with it and what to reply."""
    answer = ChatMessage(role="assistant", content=f"```{fence}\n{region.strip()}\n```")
    ask = prompts.render("search_repair", fence=fence, problem=problem.strip(), corrected=True)
    return (*base, answer, ChatMessage(role="user", content=ask))
