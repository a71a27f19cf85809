"""One place for the errors that cross stages and the exit code each command ends with.

Exit codes (one table for `eval`, `run`, `study`, `optimize`):
0 the command did its job; 2 bad input (one line on stderr, nothing spent or lost);
3 the GPU stopped answering; 4 `optimize` found nothing verified that beats the reference;
130 interrupted.
"""

from __future__ import annotations

from typing import Optional

from kernelwright.records import EvalResult

EXIT_OK = 0
EXIT_BAD_INPUT = 2
EXIT_GPU_GONE = 3
EXIT_NOT_FASTER = 4
EXIT_INTERRUPTED = 130
EXIT_FASTER = EXIT_OK  # optimize: a verified kernel faster than the reference was kept


class EvaluatorError(Exception):
    """Bad input to the evaluator itself (never raised for anything a candidate holds)."""


class InfrastructureError(EvaluatorError):
    """The machine could not run the evaluation (e.g. the build cache's disk is full): not the
    candidate's outcome, so no verdict; every later evaluation would fail the same way."""


class ConfinementError(EvaluatorError):
    """A required OS protection is missing here (EvalConfig.unconfined runs anyway, untrusted)."""


class GPUUnavailableError(EvaluatorError):
    """A GPU stopped answering after a candidate timed out or crashed on it."""

    def __init__(self, device: str, result: Optional[EvalResult] = None):
        super().__init__(f"GPU {device} no longer answers after the last candidate; stopping "
                         "(check nvidia-smi; the machine may need a reset by its owner)")
        self.device, self.result = device, result
