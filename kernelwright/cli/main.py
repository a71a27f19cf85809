"""The `kernelwright` command line (typer). Thin: parse, call the library, print, pick the exit code.

Exit codes: 0 = the command did its job (an evaluation that completed, whatever its verdict);
2 = bad input to the tool (missing file, bad task, unknown device); 3 = a GPU stopped answering;
4 = `optimize` found nothing verified that beats the reference (it keeps the best correct candidate).
"""

from __future__ import annotations

import contextlib
import errno
import logging
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Optional

import typer

from kernelwright import __version__
from kernelwright.cli.console import Commands

HELP = ("A local code model rewrites PyTorch modules into custom kernels (C++ on a CPU, CUDA or Triton on a "
        "GPU), and a sandboxed evaluator proves each one: custom code did the work, outputs match, timed by us. "
        "Start with `optimize FILE`; `eval` checks one candidate; `study` runs controlled comparisons. "
        "Exit codes: 0 done, 2 bad input (or a missing requirement, a model that stopped answering, a full disk), "
        "3 a GPU stopped answering, 4 optimize kept nothing faster. `doctor` says what this machine can do.")
app = typer.Typer(add_completion=False, no_args_is_help=True, help=HELP, cls=Commands)
# one home for consoles, exit codes and `fail` (kernelwright/cli/console.py); re-exported for callers
from kernelwright.cli.console import err, fail, out, say_error
from kernelwright.errors import EXIT_BAD_INPUT
from kernelwright.evaluate.config import EVAL_DEFAULTS
from kernelwright.records import NewerSchema
from kernelwright.strategies.defaults import REGIME_HELP


@app.callback()
def _root(verbose: bool = typer.Option(False, "--verbose", "-v", help="Log what happens.")) -> None:
    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    # Which model runs where is said in one line, always: a default that silently downloads or
    # picks an engine would surprise.
    logging.getLogger("kernelwright.llm.registry").setLevel(logging.INFO)
    # The embedded model's assembly (1.1 GB, about 40 s) shows one progress bar of its own
    # (llm/local_model.py); its sources and parts are logged only with -v.


@app.command("version")
def version() -> None:
    """Print the version."""
    out.print(__version__)


@app.command("doctor")
def doctor_cmd() -> None:
    """Say what this machine can do (compiler, nvcc, GPUs, Triton, the model, the sandbox) and what to install."""
    from kernelwright.cli.doctor import can_do, run_checks

    checks = run_checks()
    for c in checks:
        mark = {True: "ok", False: "MISSING", None: "-"}[c.ok]
        line = f"{c.name:<15} {mark:<8} {c.detail}"
        print(line + (f"   -> {c.fix}" if c.fix and not c.ok else ""))
    said = can_do(checks)
    print("this machine can: " + ("; ".join(said) if said else "nothing yet (see MISSING above)"))
    if any(c.ok is False for c in checks):
        raise typer.Exit(EXIT_BAD_INPUT)


@app.command("tasks")
def tasks_cmd(spec: str = typer.Argument("builtin", help="A file, a folder, builtin[:levels[:ids]] or kernelbench:ROOT[:levels[:ids]].")) -> None:
    """List the tasks a spec selects."""
    from kernelwright.tasks import load_tasks

    tasks = load_tasks(spec)
    # plain aligned lines, never cut at the terminal's width: ids and names are what a user copies
    rows = [("id", "level", "name")] + [(t.id, "" if t.level is None else str(t.level), t.name) for t in tasks]
    widths = [max(len(r[i]) for r in rows) for i in range(2)]
    for r in rows:
        print(f"{r[0]:<{widths[0]}}  {r[1]:<{widths[1]}}  {r[2]}".rstrip())
    print(f"{len(tasks)} task(s)")


SIZE_HELP = ("Problem size: small (a built-in task's own; for another module, its size constants scaled down "
             "until inputs, outputs and parameters fit 64 MB), full, auto (small on CPU, full on GPU) or a "
             "factor of full size such as 1/8 (docs/sizes.md).")
UNCONFINED_HELP = ("Run candidates even where a required OS protection (bubblewrap/namespaces, cgroups) is "
                   "missing here; results are marked untrusted. Never for results anyone relies on.")


def warn_unconfined(unconfined: bool) -> bool:
    if unconfined:
        err.print("[bold red]UNCONFINED[/]: candidate code may run without network, filesystem or process "
                  "containment on this machine; every result is marked confinement.trusted=false")
    return unconfined


