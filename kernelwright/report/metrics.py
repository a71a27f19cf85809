"""The numbers of the report, computed from cells and attempts only (no re-running anything).

A *cell* (regime x task x seed) is scored by its pick, the attempt the ranking key selected. A
failed cell (task did not load, worker died, problem without a task) stays in every denominator
and counts as a failure: nothing is dropped to make a rate look better.

- compile:  the pick built and imported (its verdict is one only reachable after building);
- correct:  outputs match (correct or no_custom_kernel);
- correct with custom kernel: verdict `correct` (custom compiled code provably ran);
- fast_1:   correct with a custom kernel *and* faster beyond noise (the candidate's p75 below the
            reference's p25). A tie is not a win. When a correct pick carries no timing, fast_1 is
            n/a rather than a silent 0;
- geomean speedup: over correct-with-custom-kernel picks that were timed.
"""

from __future__ import annotations

import math
import statistics
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from kernelwright.records import EvalResult, Verdict
from kernelwright.strategies.config import REGIME_NAMES, RegimeError, parse_regime
from kernelwright.study.log import StudyData
from kernelwright.study.records import StudyAttempt, StudyCell


@dataclass
class Scored:
    """One cell with its pick, as every table sees it."""

    cell: StudyCell
    group: str  # the row label: the regime spec, plus the model where a report mixes models
    pick: StudyAttempt | None
    attempts: list[StudyAttempt]

    @property
    def ok(self) -> bool:
        return self.cell.status == "ok"

    @property
    def result(self) -> EvalResult | None:
        return self.pick.eval if (self.ok and self.pick is not None) else None

    @property
    def verdict_label(self) -> str:
        return self.cell.verdict.value if self.ok else "cell_failed"

    @property
    def compiled(self) -> bool:
        r = self.result
        return r is not None and r.verdict.built

    @property
    def correct(self) -> bool:
        r = self.result
        return r is not None and r.verdict.outputs_match

    @property
    def custom_correct(self) -> bool:
        r = self.result
        return r is not None and r.verdict == Verdict.CORRECT and r.custom_kernel

    @property
    def timed(self) -> bool:
        r = self.result
        return r is not None and r.speedup is not None

    @property
    def fast(self) -> bool:
        r = self.result
        return self.custom_correct and r is not None and r.faster

    @property
    def compile_timed(self) -> bool:
        r = self.result
        return r is not None and r.faster_than_compile is not None

    @property
    def fast_vs_compile(self) -> bool:
        """fast_1 and faster than torch.compile too; where torch.compile misbehaved (more than 2x
        slower than eager beside it: the record's compile_baseline_suspect) the better baseline a
        user would run is eager, so fast_1 alone decides and a slow compile earns nothing."""
        r = self.result
        if r is not None and r.compile_baseline_suspect:
            return self.fast
        return self.fast and r is not None and bool(r.faster_than_compile)


@dataclass
class GroupStats:
    group: str
    cells: int
    compiled: int
    correct: int
    custom_correct: int
    fast: int
    untimed_custom_correct: int  # correct picks without a timing: fast_1 cannot be stated
    fast_vs_compile: int = 0
    uncompiled_custom_correct: int = 0  # correct picks without a torch.compile timing
    speedups: list[float] = field(default_factory=list)
    # share of one forward's time inside custom code, per correct-with-custom pick that measured it
    shares: list[float] = field(default_factory=list)

    @property
    def custom_majority(self) -> int:
        """Correct picks with a custom kernel that does most of the work (a share above one half):
        a fused ReLU after a network of library convolutions counts plainly, not here."""
        return sum(1 for x in self.shares if x > 0.5)

    @property
    def median_share(self) -> float | None:
        return statistics.median(self.shares) if self.shares else None

    def pct(self, k: int) -> float | None:
        return 100.0 * k / self.cells if self.cells else None

    @property
    def fast_pct(self) -> float | None:
        return None if self.untimed_custom_correct else self.pct(self.fast)

    @property
    def fast_vs_compile_pct(self) -> float | None:
        """fast_1 against torch.compile; None when a correct pick has no torch.compile timing
        (study run without --compile-baseline, or the compile failed on that machine)."""
        return None if self.uncompiled_custom_correct or not self.cells else self.pct(self.fast_vs_compile)

    @property
    def geomean(self) -> float | None:
        return geomean(self.speedups)


def geomean(xs: Iterable[float]) -> float | None:
    xs = [x for x in xs if x and x > 0]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


