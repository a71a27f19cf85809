"""The table of the benchmarks that sample the same prompts under several arms (grammar_yield.py,
view_yield.py, line_yield.py): a row per task and arm, printed as it comes, then the table with each
arm's totals. Each benchmark says what its cells are (counts and per-answer figures from a Counter
and seconds). With it, the options those benchmarks share (`arm_args`)."""

from __future__ import annotations

import argparse
from collections import Counter
from pathlib import Path
from typing import Callable


def arm_args(description: str, targets: tuple[str, ...], max_tokens: int, tasks_help: str, arms: str,
             arms_help: str = "") -> argparse.ArgumentParser:
    """The options of a benchmark that samples the embedded model under arms; callers add their own."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--target", choices=targets, required=True)
    ap.add_argument("--n", type=int, default=4)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-tokens", type=int, default=max_tokens)
    ap.add_argument("--model", default="gguf:qwen2.5-coder-1.5b")
    ap.add_argument("--tasks", default="", help=f"comma-separated task ids (default: {tasks_help})")
    ap.add_argument("--arms", default=arms, help=arms_help or None)
    ap.add_argument("--out", type=Path, default=None, help="also write every answer here (JSONL)")
    return ap


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
