"""Speed, once a region is verified: the same kernel under the skeleton's other launch settings,
and a GEMM region in its library twin; no model call, each variant judged in full."""

from __future__ import annotations

from kernelwright.events import Evaluating, Judged
from kernelwright.llm.base import ChatMessage, Completion
from kernelwright.records import Attempt, EvalResult
from kernelwright.strategies import selection
from kernelwright.strategies.base import RunContext
from kernelwright.strategies.search.notes import TuneNote


def tune(ctx: RunContext, messages: tuple[ChatMessage, ...], batch: list[Attempt], turn: int,
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
        result = ctx.evaluate(program, run)
        baseline_of = None
        if ctx.eval_run.config.compile_baseline:
            result = with_baseline(result, best.eval)
            baseline_of = best.id
        note = TuneNote(tune=knobs, of=best.id, compile_baseline_of=baseline_of)
        ctx.record(messages, answer, program, None, result, turn, sample, 0.0, {"search": note.dump()})
        ctx.progress(Judged(turn=turn, sample=sample, n=len(programs), verdict=result.verdict.value,
                            speedup=result.speedup, custom=result.custom_kernel))


def with_baseline(result: EvalResult, verified: EvalResult) -> EvalResult:
    """A launch variant's result with the compile baseline its verified kernel's evaluation measured:
    timed against it where both were timed, else the baseline's error carried over (torch.compile
    failed on this machine)."""
    if verified.compile_timing is not None and result.timing is not None:
        from kernelwright.measure.timing import against_compile

        return EvalResult.model_validate({**result.model_dump(),
                                          **against_compile(result.timing, verified.compile_timing),
                                          "compile_baseline_suspect": verified.compile_baseline_suspect})
    if verified.compile_baseline_error:
        return result.model_copy(update={"compile_baseline_error": verified.compile_baseline_error})
    return result
