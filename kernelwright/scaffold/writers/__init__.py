"""The skeleton writers, one per target and segment family, behind one protocol (base.SkeletonWriter):

* ``cpp.py``: CPU C++ (``load_inline``), elementwise and row segments;
* ``cuda.py``: CUDA (``load_inline``), elementwise and row segments;
* ``triton.py``: Triton, elementwise and row segments;
* ``triton_gemm.py``: Triton, a GEMM with its epilogue as the region.

``clike.py`` holds what the two ``load_inline`` writers share, ``base.py`` what all share. A new
layout or target is one module with one writer class, listed in WRITERS.
"""

from __future__ import annotations

from typing import Optional

from kernelwright.scaffold.types import Scaffold, ScaffoldPlan, Segment, SegmentKind
from kernelwright.scaffold.writers.base import SkeletonWriter, with_launch
from kernelwright.scaffold.writers.cpp import CppWriter
from kernelwright.scaffold.writers.cuda import CudaWriter
from kernelwright.scaffold.writers.triton import TritonWriter
from kernelwright.scaffold.writers.triton_gemm import TritonGemmWriter

__all__ = ["WRITERS", "SkeletonWriter", "default_launch", "launch_variants", "shared_programs", "with_launch",
           "write_segment", "writer_for"]

WRITERS: tuple[SkeletonWriter, ...] = (CppWriter(), CudaWriter(), TritonWriter(), TritonGemmWriter())
_BY_KIND: dict[tuple[str, SegmentKind], SkeletonWriter] = {(w.target, k): w for w in WRITERS for k in w.kinds}


def writer_for(target: str, kind: SegmentKind) -> SkeletonWriter:
    """The writer of `target`'s skeletons for segments of `kind`."""
    try:
        return _BY_KIND[(target, kind)]
    except KeyError:
        raise ValueError(f"no {target} skeleton for a {kind.value} segment") from None


def write_segment(plan: ScaffoldPlan, target: str) -> Scaffold:
    """The skeleton of the plan's segment for `target`, or the plan's reason where it has none."""
    if not plan.available or plan.segment is None:
        return Scaffold(task_id=plan.task_id, target=target, available=False, reason=plan.reason)
    return writer_for(target, plan.segment.kind).write(plan, plan.segment)


def default_launch(seg: Segment, target: str) -> dict[str, int]:
    """The launch settings a skeleton starts with (its `KW_LAUNCH` line; {} where it has none)."""
    return writer_for(target, seg.kind).default_launch(seg)


def launch_variants(seg: Segment, target: str) -> list[dict[str, int]]:
    """Other launch settings worth timing once a region is correct, the default excluded."""
    writer = writer_for(target, seg.kind)
    default = writer.default_launch(seg)
    return [g for g in writer.launch_grid(seg) if g != default]


def shared_programs(sc: Scaffold, regions: list[str]) -> Optional[list[str]]:
    """One program per region, all with one extension (one build serves them: the `load_inline`
    targets); None where there is nothing to share (Triton compiles at launch, fewer than two
    regions, no skeleton)."""
    if not sc.available or sc.segment is None:
        return None
    return writer_for(sc.target, sc.segment.kind).shared_programs(sc, regions)
