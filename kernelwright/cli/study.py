"""`kernelwright study run|import|report|export`: the study sub-commands (typer).

Exit codes follow the main CLI: 0 done (whatever the verdicts), 2 bad input, 3 GPUs gone with
cells left pending (rerun the same command to finish them).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from kernelwright.cli.console import Commands

study_app = typer.Typer(add_completion=False, no_args_is_help=True, cls=Commands,
                        help="Run a study matrix, re-score other tools' output, write the report and training data.")
from kernelwright.cli.console import err, fail, out
from kernelwright.errors import EXIT_BAD_INPUT, EXIT_GPU_GONE
from kernelwright.evaluate.config import EVAL_DEFAULTS
from kernelwright.strategies.defaults import DEFAULT_REGIME


def _split(values: list[str] | None) -> list[str] | None:
    """Repeated flags and comma-separated lists both work (regime specs never contain commas)."""
    if not values:
        return None
    return [p.strip() for v in values for p in v.split(",") if p.strip()]


def _summary_line(s) -> str:
    verdicts = ", ".join(f"{k} {v}" for k, v in sorted(s.verdicts.items()))
    return (f"{s.planned} cell(s) planned, {s.skipped} already done, {s.done} run now ({s.failed} failed), "
            f"{s.attempts} candidate(s) evaluated" + (f"; cell verdicts: {verdicts}" if verdicts else ""))


@study_app.command("run")
def run_cmd(
    study_file: Annotated[Path | None, typer.Argument(help="A study file (TOML); flags override its keys.")] = None,
    out_dir: Annotated[Path | None, typer.Option("--out", "-o", help="The study folder.")] = None,
    model: Annotated[str | None, typer.Option("--model", "-m", help="Model spec (docs/backends.md).")] = None,
    regimes: Annotated[list[str] | None, typer.Option("--regime", "-r", help=f"Regime spec, repeatable or comma-separated (e.g. agentic,agentic+no_retrieval); default: {DEFAULT_REGIME}.")] = None,
    tasks: Annotated[list[str] | None, typer.Option("--tasks", "-t", help="Task spec, repeatable (builtin[:levels[:ids]], kernelbench:ROOT..., a folder, a task id).")] = None,
    n: Annotated[int | None, typer.Option(help="Samples per generation step.")] = None,
    turns: Annotated[int | None, typer.Option(help="Turns for iterative/agentic.")] = None,
    seeds: Annotated[list[int] | None, typer.Option("--seed", help="Sampling seed, repeatable.")] = None,
    devices: Annotated[list[str] | None, typer.Option("--device", "-d", help="cpu or cuda:N, repeatable: one evaluation worker each.")] = None,
    target: Annotated[str | None, typer.Option(help="cuda | triton | cpp (default: cpp on the CPU, cuda on GPUs).")] = None,
    scaffold: Annotated[bool | None, typer.Option("--scaffold/--no-scaffold", help="Scaffolded generation (default: on for the embedded models); a regime's +scaffold/+no_scaffold wins.")] = None,
    max_tokens: Annotated[int | None, typer.Option(help="Decoding budget per generated program.")] = None,
    cell_minutes: Annotated[float | None, typer.Option(help="A clock per cell: no model request and no evaluation begun after this many minutes of it (in the config hash).")] = None,
    facts: Annotated[Path | None, typer.Option(help="Folder of recorded task facts (default: OUT/facts).")] = None,
    jobs: Annotated[int | None, typer.Option(help="Cells in flight at once (default: two per device).")] = None,
    slots: Annotated[int | None, typer.Option(help="Evaluations at once per device (local pool) or per GPU (ray); default 1. Timing stays exclusive.")] = None,
    cache_dir: Annotated[str | None, typer.Option(help="The evaluator's build cache.")] = None,
    timeout: Annotated[float | None, typer.Option(help="Evaluation time limit per candidate, seconds.")] = None,
    trials: Annotated[int | None, typer.Option(help="Correctness trials per candidate.")] = None,
    iters: Annotated[int | None, typer.Option(help="Timed calls per module.")] = None,
    warmup: Annotated[int | None, typer.Option(help="Warm-up calls per module.")] = None,
    timing: Annotated[bool | None, typer.Option("--timing/--no-timing", help="Time correct candidates (default on).")] = None,
    compile_baseline: Annotated[bool | None, typer.Option("--compile-baseline/--no-compile-baseline", help="Also time torch.compile(reference) for Table I's fast_1 vs torch.compile (default: on in a study with a search regime, else off).")] = None,
    size: Annotated[str | None, typer.Option(help="Task size: small, full, auto or a factor of full size such as 1/8 (docs/sizes.md); in the cells' config hash.")] = None,
    retry_failed: Annotated[bool, typer.Option("--retry-failed", help="Redo cells recorded as failed.")] = False,
    executor: Annotated[str | None, typer.Option(help="Where evaluations run: local (this machine's pool, the default), direct (a sandboxed child per candidate) or ray (docs/scaling.md).")] = None,
    ray_address: Annotated[str | None, typer.Option(help="With --executor ray: the cluster (default: RAY_ADDRESS, else a local cluster started for the run).")] = None,
    model_gpu: Annotated[str | None, typer.Option(help="With --executor ray and a model on a GPU: shared (default: that GPU evaluates too) or own (a local cluster is started without it).")] = None,
) -> None:
    """Run (or resume) a study: every regime x task x seed cell not already in OUT/cells.jsonl."""
    from kernelwright.cli.progress import StudyProgress
    from kernelwright.study.runner import run_study
    from kernelwright.study.spec import load_spec

    overrides = {"out": str(out_dir) if out_dir else None, "model": model, "regimes": _split(regimes), "tasks": tasks,
                 "n": n, "turns": turns, "seeds": seeds, "devices": _split(devices), "target": target, "scaffold": scaffold,
                 "max_tokens": max_tokens, "cell_minutes": cell_minutes, "facts": str(facts) if facts else None, "jobs": jobs, "slots": slots,
                 "cache_dir": cache_dir, "eval.timeout": timeout, "eval.trials": trials, "eval.iters": iters, "eval.warmup": warmup,
                 "eval.time": timing, "eval.size": size, "eval.compile_baseline": compile_baseline, "executor": executor,
                 "ray_address": ray_address, "model_gpu": model_gpu}
    spec = load_spec(study_file, overrides)
    display = StudyProgress(err)

    def planned(s) -> None:
        err.print(f"study {spec.out}: {s.planned} cell(s), {s.skipped} already done, {s.pending} to run", highlight=False, soft_wrap=True)
        if s.pending:
            display.start(s.pending)

    try:
        summary = run_study(spec, retry_failed=retry_failed, on_event=display, on_plan=planned)
    finally:
        display.stop()
    out.print(_summary_line(summary), highlight=False, soft_wrap=True)
    if summary.stopped:
        fail(f"{summary.not_run} cell(s) left pending: {summary.stopped}; rerun the same command to finish",
             EXIT_BAD_INPUT if summary.stopped_by_model else EXIT_GPU_GONE)


@study_app.command("import")
def import_cmd(
    inputs: Annotated[list[Path], typer.Argument(help="KernelBench runs folders (level_L_problem_P_sample_S_kernel.py) and/or results JSON files.")],
    tasks: Annotated[list[str], typer.Option("--tasks", "-t", help="Task spec(s) the problems map onto (kernelbench:ROOT, builtin, ...).")],
    out_dir: Annotated[Path, typer.Option("--out", "-o", help="The study folder to write.")],
    label: Annotated[str | None, typer.Option(help="Name of the imported source (regime column 'import:LABEL'); default: the first input's name.")] = None,
    devices: Annotated[list[str] | None, typer.Option("--device", "-d", help="cpu or cuda:N, repeatable.")] = None,
    cache_dir: Annotated[str | None, typer.Option(help="The evaluator's build cache.")] = None,
    jobs: Annotated[int, typer.Option(help="Cells evaluated at once (default: one per device).")] = 0,
    timeout: Annotated[float, typer.Option(help="Evaluation time limit per candidate, seconds.")] = EVAL_DEFAULTS.timeout,
    trials: Annotated[int, typer.Option(help="Correctness trials per candidate.")] = EVAL_DEFAULTS.trials,
    iters: Annotated[int, typer.Option(help="Timed calls per module.")] = EVAL_DEFAULTS.iters,
    warmup: Annotated[int, typer.Option(help="Warm-up calls per module.")] = EVAL_DEFAULTS.warmup,
    timing: Annotated[bool, typer.Option("--timing/--no-timing", help="Time correct candidates.")] = True,
    size: Annotated[str, typer.Option(help="Task size: small, full or auto.")] = "auto",
    compile_baseline: Annotated[bool, typer.Option("--compile-baseline/--no-compile-baseline", help="Also time torch.compile(reference) for Table I's fast_1 vs torch.compile (default off).")] = False,
    compat: Annotated[str, typer.Option(help="kernelwright (default) or kernelbench: KernelBench's own definitions (the task module's names visible to the candidate, a ModelNew.__init__ failure counts as not compiled, the task's own size), to compare a re-score line by line; weaker, and the report says so.")] = "kernelwright",
    retry_failed: Annotated[bool, typer.Option("--retry-failed", help="Redo cells recorded as failed.")] = False,
    executor: Annotated[str, typer.Option(help="Where evaluations run: local (this machine's pool), direct (a sandboxed child per candidate) or ray (RAY_ADDRESS; docs/scaling.md).")] = "local",
) -> None:
    """Re-score other tools' generations with our evaluator, into a study folder."""
    from kernelwright.cli.progress import StudyProgress
    from kernelwright.evaluate import EvalConfig, EvaluatorError
    from kernelwright.executors.base import EXECUTORS
    from kernelwright.study.importer import import_study

    try:
        settings = EvalConfig(timeout=timeout, trials=trials, iters=iters, warmup=warmup, time=timing, size=size,
                              compile_baseline=compile_baseline, compat=compat)
    except EvaluatorError as e:  # the rule that failed, as one line ("bad evaluator option: trials must be ...")
        fail(str(e))
    if executor not in EXECUTORS:
        fail(f"unknown executor {executor!r}: use {', '.join(EXECUTORS)}")
    display = StudyProgress(err)

    def planned(s) -> None:
        err.print(f"import into {out_dir}: {s.planned} cell(s), {s.skipped} already done, {s.pending} to evaluate",
                  highlight=False, soft_wrap=True)
        if s.pending:
            display.start(s.pending)

    try:
        summary = import_study(inputs, tasks, out_dir, label=label, settings=settings, devices=_split(devices) or ["cpu"],
                               cache_dir=cache_dir, jobs=jobs, retry_failed=retry_failed, executor=executor,
                               on_event=display, on_plan=planned)
    finally:
        display.stop()
    out.print(_summary_line(summary), highlight=False, soft_wrap=True)


@study_app.command("report")
def report_cmd(
    folders: Annotated[list[Path], typer.Argument(help="Study folders; cells of later folders win on the same key.")],
    out_dir: Annotated[Path | None, typer.Option("--out", "-o", help="Where to write (default: the first folder).")] = None,
) -> None:
    """Write REPORT.md, report.html and figures from the logs alone (nothing is re-run)."""
    from kernelwright.report.study_report import write_report

    written = write_report(folders, out_dir)
    for what, path in written.items():
        out.print(f"{what:10s} {path}", highlight=False, soft_wrap=True)


@study_app.command("export")
def export_cmd(
    folders: Annotated[list[Path], typer.Argument(help="Study folders.")],
    out_dir: Annotated[Path, typer.Option("--out", "-o", help="Folder for sft.jsonl, preferences.jsonl, reflections.jsonl.")],
) -> None:
    """Write SFT pairs, preference pairs and reflection triples as JSONL, each with its attempt ids."""
    from kernelwright.report.export import export

    for f in folders:
        if not (f / "cells.jsonl").is_file():
            fail(f"{f} is not a study folder (no cells.jsonl)")
    for name, count in export(folders, out_dir).items():
        out.print(f"{count:6d} {out_dir / name}", highlight=False, soft_wrap=True)
