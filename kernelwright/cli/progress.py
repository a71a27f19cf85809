"""The live display of a study run: cells done/total, candidates evaluated, verdict counts, ETA."""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any

from rich.console import Console
from rich.text import Text
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from kernelwright.events import AttemptDone, CellDone, CellSkipped, Event, ExecutorReady


class StudyProgress:
    """Feed it the runner's events. On a terminal it draws a live bar; elsewhere (CI logs, tests)
    it prints one line per finished cell, which is what a log reader wants."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.live = console.is_terminal
        self.candidates = 0
        self.verdicts: Counter = Counter()
        self._lock = threading.Lock()
        self.progress = Progress(TextColumn("[bold]cells"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.description}"),
                                 TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(), console=console,
                                 disable=not self.live)
        self._bar: Any | None = None
        self.total = 0

    def start(self, total: int) -> None:
        self.total = total
        self._bar = self.progress.add_task("", total=total)
        self.progress.start()

    def stop(self) -> None:
        self.progress.stop()

    def _describe(self) -> str:
        counts = " ".join(f"{k}:{v}" for k, v in sorted(self.verdicts.items()))
        return f"{self.candidates} candidates  {counts}"

    def __call__(self, e: Event) -> None:
        with self._lock:
            if isinstance(e, AttemptDone):
                self.candidates += 1
                self.verdicts[e.verdict] += 1
            elif isinstance(e, CellDone):
                cell = e.cell
                if self._bar is not None:
                    self.progress.advance(self._bar)
                if not self.live:
                    done = int(self.progress.tasks[0].completed) if self.progress.tasks else 0
                    what = cell.verdict.value if getattr(cell, "status", "ok") == "ok" else f"FAILED ({cell.failure})"
                    # plain text: a failure quotes what failed, a candidate's words among it
                    self.console.print(Text(f"[{done}/{self.total}] {cell.regime} {cell.task_id} seed {cell.seed}: "
                                            f"{what}"), soft_wrap=True)
            elif isinstance(e, CellSkipped):
                self.console.print(Text(f"left pending: {e.key}: {e.why}"), soft_wrap=True)
            elif isinstance(e, ExecutorReady):
                self.console.print(e.layout, highlight=False, soft_wrap=True)
            if self._bar is not None:
                self.progress.update(self._bar, description=self._describe())
