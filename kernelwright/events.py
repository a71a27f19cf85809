"""What a running regime, study or optimize run reports as it goes: one typed record per event.

The stages emit them (strategies, study/runner.py, optimize/runner.py) through a callable they are
given; the displays (cli/display.py, cli/progress.py) read them. Nothing here is stored: the
records on disk are the attempts and cells; these only say what is happening now.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Optional, Union

from kernelwright.records import Cell

# -- within a regime (strategies/) ------------------------------------------------------------------

@dataclass(frozen=True)
class NoScaffold:
    reason: str  # why the task has no region (whole programs are asked for instead)


@dataclass(frozen=True)
class Routed:
    regime: str
    reason: str


@dataclass(frozen=True)
class Asking:
    role: str  # analyzer, researcher, feedback analyzer
    turn: int


@dataclass(frozen=True)
class Generating:
    turn: int
    n: int


@dataclass(frozen=True)
class Searched:
    """One search turn's samples, before any build."""

    turn: int
    drawn: int
    distinct: int
    checked: int  # pre-checked
    passed: int  # passed the pre-check
    to_build: int
    line: str = ""  # search a line at a time: which line ("2 of 3"); "" for the whole region


@dataclass(frozen=True)
class Evaluating:
    turn: int
    sample: int
    n: int


@dataclass(frozen=True)
class Judged:
    turn: int
    sample: int
    n: int
    verdict: str
    speedup: Optional[float]
    custom: bool


# -- around regimes (optimize/runner.py) ------------------------------------------------------------

@dataclass(frozen=True)
class Step:
    step: str  # "profiling the reference", "timing eager and torch.compile", ...


@dataclass(frozen=True)
class Round:
    round: int  # 0-based


# -- a study's cells (study/runner.py) --------------------------------------------------------------

@dataclass(frozen=True)
class CellStarted:
    key: str
    regime: str
    task: str


@dataclass(frozen=True)
class AttemptDone:
    key: str
    verdict: str


@dataclass(frozen=True)
class CellSkipped:
    key: str
    why: str  # left pending: the model server or the GPU went away


@dataclass(frozen=True)
class CellDone:
    key: str
    cell: Cell  # the study's StudyCell


@dataclass(frozen=True)
class ExecutorReady:
    layout: str  # where evaluations run, in one line (a Ray cluster's nodes, CPUs and GPUs)


Event = Union[NoScaffold, Routed, Asking, Generating, Searched, Evaluating, Judged, Step, Round, CellStarted,
              AttemptDone, CellSkipped, CellDone, ExecutorReady]
EventFn = Callable[[Event], None]
