"""The ranking key: one order for every regime, and a later broken turn never wins."""

from __future__ import annotations

from kernelwright.records import Attempt, EvalResult, Verdict
from kernelwright.strategies import selection


def attempt(i: int, verdict: Verdict, custom=False, speedup=None, faster=False, compiled=True) -> Attempt:
    r = EvalResult(verdict=verdict, custom_kernel=custom, speedup=speedup, faster=faster, compiled=compiled,
                   correct=verdict in (Verdict.CORRECT, Verdict.NO_CUSTOM_KERNEL))
    return Attempt(id=f"a{i}", task_id="t", regime="r", turn=i, sample=0, prompt_hash="h", messages=[],
                   raw_response="", eval=r)


def test_tiers_in_order():
    ranked = [
        attempt(0, Verdict.COMPILE_ERROR, compiled=False),
        attempt(1, Verdict.WRONG_OUTPUT),
        attempt(2, Verdict.NO_CUSTOM_KERNEL, speedup=3.0),
        attempt(3, Verdict.CORRECT, custom=True, speedup=0.5),
        attempt(4, Verdict.CORRECT, custom=True, speedup=1.2, faster=True),
    ]
    tiers = [selection.tier(a.eval) for a in ranked]
    assert tiers == [0, 1, 2, 3, 4]
    for i in range(len(ranked)):
        assert selection.select(ranked[: i + 1]) is ranked[i]


def test_a_later_broken_turn_never_displaces_a_working_one():
    working = attempt(0, Verdict.CORRECT, custom=True, speedup=0.9)
    later = [attempt(1, Verdict.COMPILE_ERROR, compiled=False), attempt(2, Verdict.RUNTIME_ERROR),
             attempt(3, Verdict.CHEAT, speedup=50.0), attempt(4, Verdict.NO_CUSTOM_KERNEL, speedup=9.0)]
    assert selection.select([working, *later]) is working


def test_ties_break_by_speedup_then_earlier():
    a, b, c = (attempt(0, Verdict.CORRECT, custom=True, speedup=1.1),
               attempt(1, Verdict.CORRECT, custom=True, speedup=1.3),
               attempt(2, Verdict.CORRECT, custom=True, speedup=1.3))
    assert selection.select([a, b, c]) is b
    d, e = attempt(0, Verdict.WRONG_OUTPUT), attempt(1, Verdict.WRONG_OUTPUT)
    assert selection.select([d, e]) is d


def test_a_cheat_is_never_ranked_as_compiled_work():
    cheat = attempt(0, Verdict.CHEAT, custom=True, speedup=100.0)
    wrong = attempt(1, Verdict.WRONG_OUTPUT)
    assert selection.tier(cheat.eval) == 0
    assert selection.select([cheat, wrong]) is wrong


def test_goal_is_correct_custom_and_faster():
    assert selection.is_goal(attempt(0, Verdict.CORRECT, custom=True, speedup=1.5, faster=True).eval)
    assert not selection.is_goal(attempt(0, Verdict.CORRECT, custom=True, speedup=1.5, faster=False).eval)
    assert not selection.is_goal(attempt(0, Verdict.NO_CUSTOM_KERNEL, speedup=5.0, faster=True).eval)
