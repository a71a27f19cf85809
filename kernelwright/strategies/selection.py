"""The one ranking key for candidates, used by every regime, the study and `optimize`.

correct with a custom kernel and faster beyond noise > correct with a custom kernel >
correct without one > compiled > failed; ties broken by measured speedup, then by the earlier
candidate. Within a tier, a candidate found correct at the task's second shape (`generalises`)
is preferred to one that failed there when their speeds are equal within the noise (their
timing IQRs overlap, or neither was timed). The pick is made from the evaluator's records, never from the model's own judgment,
and a later broken candidate can never displace an earlier working one.
"""

from __future__ import annotations

from typing import Optional, Sequence

from kernelwright.records import Attempt, EvalResult, Verdict

TIERS = {
    4: "correct, custom kernel, faster beyond noise",
    3: "correct, custom kernel",
    2: "correct without a custom kernel",
    1: "compiled",
    0: "failed",
}


def tier(r: EvalResult) -> int:
    if r.verdict == Verdict.CORRECT and r.custom_kernel:
        return 4 if r.faster else 3
    if r.verdict.outputs_match:
        return 2
    if r.compiled and r.verdict not in (Verdict.CHEAT,):
        return 1
    return 0


def rank_key(r: EvalResult, order: int) -> tuple[int, float, int]:
    """Larger is better. `order` is the candidate's position in generation order."""
    speed = r.speedup if (r.speedup is not None and tier(r) >= 2) else 0.0
    return (tier(r), speed, -order)


def same_speed(a: EvalResult, b: EvalResult) -> bool:
    """Equal within the noise: their runtime IQRs overlap, or neither was timed."""
    if a.timing is None or b.timing is None:
        return a.timing is None and b.timing is None
    return not (a.timing.p75_ms < b.timing.p25_ms or b.timing.p75_ms < a.timing.p25_ms)


def select(attempts: Sequence[Attempt]) -> Optional[Attempt]:
    if not attempts:
        return None
    best = max(range(len(attempts)), key=lambda i: rank_key(attempts[i].eval, i))
    top = attempts[best].eval
    if top.generalises is False:
        peers = [i for i in range(len(attempts)) if attempts[i].eval.generalises and
                 tier(attempts[i].eval) == tier(top) and same_speed(attempts[i].eval, top)]
        if peers:
            best = max(peers, key=lambda i: rank_key(attempts[i].eval, i))
    return attempts[best]


def reason(a: Optional[Attempt], total: int) -> str:
    if a is None:
        return "no candidate was generated"
    t = tier(a.eval)
    speed = f", speedup {a.eval.speedup:.3g}x" if a.eval.speedup is not None else ""
    shapes = {True: "; correct at a second shape too", False: "; correct only at the task's shape"}.get(
        a.eval.generalises, "")
    return (f"best of {total} by the ranking key: {TIERS[t]} ({a.eval.verdict.value}{speed}){shapes}; turn {a.turn}, "
            f"sample {a.sample}")


def is_goal(r: EvalResult) -> bool:
    """The early-stop condition: a correct custom kernel, faster beyond noise."""
    return tier(r) == 4
