"""The `kernelwright` command line (typer). Thin: parse, call the library, print, pick the exit code.

Exit codes: 0 = the command did its job (an evaluation that completed, whatever its verdict);
2 = bad input to the tool (missing file, bad task, unknown device); 3 = a GPU stopped answering.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import NoReturn, Optional

import typer
from rich.console import Console
from rich.table import Table

from kernelwright import __version__

app = typer.Typer(add_completion=False, no_args_is_help=True, help=__doc__.splitlines()[0] if __doc__ else None)
err = Console(stderr=True)
out = Console()

EXIT_BAD_INPUT = 2
EXIT_GPU_GONE = 3


def fail(message: str, code: int = EXIT_BAD_INPUT) -> NoReturn:
    """One clear line on stderr and a non-zero exit: the contract for bad input."""
    err.print(f"[bold red]error:[/] {message}", highlight=False, soft_wrap=True)
    raise typer.Exit(code)


@app.callback()
def _root(verbose: bool = typer.Option(False, "--verbose", "-v", help="Log what happens.")) -> None:
    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s")


@app.command("version")
def version() -> None:
    """Print the version."""
    out.print(__version__)


@app.command("tasks")
def tasks_cmd(spec: str = typer.Argument("builtin", help="A file, a folder, builtin[:levels[:ids]] or kernelbench:ROOT[:levels[:ids]].")) -> None:
    """List the tasks a spec selects."""
    from kernelwright.tasks import TaskError, load_tasks

    try:
        tasks = load_tasks(spec)
    except TaskError as e:
        fail(str(e))
    table = Table("id", "level", "name", box=None)
    for t in tasks:
        table.add_row(t.id, "" if t.level is None else str(t.level), t.name)
    out.print(table)
    out.print(f"{len(tasks)} task(s)")


@app.command("eval")
def eval_cmd(
    task: str = typer.Option(..., "--task", "-t", help="A task file, a built-in task id/name, or a spec selecting one task."),
    candidate: Path = typer.Option(..., "--candidate", "-c", help="Python file (or raw model answer) defining ModelNew."),
    device: str = typer.Option("cpu", help="cpu, cuda or cuda:N."),
    timeout: float = typer.Option(240.0, help="Hard wall-clock limit for the whole evaluation, in seconds."),
    json_out: bool = typer.Option(False, "--json", help="Print exactly the result record as JSON."),
    compile_only: bool = typer.Option(False, "--compile-only", help="Build only (CUDA sources compile without a GPU)."),
    trials: int = typer.Option(5, help="Correctness trials, each on fresh random inputs."),
    atol: Optional[float] = typer.Option(None, help="Absolute tolerance (default 1e-4 fp32, 1e-2 fp16/bf16)."),
    rtol: Optional[float] = typer.Option(None, help="Relative tolerance (default as atol)."),
    iters: int = typer.Option(100, help="Timed calls per module."),
    warmup: int = typer.Option(10, help="Untimed warm-up calls per module."),
    size: str = typer.Option("auto", help="Task size: small, full, or auto (small on CPU, full on GPU)."),
    seed: int = typer.Option(42, help="Base seed for parameters and inputs."),
    no_timing: bool = typer.Option(False, "--no-timing", help="Check correctness only."),
) -> None:
    """Evaluate one candidate against one task: compile, check, prove custom code ran, time."""
    from kernelwright.evaluate import EvalConfig, EvaluatorError, GPUUnavailableError, evaluate
    from kernelwright.tasks import TaskError, load_task

    if size not in ("auto", "small", "full"):
        fail(f"unknown size {size!r}: use small, full or auto")
    if not candidate.is_file():
        fail(f"candidate file not found: {candidate}")
    try:
        text = candidate.read_text(errors="replace")
    except OSError as e:
        fail(f"cannot read candidate {candidate}: {e.strerror}")
    try:
        the_task = load_task(task)
    except TaskError as e:
        fail(str(e))
    cfg = EvalConfig(device=device, timeout=timeout, trials=trials, atol=atol, rtol=rtol, iters=iters,
                     warmup=warmup, compile_only=compile_only, size=size, seed=seed, time=not no_timing)
    try:
        result = evaluate(the_task, text, cfg)
    except GPUUnavailableError as e:
        if e.result is not None and json_out:
            print(e.result.to_json(indent=2))
        fail(str(e), EXIT_GPU_GONE)
    except EvaluatorError as e:
        fail(str(e))
    if json_out:
        print(result.to_json(indent=2))
        return
    from kernelwright.report_console import print_result

    print_result(out, result)


def main() -> None:
    try:
        app()
    except KeyboardInterrupt:
        err.print("interrupted")
        sys.exit(130)


if __name__ == "__main__":
    main()
