"""The target `optimize` picks on a GPU when none is asked for: Triton where the module's GEMM and
the ops after it fit the fused GEMM skeleton (CUDA's would leave the GEMM to the library, as
torch.compile does), CUDA for everything else and whenever the scaffold is off. Real planning
children (the plan the run's scaffold then uses); planned on the CPU, as CI has no GPU."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from kernelwright.optimize.inputs import load_input
from kernelwright.strategies.defaults import gpu_target
from kernelwright.tasks import load_task

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="triton is not installed")
def test_a_gemm_with_an_epilogue_goes_to_triton_and_the_rest_to_cuda() -> None:
    gemm = load_input(str(ROOT / "examples" / "gemm_bias_gelu.py"), None, None)
    target, why = gpu_target(gemm, "cpu", scaffold=True)
    assert target == "triton" and "GEMM" in why
    assert gpu_target(gemm, "cpu", scaffold=False) == ("cuda", "")  # no scaffold: no skeleton to pick
    softmax = load_task("builtin/L1/03_softmax")
    assert gpu_target(softmax, "cpu", scaffold=True) == ("cuda", "")
