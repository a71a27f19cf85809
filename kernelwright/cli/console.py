"""What every command line of kernelwright shares: the two consoles and `fail` (the exit codes
are in errors.py)."""

from __future__ import annotations

from typing import NoReturn

import typer
from rich.console import Console

from kernelwright.errors import EXIT_BAD_INPUT

err = Console(stderr=True)
out = Console()



def say_error(message: str) -> None:
    """The one-line error every command prints (then exits non-zero)."""
    err.print(f"[bold red]error:[/] {message}", highlight=False, soft_wrap=True)


def fail(message: str, code: int = EXIT_BAD_INPUT) -> NoReturn:
    """One clear line on stderr and a non-zero exit: the contract for bad input."""
    say_error(message)
    raise typer.Exit(code)
