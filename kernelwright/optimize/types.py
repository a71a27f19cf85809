"""Typed records of one `optimize` run: what was asked, the baselines, and what came out."""

from __future__ import annotations

from typing import Optional

from pydantic import BaseModel

from kernelwright.errors import EXIT_NOT_FASTER
from kernelwright.evaluate.config import EVAL_DEFAULTS
from kernelwright.records import TimingStats
from kernelwright.strategies.defaults import DEFAULT_REGIME

# The exit codes live in kernelwright/errors.py; what they mean for optimize:
# 0 kept a verified custom kernel faster than the reference beyond noise; 2 bad input, caught
# before any generation, or the model stopped answering; 3 the GPU stopped answering after a
# candidate; 4 nothing verified beats the reference (the best correct candidate, if any, is kept).


class Options(BaseModel):
    """The run's settings, resolved (device and target chosen, defaults filled in)."""

    regime: str = DEFAULT_REGIME
    model: Optional[str] = None  # None: the embedded default model
    device: str = "cpu"
    target: str = "cpp"
    budget_minutes: float = 10.0
    samples: Optional[int] = None  # per generation step; None: the regime's default
    turns: Optional[int] = None  # per round; None: the regime's default
    rounds: int = 0  # 0: new rounds (fresh seed, sampled) while the budget lasts
    seed: int = 0
    max_tokens: int = 1024
    scaffold: bool = True
    eval_timeout: float = EVAL_DEFAULTS.timeout
    iters: int = EVAL_DEFAULTS.iters
    time: bool = True  # off only in tests whose replayed prompts must not depend on timings
    baseline_timeout: float = 300.0
    executor: str = "direct"  # where candidates are evaluated (executors/): direct, local (the pool) or ray
    size: str = EVAL_DEFAULTS.size  # the problem size (tasks/sizing.py); the task arrives sized to it


class Baseline(BaseModel):
    """Eager and torch.compile timed in one child with the evaluator's protocol."""

    eager: Optional[TimingStats] = None
    compiled: Optional[TimingStats] = None
    compile_s: Optional[float] = None  # how long torch.compile took to produce the first result
    compile_error: Optional[str] = None  # torch.compile failed here: said in the report
    error: Optional[str] = None  # the baseline process itself failed or ran out of time


class Outcome(BaseModel):
    """Everything the report says, apart from the attempts themselves (attempts.jsonl)."""

    task_id: str
    source_path: str
    options: Options
    model: str
    outputs: list[str] = []
    shape: Optional[str] = None
    route: Optional[str] = None
    roofline_floor_ms: Optional[float] = None
    roofline_line: Optional[str] = None
    baseline: Baseline = Baseline()
    attempts: int = 0
    rounds: int = 0
    kept_id: Optional[str] = None
    kept_label: Optional[str] = None  # the ranking key's tier, in words
    goal: bool = False  # correct, custom kernel, faster beyond noise
    speedup_vs_eager: Optional[float] = None
    speedup_vs_compile: Optional[float] = None
    # how: "judge" (torch.compile timed beside the kept candidate by the evaluator, one protocol) or
    # "chained" (the baselines' torch.compile / eager x the judge's speedup vs eager)
    vs_compile_by: str = ""
    # why the ratio against torch.compile is no headline: the baseline misbehaved (more than 2x
    # slower than eager) or was only chained, not timed beside the kept candidate; None: it is one
    vs_compile_caveat: Optional[str] = None
    beside_ms: Optional[tuple[float, float]] = None  # judge: (torch.compile, the kept candidate) medians, ms
    fraction_of_floor: Optional[float] = None
    size: Optional[str] = None  # the problem run, in one line (records.Sizing.summary); None: not sized
    # the kept candidate checked at the task's second shape (EvalResult.generalises); None: not checked
    generalises: Optional[bool] = None
    generalises_note: Optional[str] = None
    stopped: str = ""  # goal | budget | rounds | interrupted | error
    error: Optional[str] = None
    completion_tokens: int = 0
    wall_s: float = 0.0
    exit_code: int = EXIT_NOT_FASTER
