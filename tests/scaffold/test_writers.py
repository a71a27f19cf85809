"""The skeleton writers' registry: every (target, segment kind) a plan can ask for has exactly one
writer, and one it cannot gets a one-line error naming both (what each writer writes is pinned byte
for byte by test_program_digest.py)."""

from __future__ import annotations

import pytest

from kernelwright.scaffold.types import GEMM_TARGETS, SegmentKind
from kernelwright.scaffold.writers import WRITERS, launch_variants, writer_for

TARGETS = ("cpp", "cuda", "triton")


def test_every_plannable_target_and_kind_has_one_writer() -> None:
    pairs = [(w.target, k) for w in WRITERS for k in w.kinds]
    assert len(pairs) == len(set(pairs)), "two writers claim one (target, kind)"
    wanted = {(t, k) for t in TARGETS for k in (SegmentKind.ELEMENTWISE, SegmentKind.ROW)}
    wanted |= {(t, SegmentKind.GEMM) for t in GEMM_TARGETS}
    assert set(pairs) == wanted
    for target, kind in wanted:
        assert writer_for(target, kind).target == target


def test_a_pair_without_a_writer_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="no cuda skeleton for a gemm segment"):
        writer_for("cuda", SegmentKind.GEMM)
    with pytest.raises(ValueError, match="no rocm skeleton for a row segment"):
        writer_for("rocm", SegmentKind.ROW)


def test_launch_variants_leave_out_the_default() -> None:
    from kernelwright.scaffold.types import KernelArg, Segment

    x = KernelArg(name="x", origin="x", shape=[8, 4096], dtype="float32", main=True, describe="the input")
    seg = Segment(kind=SegmentKind.ROW, nodes=["a"], targets=["softmax"], torch_lines=["x = x.softmax(-1)"],
                  args=[x], out_shape=[8, 4096], out_dtype="float32", row_dims=1, rows=8, cols=4096)
    for target in TARGETS:
        default = writer_for(target, seg.kind).default_launch(seg)
        assert default not in launch_variants(seg, target)
    assert launch_variants(seg, "cuda")  # the row kernel has settings worth timing
