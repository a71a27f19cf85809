"""Eager and torch.compile times of the reference, measured in a child process (probe.py).

The evaluator times the reference itself beside every candidate (that pairing gives the speedup
against eager); torch.compile is not part of the evaluator, so it is measured here once, with the
same timing protocol, seeds and input sets, in a fresh interpreter like the evaluator's worker.
"""

from __future__ import annotations

from pathlib import Path

from kernelwright.child import ChildTimeout, run_json_child
from kernelwright.device import resolve_size
from kernelwright.optimize.probe import ProbeJob
from kernelwright.optimize.types import Baseline
from kernelwright.records import Task, TimingStats


def measure(task: Task, device: str, iters: int, timeout: float, size: str = "auto") -> Baseline:
    job = ProbeJob(mode="baseline", source=task.source, filename=Path(task.path or "reference.py").name,
                   device=device, iters=iters)
    try:
        reply, code, tail = run_json_child("kernelwright.optimize.probe", job.model_dump_json(), timeout,
                                           {"KERNELWRIGHT_SIZE": resolve_size(device, size)})
    except ChildTimeout:
        return Baseline(error=f"eager and torch.compile timing did not finish within {timeout:.0f} s")
    if reply is None:
        return Baseline(error=f"the timing process died (exit {code})" + (f": {tail}" if tail else ""))
    if not reply.get("ok"):
        return Baseline(error=reply.get("error", "unknown error"))
    return Baseline(eager=TimingStats.model_validate(reply["eager"]),
                    compiled=TimingStats.model_validate(reply["compiled"]) if reply.get("compiled") else None,
                    compile_s=reply.get("compile_s"), compile_error=reply.get("compile_error"))
