"""The CUDA skeletons' broadcast paths on a real GPU, judged by the evaluator: a row kernel's
broadcast input in a pattern the kernel cannot read as one value or one vector a row (laid out
like x by the wrapper's _kw_bcast first), and the elementwise kernel's inputs read through the launch's
dividers (a channel's value, a vector along the last dimension). Each oracle region is correct and
its wrong twin is not. Run on the device machine (`bash ops/device_session.sh gputests FILE`)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from kernelwright.evaluate import evaluate  # noqa: E402
from kernelwright.records import Verdict  # noqa: E402
from kernelwright.scaffold import plan_tasks, write  # noqa: E402
from kernelwright.scaffold.oracle import region  # noqa: E402
from kernelwright.tasks import load_task  # noqa: E402

from tests.conftest import TASKS  # noqa: E402

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU")]


@pytest.mark.parametrize("task_id", [str(TASKS / "row_gather.py"), "builtin/L2/06_channel_affine_hardswish_residual",
                                     "builtin/L1/02_bias_add"])
def test_cuda_broadcast_paths_are_judged_correct(task_id, fast_cfg) -> None:
    task = load_task(task_id)
    plan = plan_tasks([task], device="cuda")[0]
    sc = write(plan, "cuda")
    if task_id.endswith("row_gather.py"):
        assert "_kw_bcast(g, shape, cols)" in sc.program  # the wrapper's layout of the pattern is what this checks
    cfg = fast_cfg(device="cuda", iters=20, warmup=2, timeout=900.0)
    good = evaluate(task, sc.program_with(region(sc)), cfg)
    assert good.verdict == Verdict.CORRECT and good.custom_kernel, (good.verdict, good.error)
    bad = evaluate(task, sc.program_with(region(sc, wrong=True)), cfg)
    assert bad.verdict == Verdict.WRONG_OUTPUT, (bad.verdict, bad.error)
