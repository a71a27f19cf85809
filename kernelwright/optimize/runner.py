"""One `optimize` run: profile, time the baselines, search within the budget, keep the best.

profile (analysis: graph shape for routing, roofline floor for the report)
  -> baseline (eager and torch.compile, child process)
  -> rounds of the regime (strategies/defaults.py: search unless asked) until a candidate is the goal — correct, custom
     code ran, faster beyond noise — or the budget or the round limit is reached
  -> the ranking key's pick over every attempt of every round (strategies/selection.py)
  -> output folder: model_new.py, report.md, report.html, summary.json, and the records of a
     one-task study (manifest.json, attempts.jsonl, cells.jsonl: `study report` reads them)

A round is one full regime run. Later rounds change the seed and sample at temperature 0.7 so a
greedy regime (guided) does not repeat its first answer.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Optional

from kernelwright.errors import EXIT_BAD_INPUT, EXIT_FASTER, EXIT_GPU_GONE, EXIT_INTERRUPTED, EXIT_NOT_FASTER
from kernelwright.evaluate import EvalRun, EvaluatorError, GPUUnavailableError
from kernelwright.events import Event, Round, Routed, Step
from kernelwright.executors.base import make_executor, opened
from kernelwright.llm.base import Backend, BackendError, first_line
from kernelwright.llm.budget import Budget, BudgetedBackend, BudgetSpent
from kernelwright.measure.timing import compile_misbehaves
from kernelwright.optimize import baseline as baseline_mod
from kernelwright.optimize.inputs import InputError, eval_run
from kernelwright.optimize.types import Baseline, Options, Outcome
from kernelwright.prompts.facts import PromptFacts
from kernelwright.records import Attempt, Task
from kernelwright.strategies import parse_regime, run_regime, selection
from kernelwright.strategies.base import ProgressFn
from kernelwright.study.cell_log import CellLog
from kernelwright.study.log import ATTEMPTS, CELLS, MANIFEST

LATER_ROUND_TEMPERATURE = 0.7
MIN_BASELINE_S = 30.0
# The budget's end kept for timing torch.compile beside the kept candidate (_beside_compile): an
# evaluation's fixed cost plus torch.compile's own, which the baselines measured (Baseline.compile_s).
# CPU: the evaluation took 10-15 s; on an H100, a 4096 x 4096 GEMM module: 33 s.
CLOSING_S = 30.0
CLOSING_FIXED_S = 15.0
logger = logging.getLogger(__name__)
OUTPUT_FILES = ("model_new.py", "report.md", "report.html", "summary.json", ATTEMPTS, CELLS, MANIFEST)

def _facts(task: Task, analysis, facts_path: Optional[Path]) -> PromptFacts:
    """The facts the prompts show. A stored file wins (a replayed run must see the recorded
    profile times byte for byte); a missing one is written, which is how it gets recorded."""
    if facts_path is not None and facts_path.is_file():
        return PromptFacts.load(facts_path)
    facts = PromptFacts.from_analysis(analysis)
    if facts_path is not None:
        facts.save(facts_path)
    return facts

def optimize(task: Task, opts: Options, backend: Backend, out_dir: Path, budget: Budget, *,
             outputs: Optional[list[str]] = None, progress: ProgressFn = lambda e: None,
             facts_path: Optional[Path] = None) -> tuple[Outcome, list[Attempt]]:
    for name in OUTPUT_FILES:  # a kept candidate from an earlier run must not pass for this run's
        (out_dir / name).unlink(missing_ok=True)
    outcome = Outcome(task_id=task.id, source_path=task.path or task.id, options=opts, model=backend.model,
                      outputs=outputs or [], size=task.sizing.summary() if task.sizing else None)
    analysis, facts = _profile(task, opts, outcome, facts_path, progress)
    outcome.baseline = _baselines(task, opts, budget, progress)

    attempts: list[Attempt] = []
    run = eval_run(opts)
    # the search ends early enough to time torch.compile beside the kept candidate (_beside_compile)
    search = budget.less(closing_s(budget, outcome.baseline))
    # every round is a cell of a one-task study folder (study/cell_log.py): `study report` reads it
    log = CellLog(out_dir, task, backend.model, opts.device, run.config, model_spec=opts.model, kind="optimize",
                  executor=opts.executor)
    try:
        _rounds(task, opts, BudgetedBackend(backend, search), search, run, log, facts, outcome, attempts,
                progress)
    except GPUUnavailableError as e:
        outcome.stopped, outcome.error, outcome.exit_code = "error", str(e), EXIT_GPU_GONE
    except (BackendError, EvaluatorError) as e:
        outcome.stopped, outcome.error, outcome.exit_code = "error", first_line(e), EXIT_BAD_INPUT
    except KeyboardInterrupt:
        outcome.stopped, outcome.exit_code = "interrupted", EXIT_INTERRUPTED

    beside = None
    if outcome.exit_code in (EXIT_FASTER, EXIT_NOT_FASTER):
        try:
            beside = _beside_compile(task, attempts, run, budget, progress)
        except GPUUnavailableError as e:  # the kept candidate was verified before: it is still kept
            outcome.stopped, outcome.error, outcome.exit_code = "error", str(e), EXIT_GPU_GONE
        except KeyboardInterrupt:
            outcome.stopped, outcome.exit_code = "interrupted", EXIT_INTERRUPTED
    _settle(outcome, attempts, analysis, beside)
    outcome.wall_s = round(budget.elapsed(), 1)
    return outcome, attempts  # the caller writes the report (report.optimize_report.write)


def _profile(task: Task, opts: Options, outcome: Outcome, facts_path: Optional[Path], progress: ProgressFn):
    """The reference profiled (graph shape, roofline) and the facts the prompts show; the outcome
    keeps what the report says of them."""
    from kernelwright.analysis import AnalysisError, analyze

    progress(Step("profiling the reference"))
    try:
        analysis = analyze(task, device=opts.device, size=opts.size)
    except AnalysisError as e:
        raise InputError(f"{task.path}: profiling the reference failed: {e}") from None
    facts = _facts(task, analysis, facts_path)
    outcome.shape = facts.shape
    if analysis.roofline_local:
        outcome.roofline_floor_ms = analysis.roofline.floor_ms
    outcome.roofline_line = facts.roofline_line
    return analysis, facts


def _baselines(task: Task, opts: Options, budget: Budget, progress: ProgressFn) -> Baseline:
    """Eager and torch.compile timed in one child, unless the budget is nearly spent already (the
    budget bounds wall time, the baselines included)."""
    if budget.left() <= MIN_BASELINE_S:
        return Baseline(error="skipped: the budget was spent before the baselines")
    progress(Step("timing eager and torch.compile"))
    return baseline_mod.measure(task, opts.device, opts.iters,
                                timeout=max(MIN_BASELINE_S, min(opts.baseline_timeout, budget.left())), size=opts.size)


def _rounds(task: Task, opts: Options, model: Backend, search: Budget, run: EvalRun, log: CellLog, facts: PromptFacts,
            outcome: Outcome, attempts: list[Attempt], progress: ProgressFn) -> None:
    """Rounds of the regime, each a cell of `log`, until a goal candidate, the round limit or the
    search's budget; every attempt lands in `attempts` as it is made. Errors other than a spent
    budget propagate: the caller records them on the outcome."""
    def watch(e: Event) -> None:
        if isinstance(e, Routed):
            outcome.route = f"{e.regime}: {e.reason}"
        progress(e)

    with log.open(_round_config(opts, 0)), opened(make_executor(opts.executor, [opts.device])) as executor:
        try:
            while True:
                if search.spent():
                    outcome.stopped = "budget"
                    return
                r = outcome.rounds
                progress(Round(r))
                config = _round_config(opts, r)
                cell = log.cell(config)
                outcome.rounds += 1

                def sink(a: Attempt, cell=cell) -> None:
                    attempts.append(a)
                    cell.sink(a)  # one fsynced line per attempt: an interrupted run keeps what it did

                run_regime(task, model, config, run, sink=sink, progress=watch,
                           analysis_provider=lambda t: facts, config_hash=cell.config_hash, cell_sink=cell.finish,
                           executor=executor)
                if any(selection.is_goal(a.eval) for a in attempts):
                    outcome.stopped = "goal"
                    return
                if opts.rounds and outcome.rounds >= opts.rounds:
                    outcome.stopped = "rounds"
                    return
        except BudgetSpent:  # the normal end of a budgeted run, not an error of the invocation
            outcome.stopped = "budget"


def closing_s(budget: Budget, baseline: Baseline) -> float:
    """Seconds the search leaves for the evaluation beside torch.compile: CLOSING_S, or more where
    torch.compile itself took long here (its compile time and an evaluation's fixed cost), never
    more than a sixth of the budget."""
    need = max(CLOSING_S, CLOSING_FIXED_S + (baseline.compile_s or 0.0))
    return min(need, 60.0 * budget.minutes / 6)


def _round_config(opts: Options, r: int):
    """Round r: the regime with seed + r; later rounds sample hotter (a retry that repeats the first
    round's answers gains nothing)."""
    return parse_regime(opts.regime, target=opts.target, seed=opts.seed + r, max_tokens=opts.max_tokens,
                        scaffold=opts.scaffold,
                        **({"n": opts.samples} if opts.samples is not None else {}),
                        **({"turns": opts.turns} if opts.turns is not None else {}),
                        **({"temperature": LATER_ROUND_TEMPERATURE} if r else {}))


def _beside_compile(task: Task, attempts: list[Attempt], run: EvalRun, budget: Budget, progress: ProgressFn):
    """The kept candidate evaluated once more with torch.compile(reference) timed beside it by the
    judge, under the evaluator's own protocol (cold caches, fresh inputs, copies in and out): the
    ratio a user would see. Chaining the baselines' torch.compile / eager (one warm process) with the
    judge's speedup mixes two protocols: on the CPU a memory-bound kernel 20x eager in a warm process
    (0.17 ms, torch.compile 0.36) was reported at 0.2x torch.compile. None where
    nothing correct was kept, the run is not timed, or the budget is spent (the search leaves it
    closing_s: CLOSING_S or torch.compile's own time and more, a sixth of a short budget at most)."""
    from kernelwright.evaluate import evaluate

    best = selection.select(attempts)
    code = (best.repaired_code or best.code) if best is not None else None
    if code is None or selection.tier(best.eval) < 2 or not run.config.time or budget.spent():
        return None
    progress(Step("timing the kept candidate beside torch.compile"))
    try:
        return evaluate(task, code, run.but(compile_baseline=True, second_shape=False))
    except GPUUnavailableError:
        raise
    except EvaluatorError as e:  # the chained ratio stands; the report says which
        logger.warning("timing the kept candidate beside torch.compile failed: %s", first_line(e))
        return None


def _settle(outcome: Outcome, attempts: list[Attempt], analysis, beside=None) -> None:
    """The pick, its numbers, and the exit code (unless an error already decided it)."""
    outcome.attempts = len(attempts)
    outcome.completion_tokens = sum(a.usage.completion_tokens for a in attempts)
    best = selection.select(attempts)
    if best is not None and selection.tier(best.eval) >= 2:  # only a candidate whose outputs matched is kept
        r = best.eval
        outcome.kept_id, outcome.kept_label = best.id, selection.TIERS[selection.tier(r)]
        outcome.goal = selection.is_goal(r)
        outcome.speedup_vs_eager = r.speedup
        outcome.generalises, outcome.generalises_note = r.generalises, r.generalises_note
        b = outcome.baseline
        if beside is not None and beside.correct and beside.compile_runtime_ms and beside.runtime_ms:
            outcome.speedup_vs_compile = beside.compile_runtime_ms / beside.runtime_ms
            outcome.vs_compile_by = "judge"
            outcome.beside_ms = (beside.compile_runtime_ms, beside.runtime_ms)
            outcome.vs_compile_caveat = beside.compile_baseline_suspect
        elif r.speedup is not None and b.eager is not None and b.compiled is not None:
            # Two paired ratios chained: torch.compile vs eager (one process), kernel vs eager (the
            # evaluator's process). Robust to the load of a shared machine drifting between them.
            outcome.speedup_vs_compile = b.compiled.median_ms / b.eager.median_ms * r.speedup
            outcome.vs_compile_by = "chained"
            outcome.vs_compile_caveat = compile_misbehaves(b.eager.median_ms, b.compiled.median_ms) or (
                "chained, not timed beside the kept candidate: (torch.compile / eager in a warm process) x "
                "(the kept candidate / eager in the evaluator)")
        if r.runtime_ms is not None and outcome.roofline_floor_ms is not None:
            outcome.fraction_of_floor = analysis.roofline.fraction_of_floor(r.runtime_ms)
    if outcome.exit_code in (EXIT_FASTER, EXIT_NOT_FASTER):
        outcome.exit_code = EXIT_FASTER if outcome.goal else EXIT_NOT_FASTER