@app.command("eval")
def eval_cmd(
    task: str = typer.Option(..., "--task", "-t", help="A task file, a built-in task id/name, or a spec selecting one task."),
    candidate: Path = typer.Option(..., "--candidate", "-c", help="Python file (or raw model answer) defining ModelNew."),
    device: str = typer.Option("cpu", help="cpu, cuda or cuda:N."),
    timeout: float = typer.Option(EVAL_DEFAULTS.timeout, help="Hard wall-clock limit for the whole evaluation, in seconds."),
    json_out: bool = typer.Option(False, "--json", help="Print exactly the result record as JSON."),
    compile_only: bool = typer.Option(False, "--compile-only", help="Build only (CUDA sources compile without a GPU)."),
    trials: int = typer.Option(EVAL_DEFAULTS.trials, help="Correctness trials, each on fresh random inputs."),
    atol: Optional[float] = typer.Option(None, help="Absolute tolerance (default 1e-4 fp32, 1e-2 fp16/bf16)."),
    rtol: Optional[float] = typer.Option(None, help="Relative tolerance (default as atol)."),
    iters: int = typer.Option(EVAL_DEFAULTS.iters, help="Timed calls per module."),
    warmup: int = typer.Option(EVAL_DEFAULTS.warmup, help="Untimed warm-up calls per module."),
    size: str = typer.Option("auto", help=SIZE_HELP),
    seed: int = typer.Option(EVAL_DEFAULTS.seed, help="Base seed for parameters and inputs."),
    no_timing: bool = typer.Option(False, "--no-timing", help="Check correctness only."),
    unconfined: bool = typer.Option(False, "--unconfined", help=UNCONFINED_HELP),
) -> None:
    """Evaluate one candidate against one task: compile, check, prove custom code ran, time."""
    from kernelwright.evaluate import EvalConfig, EvalRun, GPUUnavailableError, evaluate
    from kernelwright.tasks import load_task
    from kernelwright.tasks.sizing import check_size, sized_task

    check_size(size)
    if not candidate.is_file():
        fail(f"candidate file not found: {candidate}")
    try:
        text = candidate.read_text(errors="replace")
    except OSError as e:
        fail(f"cannot read candidate {candidate}: {e.strerror}")
    the_task = sized_task(load_task(task), size, device)
    try:
        cfg = EvalConfig(timeout=timeout, trials=trials, atol=atol, rtol=rtol, iters=iters, warmup=warmup,
                         compile_only=compile_only, size=size, seed=seed, time=not no_timing,
                         unconfined=warn_unconfined(unconfined))
        result = evaluate(the_task, text, EvalRun(cfg, device=device))
    except GPUUnavailableError as e:  # the last candidate's record is still printed where one was asked for
        if e.result is not None and json_out:
            print(e.result.to_json(indent=2))
        raise
    if json_out:
        print(result.to_json(indent=2))
        return
    from kernelwright.report.console import print_result

    print_result(out, result)


def _register_llm_commands() -> None:
    from kernelwright.cli.model import generate, model_app

    app.add_typer(model_app, name="model")
    app.command("generate")(generate)


_register_llm_commands()


def _register_study_commands() -> None:
    from kernelwright.cli.study import study_app

    app.add_typer(study_app, name="study")


_register_study_commands()


def _register_optimize_command() -> None:
    from kernelwright.cli.optimize import optimize_cmd

    app.command("optimize")(optimize_cmd)


_register_optimize_command()


