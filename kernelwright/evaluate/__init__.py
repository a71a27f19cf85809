"""The evaluator: compile, check, prove and time a candidate in a sandboxed child process.

Names are imported lazily: the sandbox's child runs `python -m kernelwright.evaluate.judge`, which
imports this package first, and should load nothing of the parent side.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "DEFAULT_TIMEOUT_S": "kernelwright.evaluate.config",
    "EvalConfig": "kernelwright.evaluate.config",
    "EvalRun": "kernelwright.evaluate.config",
    "EvaluatorError": "kernelwright.errors",
    "GPUUnavailableError": "kernelwright.errors",
    "InfrastructureError": "kernelwright.errors",
    "evaluate": "kernelwright.evaluate.evaluator",
}
__all__ = list(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'kernelwright.evaluate' has no attribute {name!r}")
