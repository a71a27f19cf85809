"""Hostile candidates on a real GPU: the CUDA and Triton forms of the timing, work and forged-verdict
attacks that tests/evaluate/test_timing_attacks.py, test_work_not_presence.py and
test_forged_verdicts.py prove on the CPU.

Judged with the static rules off: what is proved here is the dynamic layer on the GPU (fresh
inputs and an output check on every timed call, inputs compared after each call, the work stage).
Run on the device machine (docs/results/evaluator-gpu.md); skipped where no GPU is visible.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from kernelwright.evaluate import evaluate  # noqa: E402
from kernelwright.records import Verdict  # noqa: E402
from kernelwright.tasks import load_task  # noqa: E402

from tests.conftest import CANDIDATES, TASKS  # noqa: E402

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU")]
HOSTILE = CANDIDATES / "gpu" / "hostile"

# (file, the verdicts that are honest for it, words the error must hold)
CASES = [
    (HOSTILE / "decorative_cuda.py", {Verdict.NO_CUSTOM_KERNEL}, "does not depend on the custom code"),
    (HOSTILE / "copy_then_torch_cuda.py", {Verdict.NO_CUSTOM_KERNEL}, "copied"),
    (CANDIDATES / "cpu" / "hostile" / "work_triton_discarded.py", {Verdict.NO_CUSTOM_KERNEL},
     "does not depend on the custom code"),
    (HOSTILE / "stale_timed_cuda.py", {Verdict.CHEAT}, "wrong output on timed calls"),
    # the inputs are the judge's CUDA IPC arena (evaluate/cuda_arena.py), as on the CPU its shared
    # memory: a resize raises in the candidate's own call, and the reference has its own copy anyway
    (HOSTILE / "resize_input_cuda.py", {Verdict.RUNTIME_ERROR}, "not resizable"),
    # a memo that ever hits serves another call's output (caught: as a cheat by the timing checks,
    # or as a wrong output where a check's fresh inputs reused a place); one that never hits is honest
    (HOSTILE / "memo_ptr_cuda.py", {Verdict.CHEAT, Verdict.WRONG_OUTPUT, Verdict.CORRECT}, ""),
    # forged verdicts: the judge, which writes the verdict, never imports the candidate
    (HOSTILE / "forge_json_dumps_triton.py", {Verdict.WRONG_OUTPUT}, "differs from the reference"),
    (HOSTILE / "forge_os_write_triton.py", {Verdict.WRONG_OUTPUT}, "differs from the reference"),
    (HOSTILE / "forge_traceback_triton.py", {Verdict.WRONG_OUTPUT, Verdict.CRASH}, ""),
]


@pytest.fixture(scope="module")
def task():
    return load_task(str(TASKS / "bias_relu.py"))


@pytest.mark.parametrize("path,allowed,words", CASES, ids=[c[0].name for c in CASES])
def test_gpu_hostile(task, fast_cfg, path, allowed, words):
    r = evaluate(task, path.read_text(), fast_cfg(device="cuda", iters=100, warmup=10, static_checks=False))
    assert r.verdict in allowed, (r.verdict, r.error, r.output_tail)
    assert r.judge == "split"
    if r.verdict == Verdict.CORRECT:
        # the memo never served a timed call: no speedup it could have made (a served output costs no
        # kernel at all, far more than the honest fusion's ~2x over two PyTorch kernels)
        assert r.custom_kernel and r.speedup is not None and r.speedup < 5, r.speedup
    else:
        assert any(words in reason for reason in [r.error or "", *r.cheat_reasons]), (r.error, r.cheat_reasons)
