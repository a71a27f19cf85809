"""The live progress display of a regime's run, `optimize` and `run` (rich, on stderr): current
step, verdict counts, elapsed time and (optimize) budget left, refreshed four times a second; one
permanent line per event worth keeping (route, each verdict). Off a terminal (CI, a pipe) only the
permanent lines are printed. It reads the typed events of events.py; a study's display, which
shows cells rather than turns (many run at once), is cli/progress.py."""

from __future__ import annotations

import time
from collections import Counter
from typing import Any, Optional

from rich.console import Console, Group
from rich.live import Live
from rich.text import Text

from kernelwright.events import (
    Asking,
    Evaluating,
    Event,
    Generating,
    Judged,
    NoScaffold,
    Round,
    Routed,
    Searched,
    Step,
)
from kernelwright.llm.budget import Budget


def _clock(seconds: float) -> str:
    m, s = divmod(int(seconds), 60)
    return f"{m}:{s:02d}"


class Display:
    def __init__(self, console: Console, budget: Optional[Budget] = None) -> None:
        self.console, self.budget = console, budget
        self.started = time.monotonic()
        self.step = "checking the input"
        self.verdicts: Counter[str] = Counter()
        self.round = 0
        self.live: Optional[Live] = None

    def __enter__(self) -> "Display":
        if self.console.is_terminal:
            self.live = Live(console=self.console, get_renderable=self.render, refresh_per_second=4, transient=True)
            self.live.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.live is not None:
            self.live.__exit__(*exc)
            self.live = None

    def render(self) -> Group:
        counts = ", ".join(f"{v} {k}" for k, v in self.verdicts.most_common()) or "none yet"
        clock = f"  elapsed {_clock(self.elapsed())}"
        if self.budget is not None:
            clock += f" · budget left {_clock(self.budget.left())} of {self.budget.minutes:g} min · round {self.round + 1}"
        return Group(Text(f"▶ {self.step}", style="bold cyan"), Text(f"  verdicts: {counts}"), Text(clock, style="dim"))

    def elapsed(self) -> float:
        return self.budget.elapsed() if self.budget is not None else time.monotonic() - self.started

    def say(self, line: str) -> None:
        """A permanent line (above the live block on a terminal)."""
        # the line may quote the model's or a candidate's text: plain text, never markup
        self.console.print(Text.assemble((_clock(self.elapsed()), "dim"), " ", line), soft_wrap=True)

    def __call__(self, e: Event) -> None:
        if isinstance(e, Step):
            self.step = e.step
            self.say(e.step)
        elif isinstance(e, Round):
            self.round = e.round
            if e.round:
                self.say(f"round {e.round + 1}: no candidate reached the goal yet; sampling again with a new seed")
        elif isinstance(e, Routed):
            self.say(f"routed to {e.regime}: {e.reason}")
        elif isinstance(e, NoScaffold):
            self.say(f"no scaffold: {e.reason}")
        elif isinstance(e, Asking):
            self.step = f"turn {e.turn}: {e.role} (model)"
        elif isinstance(e, Generating):
            self.step = f"turn {e.turn}: generating {e.n} candidate(s)"
        elif isinstance(e, Evaluating):
            self.step = f"turn {e.turn}: candidate {e.sample + 1}/{e.n}: compiling, checking, timing"
        elif isinstance(e, Searched):
            checked = f", {e.passed} of {e.checked} passed the pre-check" if e.checked else ", no pre-check"
            if e.line:
                self.say(f"turn {e.turn}, line {e.line}: {e.drawn} sampled, {e.distinct} distinct{checked}")
            else:
                self.say(f"turn {e.turn}: {e.drawn} sampled, {e.distinct} distinct{checked}, building {e.to_build}")
        elif isinstance(e, Judged):
            self.verdicts[e.verdict] += 1
            speed = f" speedup {e.speedup:.3g}x" if e.speedup is not None else ""
            custom = "" if e.custom or e.verdict != "correct" else " (no custom code)"
            self.say(f"turn {e.turn} candidate {e.sample + 1}/{e.n}: {e.verdict}{speed}{custom}")
