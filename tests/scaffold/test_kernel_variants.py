"""The skeleton variants benchmarks/kernel_variants.py times on the device are the same computation:
each, with the oracle's region, is judged correct under Triton's interpreter (a variant that
computed something else would time nothing worth comparing), and each still applies to today's
skeleton text (the benchmark raises where one no longer changes it)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from kernelwright.records import Verdict
from kernelwright.scaffold import SegmentKind, plan_tasks, write
from kernelwright.scaffold.oracle import region
from kernelwright.tasks import load_task

HAVE_TRITON = importlib.util.find_spec("triton") is not None
BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "kernel_variants.py"
LAYER_NORM = "builtin/L1/08_layer_norm"  # a row kernel with two broadcast vectors
MATMUL = "builtin/L1/10_matmul"  # the GEMM skeleton with an empty epilogue
CHANNEL_AFFINE = "builtin/L2/06_channel_affine_hardswish_residual"  # elementwise, two broadcast inputs


def _bench():
    spec = importlib.util.spec_from_file_location("kernel_variants", BENCH)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.slow  # twelve evaluations under the Triton interpreter
@pytest.mark.skipif(not HAVE_TRITON, reason="triton is not installed")
def test_every_variant_is_the_same_computation(fast_cfg) -> None:
    from kernelwright.evaluate import evaluate

    bench = _bench()
    tasks = [load_task(LAYER_NORM), load_task(MATMUL), load_task(CHANNEL_AFFINE)]
    cfg = fast_cfg(time=False, extra_env={"TRITON_INTERPRET": "1"})
    seen = set()
    for task, plan in zip(tasks, plan_tasks(tasks)):
        sc = write(plan, "triton")
        kind = plan.for_target("triton").segment.kind
        table = {SegmentKind.GEMM: bench.GEMM_VARIANTS, SegmentKind.ROW: bench.ROW_VARIANTS,
                 SegmentKind.ELEMENTWISE: bench.ELEMENTWISE_VARIANTS}[kind]
        programs = bench.programs_for(sc.program_with(region(sc)), kind, list(table))
        for label, program in programs.items():
            if label.startswith("as is") or (kind != SegmentKind.GEMM and not label.endswith(" w4")) \
                    or " b2048 " in label:
                continue  # the launch changes no result; one launch a variant
            got = evaluate(task, program, cfg)
            assert got.verdict == Verdict.CORRECT and got.custom_kernel, (task.id, label, got.verdict, got.error)
            seen.add((kind, label.split(" ")[0]))
    assert seen == {(k, name) for k, table in ((SegmentKind.ROW, bench.ROW_VARIANTS), (SegmentKind.GEMM, bench.GEMM_VARIANTS),
                                               (SegmentKind.ELEMENTWISE, bench.ELEMENTWISE_VARIANTS)) for name in table}


def test_a_variant_that_no_longer_applies_is_an_error() -> None:
    bench = _bench()
    with pytest.raises(ValueError, match="does not change"):
        bench.programs_for("def kw_fused_kernel(x):\n    pass\n", SegmentKind.GEMM, ["bk16"])
