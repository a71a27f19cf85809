"""One place for the errors that cross stages and the exit code each command ends with.

Every error a command can end with derives from `KernelwrightError`, whose `exit_code` says how
the command exits; the CLI maps them in one place (cli/console.Commands): one line on stderr, that
code. Errors that never leave their stage (a control-flow signal, a child's own failure) are not
part of the tree.

Exit codes (one table for `eval`, `run`, `study`, `optimize`):
0 the command did its job; 2 bad input (one line on stderr, nothing spent or lost);
3 the GPU stopped answering; 4 `optimize` found nothing verified that beats the reference;
130 interrupted.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

if TYPE_CHECKING:  # records imports this module (NewerSchema is bad input)
    from kernelwright.records import EvalResult

EXIT_OK = 0
EXIT_BAD_INPUT = 2
EXIT_GPU_GONE = 3
EXIT_NOT_FASTER = 4
EXIT_INTERRUPTED = 130
EXIT_FASTER = EXIT_OK  # optimize: a verified kernel faster than the reference was kept


class KernelwrightError(Exception):
    """An error a command ends with; its message is one line for the user."""

    exit_code = EXIT_BAD_INPUT


class BadInput(KernelwrightError):
    """The user's input cannot be used: a file, a task or regime spec, an option, a folder."""


class EvaluatorError(BadInput):
    """Bad input to the evaluator itself (never raised for anything a candidate holds)."""


class InfrastructureError(EvaluatorError):
    """The machine could not run the evaluation (e.g. the build cache's disk is full): not the
    candidate's outcome, so no verdict; every later evaluation would fail the same way."""


class ConfinementError(EvaluatorError):
    """A required OS protection is missing here (EvalConfig.unconfined runs anyway, untrusted)."""


class GPUUnavailableError(EvaluatorError):
    """A GPU stopped answering after a candidate timed out or crashed on it."""

    exit_code = EXIT_GPU_GONE

    def __init__(self, device: str, result: Optional[EvalResult] = None):
        super().__init__(f"GPU {device} no longer answers after the last candidate; stopping "
                         "(check nvidia-smi; the machine may need a reset by its owner)")
        self.device, self.result = device, result
