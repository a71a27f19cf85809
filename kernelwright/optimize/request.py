"""What one `kernelwright optimize` is asked, resolved and checked before any generation is spent.

The defaults (regime, scaffold, target) are strategies/defaults.py's, the rule `run` and `study run`
follow too; the module is checked statically and then run once in a child (inputs.py), and on a GPU
planned once more in a child where no target was asked (defaults.gpu_target); the output folder is
proven writable. Every failure is one line (a BadInput) before the model is loaded.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from kernelwright.executors.base import EXECUTORS
from kernelwright.optimize import inputs as inp
from kernelwright.optimize.types import Options
from kernelwright.records import Task
from kernelwright.strategies import defaults, parse_regime
from kernelwright.strategies.config import check_runnable


@dataclass(frozen=True)
class Prepared:
    """A run ready to start: the sized task, the resolved options, where it writes."""

    task: Task
    opts: Options
    source: Path  # the user's file
    folder: Path  # the output folder, writable
    outputs: list[str]  # what the checked forward returned, "(64, 256) float32" each
    target_why: str = ""  # why the module's own plan chose the target; empty when the device did


def prepare(file: str, *, inputs: Optional[str] = None, init_inputs: Optional[str] = None,
            out: Optional[Path] = None, device: Optional[str] = None, target: Optional[str] = None,
            regime: Optional[str] = None, scaffold: Optional[bool] = None, **settings: Any) -> Prepared:
    """Resolve and check what the command was given; `settings` are Options' other fields (model,
    budget_minutes, samples, rounds, eval_timeout, ...). Cheap checks come first, the children
    that run the user's module last."""
    from kernelwright.tasks.sizing import check_size, sized_task

    if settings.get("budget_minutes", 1.0) <= 0:
        raise inp.InputError("--budget-minutes must be positive")
    executor = settings.get("executor", "direct")
    if executor not in EXECUTORS:
        raise inp.InputError(f"unknown executor {executor!r}: use {', '.join(EXECUTORS)}")
    size = check_size(settings.get("size", "auto"))
    dev = inp.resolve_device(device)
    task = sized_task(inp.load_input(file, inputs, init_inputs), size, dev)
    tgt = defaults.default_target(dev, target)
    path, _ = inp.split_spec(file)
    folder = out or path.parent / f"{task.name}.kernelwright"
    inp.check_writable(folder)
    opts = Options(regime=defaults.default_regime(regime), device=dev, target=tgt,
                   scaffold=defaults.default_scaffold(settings.get("model"), scaffold), **settings)
    inp.eval_run(opts)  # bad evaluator options fail here, before any profiling
    check_runnable(parse_regime(opts.regime, target=tgt))  # a bad spec fails here, not after the profiling
    checked = inp.check_runs(task, dev, size=size)
    # after the module is known to run: on a GPU this plans it in a child
    tgt, why = defaults.module_target(task, dev, opts.scaffold, target, size)
    return Prepared(task=task, opts=opts.model_copy(update={"target": tgt}), source=path, folder=folder,
                    outputs=checked.outputs, target_why=why)
