"""A task's whole scaffold plan and its skeleton for a target: the segment planner (plan.py) and
skeletons (skeleton.py) with the GEMM layout (gemm_plan.py, gemm_skeleton.py) on top. Its own
module because the GEMM side builds on both, so neither may import it back."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from torch import nn

from kernelwright.scaffold.gemm_plan import plan_gemm
from kernelwright.scaffold.gemm_skeleton import write_triton_gemm
from kernelwright.scaffold.plan import plan_segment
from kernelwright.scaffold.skeleton import write_segment
from kernelwright.scaffold.types import Scaffold, ScaffoldPlan, SegmentKind


def plan(task_id: str, module: Any, model: nn.Module, inputs: Sequence[Any], source: str) -> ScaffoldPlan:
    """The scaffold plan for ``model`` (built from ``module``'s ``Model``) on ``inputs``."""
    result, covered, values = plan_segment(task_id, module, model, inputs, source)
    if values:
        # The GEMM alternative (Triton's skeleton takes the GEMM into the kernel): planned on its own
        # trace, as the segment's rewrite changed that one; a failure there leaves the plan as it is.
        result.gemm = plan_gemm(task_id, module, model, inputs, values, source, covered)
    return result


def write(plan: ScaffoldPlan, target: str) -> Scaffold:
    plan = plan.for_target(target)  # Triton takes a GEMM into the kernel where the planner found one
    if plan.available and plan.segment is not None and plan.segment.kind == SegmentKind.GEMM:
        return write_triton_gemm(plan, plan.segment)
    return write_segment(plan, target)