def stats(group: str, scored: list[Scored]) -> GroupStats:
    return GroupStats(
        group=group, cells=len(scored), compiled=sum(s.compiled for s in scored),
        correct=sum(s.correct for s in scored), custom_correct=sum(s.custom_correct for s in scored),
        fast=sum(s.fast for s in scored),
        untimed_custom_correct=sum(s.custom_correct and not s.timed for s in scored),
        fast_vs_compile=sum(s.fast_vs_compile for s in scored),
        uncompiled_custom_correct=sum(s.custom_correct and not s.compile_timed for s in scored),
        speedups=[s.result.speedup for s in scored if s.custom_correct and s.timed],  # type: ignore[union-attr,misc]
        shares=[s.result.custom_share for s in scored  # type: ignore[union-attr,misc]
                if s.custom_correct and s.result.custom_share is not None],  # type: ignore[union-attr]
    )  # fmt: skip


def regime_order(spec: str) -> tuple:
    """Our regimes in their canonical order, each base before its ablations, imports last."""
    base = spec.split("+")[0].split(" ")[0]
    rank = REGIME_NAMES.index(base) if base in REGIME_NAMES else len(REGIME_NAMES)
    return (rank, spec.count("+"), spec)


def score(data: StudyData) -> list[Scored]:
    models = {c.model for c in data.cells if not c.imported}  # imported cells are named by their label
    out = []
    for c in data.cells:
        group = c.regime if len(models) <= 1 or c.imported else f"{c.regime} · {c.model}"
        out.append(Scored(cell=c, group=group, pick=data.selected(c), attempts=data.attempts_of(c)))
    out.sort(key=lambda s: (regime_order(s.group), s.cell.level if s.cell.level is not None else 99, s.cell.task_id,
                            s.cell.seed))
    return out


def groups(scored: list[Scored]) -> dict[str, list[Scored]]:
    out: dict[str, list[Scored]] = {}
    for s in scored:
        out.setdefault(s.group, []).append(s)
    return out


def baseline_of(spec: str) -> str | None:
    """The full regime an ablation is compared with: the same regime and settings without the
    ablation flags; a spec with only settings (n=, turns=) compares with the plain regime."""
    head = spec.split(" · ")[0]
    suffix = spec[len(head):]
    try:
        cfg = parse_regime(head)
    except RegimeError:
        return None
    if cfg.ablations:
        return cfg.model_copy(update={"ablations": ()}).spec + suffix
    if cfg.n is not None or cfg.turns is not None:
        return cfg.name + suffix
    return None


# -- best-of-n -------------------------------------------------------------------------------------


def pass_at_k(n: int, c: int, k: int) -> float:
    """The unbiased pass@k estimate from n samples of which c pass (Chen et al. 2021)."""
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def best_of_n(scored: list[Scored]) -> dict[str, dict[str, list[tuple[int, float]]]]:
    """group -> {"correct": [(k, rate)], "compile": [...]}, from each cell's first-turn samples:
    the chance that at least one of k samples drawn from them is correct (compiles), averaged
    over all cells. A cell with fewer than k samples contributes its best over all it has (so
    every cell stays in every point and the curve never drops); a failed cell counts as 0."""
    out: dict[str, dict[str, list[tuple[int, float]]]] = {}
    for group, items in groups(scored).items():
        first = [[a for a in s.attempts if a.turn == 0] if s.ok else [] for s in items]
        kmax = max((len(f) for f in first), default=0)
        if kmax == 0:
            continue
        curves: dict[str, list[tuple[int, float]]] = {"correct": [], "compile": []}
        for k in range(1, kmax + 1):
            for name, test in (("correct", lambda e: e.verdict == Verdict.CORRECT and e.custom_kernel),
                               ("compile", lambda e: e.verdict.built)):
                rates = [pass_at_k(len(f), sum(bool(test(a.eval)) for a in f), min(k, len(f))) if f else 0.0
                         for f in first]
                curves[name].append((k, sum(rates) / len(rates)))
        out[group] = curves
    return out


# -- roofline -------------------------------------------------------------------------------------

_FLOOR = re.compile(r"floor ([0-9.eE+-]+) ms on (\S+)")


def roofline_floor(folders: list[Path], task_id: str) -> tuple[float, str] | None:
    """(floor ms, device name) from the task facts a study stored in FOLDER/facts."""
    from kernelwright.prompts.facts import PromptFacts, facts_file

    name = facts_file(task_id)
    for folder in reversed(folders):
        path = folder / "facts" / name
        if path.is_file():
            facts = PromptFacts.load(path)
            m = _FLOOR.search(facts.roofline_line)
            if m:
                return float(m.group(1)), facts.device_name
    return None


def roofline_fraction(floor: tuple[float, str] | None, r: EvalResult | None) -> tuple[float | None, str]:
    """floor / measured runtime (1.0 = at the floor), or None with the reason."""
    if floor is None:
        return None, "no roofline facts recorded for this task"
    if r is None or r.runtime_ms is None:
        return None, "kept kernel not timed"
    floor_ms, where = floor
    if (where == "cpu") != (r.device == "cpu"):
        return None, f"floor computed for {where}, timed on {r.device}"
    return floor_ms / r.runtime_ms, ""
