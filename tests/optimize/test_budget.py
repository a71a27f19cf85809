"""The optimize budget reaches into generation: a backend that samples one at a time is handed the
deadline, and its short answer (1..n samples) passes the count check only with a deadline."""

from __future__ import annotations

import time

import pytest

from kernelwright.llm.base import BackendError, Completion, GenerationRequest, check_counts, generate_until
from kernelwright.llm.budget import Budget, BudgetedBackend, BudgetSpent


def _c(text: str) -> Completion:
    return Completion(text=text, finish_reason="stop", prompt_tokens=1, completion_tokens=1, latency_s=0.0)


class Sequential:
    """A test double that draws samples one by one, like llama.cpp, and stops at a deadline."""

    model = "double"
    stops_at_deadline = True

    def __init__(self) -> None:
        self.deadlines: list[float | None] = []

    def generate(self, requests, deadline=None):
        self.deadlines.append(deadline)
        stop = deadline is not None and time.monotonic() >= deadline
        results = [[_c(str(i)) for i in range(1 if stop else r.n)] for r in requests]
        check_counts(requests, results, "double", until_deadline=deadline is not None)
        return results


class Batched(Sequential):
    stops_at_deadline = False

    def generate(self, requests):  # no deadline parameter: a batch cannot be cut short
        return [[_c(str(i)) for i in range(r.n)] for r in requests]


def test_the_budget_hands_its_deadline_to_a_sequential_backend():
    inner, budget = Sequential(), Budget(1.0)
    got = BudgetedBackend(inner, budget).generate([GenerationRequest.chat("x", n=4)])
    assert len(got[0]) == 4 and inner.deadlines == [budget.deadline]


def test_a_sample_past_the_deadline_is_one_and_the_next_request_is_refused():
    inner = Sequential()
    assert [len(g) for g in generate_until(inner, [GenerationRequest.chat("x", n=4)], time.monotonic() - 1)] == [1]
    spent = Budget(1.0, started=time.monotonic() - 61)
    with pytest.raises(BudgetSpent):
        BudgetedBackend(inner, spent).generate([GenerationRequest.chat("x", n=4)])


def test_a_batched_backend_gets_no_deadline():
    assert [len(g) for g in generate_until(Batched(), [GenerationRequest.chat("x", n=3)], time.monotonic() - 1)] == [3]


def test_short_answers_pass_only_with_a_deadline():
    req = [GenerationRequest.chat("x", n=3)]
    check_counts(req, [[_c("a")]], "b", until_deadline=True)
    with pytest.raises(BackendError):
        check_counts(req, [[_c("a")]], "b")
    with pytest.raises(BackendError):
        check_counts(req, [[]], "b", until_deadline=True)


def test_the_search_leaves_time_for_torch_compile_as_slow_as_it_was_here():
    from kernelwright.optimize.runner import CLOSING_FIXED_S, CLOSING_S, closing_s
    from kernelwright.optimize.types import Baseline

    five = Budget(5.0)
    assert closing_s(five, Baseline()) == CLOSING_S  # no compile time measured: the default
    assert closing_s(five, Baseline(compile_s=4.0)) == CLOSING_S  # a fast compile (CPU) changes nothing
    assert closing_s(five, Baseline(compile_s=25.0)) == CLOSING_FIXED_S + 25.0
    assert closing_s(five, Baseline(compile_s=400.0)) == 50.0  # a sixth of the budget at most
    assert closing_s(Budget(1.0), Baseline()) == 10.0
