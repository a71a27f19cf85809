"""The distilled evaluator report fed back to the model: verdict, first relevant error lines,
mismatch statistics, timing, and what grounding repaired or could not repair."""

from __future__ import annotations

from kernelwright import prompts
from kernelwright.records import Attempt, Verdict, measured

MEANINGS = {
    Verdict.CORRECT: "custom code ran and the outputs match",
    Verdict.NO_CUSTOM_KERNEL: "the outputs match, but no custom compiled code ran in forward",
    Verdict.WRONG_OUTPUT: "it ran, but the outputs differ from the reference",
    Verdict.SHAPE_MISMATCH: "the output shape differs from the reference",
    Verdict.COMPILE_ERROR: "the custom code did not compile",
    Verdict.HALLUCINATED_API: "it uses an API, keyword, header or function that does not exist",
    Verdict.RUNTIME_ERROR: "it raised an error while running",
    Verdict.TIMEOUT: "it did not finish in time",
    Verdict.CRASH: "the process died",
    Verdict.OUT_OF_MEMORY: "it ran out of memory, also when re-run with nothing else on the device",
    Verdict.CHEAT: "it was caught gaming the check or the timer",
    Verdict.STATIC_VIOLATION: "it breaks a rule of the evaluator",
    Verdict.SYNTAX_ERROR: "it is not valid Python",
    Verdict.NO_CODE: "the answer held no python code block",
    Verdict.NOT_BUILT: "it passed the pre-check but was not built (another sample was verified first)",
}


def report(a: Attempt) -> str:
    r = a.eval
    mismatch = r.mismatch.summary() if r.mismatch is not None else None
    timing = None
    if r.runtime_ms is not None and r.ref_runtime_ms is not None and r.speedup is not None:
        timing = (f"{measured(r.runtime_ms, 4)} ms vs reference {measured(r.ref_runtime_ms, 4)} ms, "
                  f"speedup {measured(r.speedup)}x "
                  f"({'faster beyond noise' if r.faster else 'not faster beyond noise'})")
    return prompts.render(
        "feedback_report",
        verdict=r.verdict.value,
        verdict_meaning=MEANINGS.get(r.verdict, ""),
        repairs=[x.get("message", "") for x in a.repairs],
        findings=[f.message for f in a.grounding_findings if f.severity == "error"],
        error=(r.error or "").strip()[:1500] or None,
        mismatch=mismatch,
        timing=timing,
    )


def best_code(a: Attempt) -> str:
    """What the model is shown of an earlier attempt: under a scaffold only its region (the rest
    is the system's and the model is not asked to touch it), else the whole evaluated program."""
    scaffold = a.notes.get("scaffold")
    if scaffold and "region" in scaffold:
        return scaffold["region"].strip()
    return (a.repaired_code or a.code or "").strip()
