"""`kernelwright optimize FILE`: the fastest verified rewrite of one module within a budget.

request.py (what the user gave, resolved by strategies/defaults.py's rule and checked by inputs.py
before any generation) -> runner.py (profile, baselines,
rounds of a regime under budget.py's clock) -> report/optimize_report.py (the output folder).
probe.py is the child process that runs the user's code for the checks and the eager/torch.compile
baselines; cli/display.py the live progress; cli/optimize.py the typer command.
"""

from kernelwright.optimize.types import Options, Outcome

__all__ = ["Options", "Outcome"]
