"""What every command line of kernelwright shares: the two consoles and `fail` (the exit codes
are in errors.py)."""

from __future__ import annotations

from typing import NoReturn

import typer
from rich.console import Console
from rich.text import Text
from typer.core import TyperGroup

from kernelwright.errors import EXIT_BAD_INPUT, KernelwrightError

err = Console(stderr=True)
out = Console()



def say_error(message: str) -> None:
    """The one-line error every command prints (then exits non-zero). The message may quote a
    candidate's or a task's text: plain text, never markup."""
    err.print(Text.assemble(("error:", "bold red"), " ", message), soft_wrap=True)


def fail(message: str, code: int = EXIT_BAD_INPUT) -> NoReturn:
    """One clear line on stderr and a non-zero exit: the contract for bad input."""
    say_error(message)
    raise typer.Exit(code)


class Commands(TyperGroup):
    """The command group every `kernelwright` command runs in: an error of the tree
    (errors.KernelwrightError) ends it with one line on stderr and the error's own exit code. The one
    place errors map to exit codes; a command catches only what it must handle otherwise."""

    def invoke(self, ctx):  # type: ignore[no-untyped-def]
        try:
            return super().invoke(ctx)
        except KernelwrightError as e:
            fail(str(e) or type(e).__name__, e.exit_code)
