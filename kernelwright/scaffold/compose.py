"""A task's whole scaffold plan and its skeleton for a target: the planners (plan.py, the GEMM
alternative gemm_plan.py on top) and the skeleton writers (writers/, one per target and segment
family). Its own module because the GEMM side builds on both, so neither may import it back."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from torch import nn

from kernelwright.measure.draw import SEED
from kernelwright.scaffold.gemm_plan import plan_gemm
from kernelwright.scaffold.plan import plan_segment
from kernelwright.scaffold.types import Scaffold, ScaffoldPlan, SegmentKind
from kernelwright.scaffold.writers import write_segment


def plan(task_id: str, module: Any, model: nn.Module, inputs: Sequence[Any], source: str,
         seed: int = SEED) -> ScaffoldPlan:
    """The scaffold plan for ``model`` (built from ``module``'s ``Model``) on ``inputs`` (fake tensors
    of the size planned for: plan.py)."""
    result, covered, values = plan_segment(task_id, module, model, inputs, source, seed)
    if values is not None:
        # The GEMM alternative (Triton's skeleton takes the GEMM into the kernel): planned on its own
        # trace, as the segment's rewrite changed that one; a failure there leaves the plan as it is.
        result.gemm = plan_gemm(task_id, module, model, inputs, values, source, covered)
    return result


def write(plan: ScaffoldPlan, target: str) -> Scaffold:
    chosen = plan.for_target(target)  # Triton takes a GEMM into the kernel where the planner found one
    sc = write_segment(chosen, target)
    if sc.available and chosen.segment is not None and chosen.segment.kind == SegmentKind.GEMM:
        sc.library_twin = _library_twin(plan, chosen, target)
    return sc


def _library_twin(plan: ScaffoldPlan, gemm: ScaffoldPlan, target: str) -> Scaffold | None:
    """The skeleton that leaves the GEMM to the library (cuBLAS through torch) and runs the same
    epilogue as an elementwise kernel after it, where a region written for the GEMM skeleton is one
    for it too: the same lines after the GEMM, over inputs of the same names. Speed search times
    both with the verified region (strategies/search/tune.py): the library's GEMM and one extra pass over
    its output is about 1.0x torch.compile; the fp32 GEMM skeleton in 3xTF32 1.1-1.9x (H200,
    docs/results/skeleton-speed-h200.md), fp16 and bf16 GEMMs in Triton near cuBLAS's."""
    if not plan.available or plan.segment is None or plan.segment.kind != SegmentKind.ELEMENTWISE:
        return None
    after = [line for line in gemm.segment.torch_lines if not line.lstrip().startswith("#")]
    same_inputs = {a.name for a in plan.segment.args} == {a.name for a in gemm.segment.args}
    if after != plan.segment.torch_lines or not same_inputs:
        return None
    twin = write_segment(plan, target)
    return twin if twin.available else None
