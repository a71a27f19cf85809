"""What every command line of kernelwright shares: the two consoles, the exit codes, `fail`.

Exit codes (one table for `eval`, `run`, `study`, `optimize`):
0 the command did its job; 2 bad input (one line on stderr, nothing spent or lost);
3 the GPU stopped answering; 4 `optimize` found nothing verified that beats the reference;
130 interrupted.
"""

from __future__ import annotations

from typing import NoReturn

import typer
from rich.console import Console

err = Console(stderr=True)
out = Console()

EXIT_OK = 0
EXIT_BAD_INPUT = 2
EXIT_GPU_GONE = 3
EXIT_NOT_FASTER = 4
EXIT_INTERRUPTED = 130


def say_error(message: str) -> None:
    """The one-line error every command prints (then exits non-zero)."""
    err.print(f"[bold red]error:[/] {message}", highlight=False, soft_wrap=True)


def fail(message: str, code: int = EXIT_BAD_INPUT) -> NoReturn:
    """One clear line on stderr and a non-zero exit: the contract for bad input."""
    say_error(message)
    raise typer.Exit(code)