@app.command("run")
def run_cmd(
    regime: Optional[str] = typer.Option(None, "--regime", "-r", help=REGIME_HELP),
    task: str = typer.Option(..., "--task", "-t", help="A task file, a built-in task id/name, or a spec selecting one task."),
    model: Optional[str] = typer.Option(None, "--model", "-m", help="Model spec (see docs/backends.md); default: the embedded 1.5B model."),
    device: str = typer.Option("cpu", help="cpu, cuda or cuda:N (where candidates are evaluated)."),
    target: Optional[str] = typer.Option(None, help="cuda | triton | cpp (default: cpp on the CPU; on a GPU triton "
                                         "where the module's GEMM fuses with the ops after it, else cuda)."),
    n: Optional[int] = typer.Option(None, help="Samples per generation step (regime default if unset)."),
    turns: Optional[int] = typer.Option(None, help="Turns for iterative/agentic (default 3)."),
    seed: int = typer.Option(0, help="Sampling seed."),
    max_tokens: int = typer.Option(1024, help="Decoding budget per generated program."),
    timeout: float = typer.Option(EVAL_DEFAULTS.timeout, help="Evaluation time limit per candidate, seconds."),
    iters: int = typer.Option(EVAL_DEFAULTS.iters, help="Timed calls per module."),
    out_dir: Optional[Path] = typer.Option(None, "--out", help="Folder to record the run in, as a study folder: manifest.json, attempts.jsonl, cells.jsonl (appended; `kernelwright study report` reads it)."),
    json_out: bool = typer.Option(False, "--json", help="Print the cell record as JSON at the end."),
    scaffold: Optional[bool] = typer.Option(None, "--scaffold/--no-scaffold", help="Scaffolded generation: the system "
                                            "writes the program, the model fills one region (default: on for the "
                                            "embedded models, off for others)."),
    unconfined: bool = typer.Option(False, "--unconfined", help=UNCONFINED_HELP),
    executor: str = typer.Option("direct", help="Where candidates are evaluated: direct (a sandboxed child each), "
                                 "local (this machine's pool: duplicates once, builds ahead) or ray."),
    size: str = typer.Option("auto", help=SIZE_HELP),
) -> None:
    """Run one interaction regime on one task with a model, evaluating every candidate: a study of one cell."""
    from kernelwright.cli.display import Display
    from kernelwright.device import validate_device
    from kernelwright.evaluate import EvalRun
    from kernelwright.executors.base import make_executor, opened
    from kernelwright.llm import make_backend
    from kernelwright.strategies import defaults, run_regime
    from kernelwright.strategies.config import check_runnable
    from kernelwright.study.spec import one_cell
    from kernelwright.tasks import load_task
    from kernelwright.tasks.sizing import check_size, sized_task

    check_size(size)
    # compile_baseline stated: a study with a search regime would turn it on (StudySpec); a run
    # keeps the evaluator's default and times only its candidates
    spec = one_cell(task, regime, seed, device, out=out_dir, model=model, target=target, scaffold=scaffold, n=n,
                    turns=turns, max_tokens=max_tokens, executor=executor,
                    eval={"timeout": timeout, "iters": iters, "size": size, "compile_baseline": False})
    first = spec.regime_config(spec.regimes[0], seed)
    check_runnable(first)
    validate_device(device)
    the_task = sized_task(load_task(task), size, device)
    # after the task is sized: on a GPU, with no target asked, this plans it in a child
    tgt, why = defaults.module_target(the_task, device, first.scaffold, target, size)
    spec = spec.model_copy(update={"target": tgt})
    config = spec.regime_config(spec.regimes[0], seed)
    run = EvalRun(spec.eval.but(unconfined=warn_unconfined(unconfined)), device=device)
    backend = make_backend(model)
    err.print(f"regime {config.spec} · task {the_task.id} · model {backend.model} · target {tgt}"
              f"{f' ({why})' if why else ''} · device {device}")
    try:
        with _cell_log(spec, the_task, backend.model) as record, \
                opened(make_executor(spec.executor, [device])) as evaluator, Display(err) as display:
            cell = run_regime(the_task, backend, config, run, sink=record.sink if record else lambda a: None,
                              progress=display, config_hash=spec.config_hash(config, backend.model),
                              cell_sink=record.finish if record else None, executor=evaluator)
    except OSError as e:  # a full disk or a read-only folder: what is on disk stays whole (log.append_record)
        fail(f"cannot write to {out_dir}: {e.strerror or e}")
    _print_cell(cell, json_out)


def _print_cell(cell, json_out: bool) -> None:
    from rich.text import Text

    if json_out:
        print(cell.model_dump_json(indent=2))
        return
    out.print(Text.assemble((cell.verdict.value, "bold"), f" — {cell.reason}"
                            + (f"\nroute: {cell.route}" if cell.route else "")))
    out.print(f"{len(cell.attempt_ids)} candidate(s), {cell.turns} turn(s), {cell.wall_s:.0f} s, "
              f"{cell.usage.completion_tokens} tokens generated")


@contextlib.contextmanager
def _cell_log(spec, task, model: str) -> Iterator[Optional[Any]]:
    """`--out`: the folder a study would write for this one cell (study/cell_log.py), which `study
    report` reads; without it, nothing is written."""
    if spec.out is None:
        yield None
        return
    from kernelwright.study.cell_log import CellLog

    try:
        spec.out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        fail(f"cannot create output folder {spec.out}: {e.strerror}")
    config = spec.regime_config(spec.regimes[0], spec.seeds[0])
    log = CellLog(spec.out, task, model, spec.devices[0], spec.eval, model_spec=spec.model, kind="run",
                  executor=spec.executor)
    with log.open(config):
        yield log.cell(config)


def main() -> None:
    try:
        app()
    except KeyboardInterrupt:
        err.print("interrupted")
        sys.exit(130)
    except NewerSchema as e:  # a folder written by a newer kernelwright: any command that reads one
        say_error(str(e))
        sys.exit(EXIT_BAD_INPUT)
    except OSError as e:
        if e.errno not in (errno.ENOSPC, errno.EDQUOT):
            raise
        # anywhere a command writes (a study's records, a report, optimize's kept kernel): records
        # already written stay whole (study/log.py takes a partial line back), so say it and stop
        where = f" writing {e.filename}" if e.filename else ""
        say_error(f"the disk is full{where}; what was recorded before is kept: free space and run the same "
                  "command again")
        sys.exit(EXIT_BAD_INPUT)


if __name__ == "__main__":
    main()
