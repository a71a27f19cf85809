"""The region pre-check: a region answer against the reference segment in milliseconds, before any
torch extension is built.

``precheck(plan, target, region)`` / ``precheck_many(plan, target, regions)`` -> ``PrecheckResult``:
pass, the first counterexample (inputs, expected, got), the compiler's first error, a runtime
error, or unsupported. The probes and PyTorch's values on them come with the plan (probes.py, made
in the planning child); here nothing imports torch:

* C++ and CUDA regions: the skeleton's kernel with the region in it, compiled by the system compiler
  without torch headers, CUDA on a host shim (native.py); many regions share one translation unit;
* Triton regions: the region's statements on a NumPy stand-in for `tl` (tl_shim.py);
* a `gemm` segment's region (elementwise on the accumulator, Triton or CUDA) in the target's
  elementwise kernel, on the epilogue's probes.

Both run the region in a confined child (the evaluator's confinement where this machine has it),
never in this process. Results are remembered per (probes, target, region): a search loop asking
again pays nothing.
"""

from __future__ import annotations

import hashlib
import threading
import time
from typing import Optional

from kernelwright.scaffold.precheck.compare import first_difference
from kernelwright.scaffold.precheck.types import Counterexample, PrecheckResult, PrecheckStatus
from kernelwright.scaffold.types import ScaffoldPlan, SegmentKind

__all__ = ["Counterexample", "PrecheckResult", "PrecheckStatus", "precheck", "precheck_many"]

_memo: dict[str, PrecheckResult] = {}
_lock = threading.Lock()


def precheck(plan: ScaffoldPlan, target: str, region: str) -> PrecheckResult:
    return precheck_many(plan, target, [region])[0]


def precheck_many(plan: ScaffoldPlan, target: str, regions: list[str]) -> list[PrecheckResult]:
    """One result per region, in order; the regions are run together (one compile for all)."""
    started = time.perf_counter()
    plan = plan.for_target(target)  # the plan the target's skeleton was written from (Triton: a GEMM one)
    seg, probes = plan.segment, plan.probes
    if seg is not None and seg.kind == SegmentKind.GEMM and target not in ("triton", "cuda"):
        return [PrecheckResult(status=PrecheckStatus.UNSUPPORTED, target=target,
                               error=f"the gemm layout has no {target} skeleton") for _ in regions]
    if seg is None or probes is None:
        why = plan.reason if seg is None else "the plan has no probes for this segment"
        return [PrecheckResult(status=PrecheckStatus.UNSUPPORTED, target=target, error=why) for _ in regions]
    keys = [_key(plan, target, r) for r in regions]
    with _lock:
        known = {k: _memo[k] for k in keys if k in _memo}
    new: dict[str, PrecheckResult] = {}
    todo: dict[str, str] = {}  # each new region once, however often it is asked for
    for k, r in zip(keys, regions):
        if k in known or k in new or k in todo:
            continue
        early = _screen(target, r)
        if early is not None:
            new[k] = early
        else:
            todo[k] = r
    if todo:
        new.update(zip(todo, _run(plan, target, list(todo.values()))))
    with _lock:
        _memo.update(new)
    known.update(new)
    elapsed = time.perf_counter() - started
    return [known[k].model_copy(update={"seconds": elapsed}) for k in keys]


def _key(plan: ScaffoldPlan, target: str, region: str) -> str:
    assert plan.probes is not None
    return hashlib.sha256(f"{target}\0{plan.probes.expected}\0{plan.segment.model_dump_json()}\0{region.strip()}"
                          .encode()).hexdigest()


def _screen(target: str, region: str) -> Optional[PrecheckResult]:
    if target == "triton":
        return None
    from kernelwright.scaffold.precheck.native_shim import screen

    found = screen(target, region)
    if not found:
        return None
    status, _, why = found.partition(": ")
    return PrecheckResult(status=PrecheckStatus(status), target=target, error=why)


def _run(plan: ScaffoldPlan, target: str, regions: list[str]) -> list[PrecheckResult]:
    seg, probes = plan.segment, plan.probes
    assert seg is not None and probes is not None
    # A GEMM segment's region is elementwise on the accumulator tile: it runs in the elementwise
    # skeleton on the epilogue's probes (the accumulator is the main input there; the K loop is the
    # skeleton's, checked by the evaluator)
    seg = seg.epilogue()
    if target == "triton":
        from kernelwright.scaffold.precheck.tl_shim import run as run_regions
    else:
        from kernelwright.scaffold.precheck.native import run as run_regions
    out = []
    for outcome in run_regions(seg, target, probes, regions):
        if outcome.unsupported:
            out.append(PrecheckResult(status=PrecheckStatus.UNSUPPORTED, target=target, error=outcome.unsupported))
        elif outcome.compile_error:
            out.append(PrecheckResult(status=PrecheckStatus.COMPILE_ERROR, target=target, error=outcome.compile_error))
        elif outcome.runtime_error or outcome.values is None:
            out.append(PrecheckResult(status=PrecheckStatus.RUNTIME_ERROR, target=target,
                                      error=outcome.runtime_error or "no values came back"))
        else:
            ce, n = first_difference(seg, probes, outcome.values)
            status = PrecheckStatus.PASS if ce is None else PrecheckStatus.COUNTEREXAMPLE
            out.append(PrecheckResult(status=status, target=target, counterexample=ce, probes=n))
    return out
