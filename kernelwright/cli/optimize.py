"""The `kernelwright optimize` command (registered in kernelwright/cli/main.py). Thin: parse, have
the optimize package resolve and check the request (optimize/request.py), make the model, run,
print the outcome, pick the exit code."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from kernelwright.evaluate.config import EVAL_DEFAULTS
from kernelwright.events import Step
from kernelwright.optimize.types import Outcome
from kernelwright.strategies.defaults import REGIME_HELP

# Path-typed options as module-level singletons (a Path default is mutable to the linter's eyes).
_OUT = typer.Option(None, "--out", "-o", help="Output folder (default: <name>.kernelwright/ next to FILE).")
_FACTS = typer.Option(None, "--facts", hidden=True, help="Tests: prompt facts JSON to use (written when missing), "
                      "so replayed prompts are byte-stable.")


def optimize_cmd(
    file: str = typer.Argument(..., help="A KernelBench-format file (Model, get_inputs, get_init_inputs), or "
                                         "FILE:ClassName with --inputs FUNC."),
    inputs: Optional[str] = typer.Option(None, "--inputs", help="Function in FILE returning example inputs "
                                                                 "(default get_inputs)."),
    init_inputs: Optional[str] = typer.Option(None, "--init-inputs", help="Function in FILE returning the "
                                              "constructor's arguments (default get_init_inputs, else none)."),
    budget_minutes: float = typer.Option(10.0, "--budget-minutes", "-b", help="Wall-clock budget for the whole run."),
    samples: Optional[int] = typer.Option(None, "--samples", "-n", help="Samples per generation step (regime default if unset)."),
    turns: Optional[int] = typer.Option(None, "--turns", help="Turns per round for iterative/agentic (default 3)."),
    rounds: int = typer.Option(0, "--rounds", help="Regime runs at most (0: new rounds while the budget lasts)."),
    model: Optional[str] = typer.Option(None, "--model", "-m", help="Model spec (docs/backends.md); default: the "
                                                                    "embedded 1.5B model."),
    device: Optional[str] = typer.Option(None, help="cpu, cuda or cuda:N (default: a GPU if one answers, else cpu)."),
    target: Optional[str] = typer.Option(None, help="cuda | triton | cpp (default: cpp on the CPU; on a GPU triton "
                                         "where the module's GEMM fuses with the ops after it, else cuda)."),
    regime: Optional[str] = typer.Option(None, "--regime", "-r", help=REGIME_HELP),
    out: Optional[Path] = _OUT,
    seed: int = typer.Option(0, help="Sampling seed of the first round."),
    max_tokens: int = typer.Option(1024, help="Decoding budget per generated program."),
    scaffold: Optional[bool] = typer.Option(None, "--scaffold/--no-scaffold", help="Scaffolded generation (default: "
                                            "on for the embedded models)."),
    timeout: float = typer.Option(EVAL_DEFAULTS.timeout, help="Evaluation time limit per candidate, seconds."),
    iters: int = typer.Option(EVAL_DEFAULTS.iters, help="Timed calls per module."),
    no_timing: bool = typer.Option(False, "--no-timing", hidden=True, help="Tests: never time (nothing can win)."),
    facts: Optional[Path] = _FACTS,
    executor: str = typer.Option("direct", help="Where candidates are evaluated: direct (a sandboxed child each), "
                                 "local (this machine's pool: duplicates once, builds ahead) or ray."),
    size: str = typer.Option("auto", help="Problem size: small, full, auto (small on CPU, full on GPU) or a factor "
                             "of full size such as 1/8; on the CPU a module without a small size of its own runs "
                             "its size constants scaled down to fit 64 MB (docs/sizes.md)."),
) -> None:
    """Find the fastest verified rewrite of one module within a budget; write model_new.py and a report.

    Exit codes: 0 a verified faster kernel was kept; 2 bad input (before any generation) or the model stopped answering; 3 the GPU stopped answering; 4 nothing verified beats the reference.
    """
    from kernelwright.cli.console import err
    from kernelwright.cli.display import Display
    from kernelwright.llm import make_backend
    from kernelwright.llm.budget import Budget
    from kernelwright.optimize.request import prepare
    from kernelwright.optimize.runner import optimize
    from kernelwright.report.optimize_report import write as write_report

    budget = Budget(budget_minutes)  # the clock starts with the command: checks count too
    req = prepare(file, inputs=inputs, init_inputs=init_inputs, out=out, device=device, target=target, regime=regime,
                  scaffold=scaffold, model=model, budget_minutes=budget_minutes, samples=samples, turns=turns,
                  rounds=rounds, seed=seed, max_tokens=max_tokens, eval_timeout=timeout, iters=iters,
                  time=not no_timing, executor=executor, size=size)
    backend = make_backend(model)
    o, task = req.opts, req.task
    shown = f"{o.target} ({req.target_why})" if req.target_why else o.target
    err.print(f"optimize {req.source} · device {o.device} · target {shown} · model {backend.model} · regime {o.regime} "
              f"· budget {budget_minutes:g} min\nchecked: it imports, its inputs run, forward runs on {o.device} -> "
              f"{', '.join(req.outputs)}" + (f"\nsize: {task.sizing.summary()}" if task.sizing else ""),
              highlight=False, soft_wrap=True)
    with Display(err, budget) as display:  # a failed profiling (InputError) ends it before any generation
        outcome, attempts = optimize(task, o, backend, req.folder, budget, outputs=req.outputs, progress=display,
                                     facts_path=facts)
        display(Step("writing the report"))
        write_report(req.folder, task, outcome, attempts)
    _print_outcome(outcome, req.folder)
    raise typer.Exit(outcome.exit_code)


def _print_outcome(outcome: Outcome, folder: Path) -> None:
    """The headline, the baselines and the kept kernel's ratios, and where the report is."""
    from kernelwright.cli.console import out as stdout
    from kernelwright.cli.console import say_error
    from kernelwright.report.optimize_report import headline

    stdout.print(headline(outcome), highlight=False, soft_wrap=True)
    b = outcome.baseline
    eager = f"{b.eager.median_ms:.4g} ms" if b.eager else "n/a"
    compiled = (f"{b.compiled.median_ms:.4g} ms" if b.compiled else
                "failed" if b.compile_error else "not measured")
    kept = "none"
    if outcome.kept_id is not None:
        vs = [f"{outcome.speedup_vs_eager:.3g}x eager" if outcome.speedup_vs_eager is not None else "not timed"]
        if outcome.speedup_vs_compile is not None:
            vs.append(f"{outcome.speedup_vs_compile:.3g}x torch.compile"
                      + (" (flagged: see the report)" if outcome.vs_compile_caveat else ""))
        if outcome.fraction_of_floor is not None:
            vs.append(f"{outcome.fraction_of_floor:.3g} of the roofline floor")
        kept = ", ".join(vs)
    stdout.print(f"eager {eager} · torch.compile {compiled} · kept: {kept}", highlight=False, soft_wrap=True)
    if outcome.kept_id is not None:
        shapes = {True: "yes", False: "NO: correct only at the task's shape", None: "not checked"}[outcome.generalises]
        stdout.print(f"correct at a second shape: {shapes}" + (f" ({outcome.generalises_note})"
                     if outcome.generalises_note else ""), highlight=False, soft_wrap=True)
    stdout.print(f"{outcome.attempts} attempt(s), {outcome.rounds} round(s), {outcome.wall_s:.0f} s; "
                 f"report: {folder / 'report.md'}", highlight=False, soft_wrap=True)
    if outcome.error:
        say_error(outcome.error)
