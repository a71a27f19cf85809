"""The table of the benchmarks that sample the same prompts under several arms (grammar_yield.py,
view_yield.py): a row per task and arm, printed as it comes, then the table with each arm's totals.
Each benchmark says what its cells are (counts and per-answer figures from a Counter and seconds)."""

from __future__ import annotations

from collections import Counter
from typing import Callable


class ArmTable:
    def __init__(self, columns: tuple[str, ...], cells: Callable[[Counter, float], list[str]]):
        self.columns, self.cells = columns, cells
        self.lines: list[str] = []
        self.totals: dict[str, Counter] = {}
        self.seconds: dict[str, float] = {}

    def add(self, name: str, arm: str, counts: Counter, seconds: float) -> None:
        self.totals.setdefault(arm, Counter()).update(counts)
        self.seconds[arm] = self.seconds.get(arm, 0.0) + seconds
        self.lines.append(self._row(f"{name} {arm}", counts, seconds))
        print(self.lines[-1], flush=True)

    def _row(self, name: str, counts: Counter, seconds: float) -> str:
        return f"| {name} | " + " | ".join(self.cells(counts, seconds)) + " |"

    def render(self) -> str:
        head = ["| task, arm | " + " | ".join(self.columns) + " |", "|---|" + "---|" * len(self.columns)]
        totals = [self._row(f"**all, {arm}**", c, self.seconds[arm]) for arm, c in self.totals.items()]
        return "\n".join(head + self.lines + totals)
