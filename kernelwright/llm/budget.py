"""A wall-clock budget (one `optimize` run's, one study cell's), and the backend wrapper that
enforces it.

The regimes already stop early per turn once a candidate is the goal; what they do not know is
the clock. Rather than thread a deadline through every regime, the model is wrapped: a request
made after the deadline raises BudgetSpent instead of generating, which ends the regime where it
stands, and a backend that draws its samples one after another (llama.cpp) starts no new sample
once the deadline passes: the request returns the samples drawn so far. Every attempt already made
has reached the runner's sink, so nothing is lost. Work in flight when the deadline passes (one
sample, one evaluation) finishes: both are bounded, by the decoding budget and the evaluator's
timeout.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from kernelwright.llm.base import Backend, Completion, GenerationRequest, generate_until


CLOCK = "clock"  # the label of a study cell's clock (StudySpec.cell_minutes); the report counts its stops


class BudgetSpent(Exception):
    """The wall-clock budget ran out before a model request (the message says which budget)."""


@dataclass
class Budget:
    minutes: float
    started: float = field(default_factory=time.monotonic)
    label: str = "budget"  # whose: "budget" (optimize's), CLOCK (a study cell's)

    @property
    def deadline(self) -> float:
        return self.started + 60.0 * self.minutes

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def left(self) -> float:
        return max(0.0, self.deadline - time.monotonic())

    def spent(self) -> bool:
        return time.monotonic() >= self.deadline

    @property
    def spent_text(self) -> str:
        """What a run cut short by this budget records as why (Cell.stopped): "clock of 12 min spent"."""
        return f"{self.label} of {self.minutes:g} min spent"

    def less(self, seconds: float) -> "Budget":
        """The same clock, ending `seconds` earlier (never before it started)."""
        return Budget(max(0.0, self.minutes - seconds / 60.0), started=self.started, label=self.label)


class BudgetedBackend:
    """A backend that refuses to start a generation once the budget is spent."""

    def __init__(self, inner: Backend, budget: Budget) -> None:
        self.inner, self.budget = inner, budget
        self.model = inner.model  # the config hash and the replay key use the inner model's name

    def generate(self, requests: Sequence[GenerationRequest]) -> list[list[Completion]]:
        if self.budget.spent():
            raise BudgetSpent(self.budget.spent_text)
        # a backend that samples one at a time stops at the deadline with what it has drawn
        return generate_until(self.inner, requests, self.budget.deadline)
