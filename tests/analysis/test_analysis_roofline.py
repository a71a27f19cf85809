"""Roofline numbers against hand-computed values, and the device peak table."""

from __future__ import annotations

import json

import pytest
import torch
from torch import nn

from kernelwright.analysis import DEVICES, build_graph, device_peaks, roofline
from kernelwright.analysis.roofline import CPU_FALLBACK, cpu_peaks
from tests.analysis._helpers import reference

H200 = DEVICES["h200"]


def test_gemm_fp32_on_h200():
    m, k, n = 96, 200, 136  # L1/10 at small size
    r = roofline(build_graph(*reference("builtin/L1/10_matmul")), "h200")
    flops = 2 * m * k * n
    nbytes = 4 * (m * k + k * n + m * n)
    assert (r.flops, r.library_flops, r.elementwise_flops) == (flops, flops, 0)
    assert (r.bytes, r.bytes_inputs, r.bytes_params, r.bytes_outputs) == (nbytes, 4 * (m * k + k * n), 0, 4 * m * n)
    assert r.compute_dtype == "fp32"  # the evaluator runs fp32 without TF32
    assert r.compute_ms == pytest.approx(flops / 67e12 * 1e3)
    assert r.memory_ms == pytest.approx(nbytes / 4.3e12 * 1e3)
    assert r.intensity == pytest.approx(flops / nbytes)  # 21.96 FLOP/B, above the fp32 ridge of 15.6
    assert (r.bound, r.floor_ms) == ("compute", pytest.approx(r.compute_ms))
    assert r.fraction_of_floor(2 * r.floor_ms) == pytest.approx(0.5)
    tf32 = roofline(build_graph(*reference("builtin/L1/10_matmul")), "h200", allow_tf32=True)
    assert tf32.compute_dtype == "tf32" and tf32.compute_ms == pytest.approx(flops / 495e12 * 1e3)


def test_gemm_bf16_uses_the_measured_tensor_core_peak():
    class MatMul(nn.Module):
        def forward(self, a, b):
            return a @ b

    a, b = torch.randn(64, 128, dtype=torch.bfloat16), torch.randn(128, 32, dtype=torch.bfloat16)
    r = roofline(MatMul(), "h200", inputs=[a, b])
    assert r.compute_dtype == "bf16" and r.flops == 2 * 64 * 128 * 32
    assert r.bytes == 2 * (64 * 128 + 128 * 32 + 64 * 32)
    assert r.compute_ms == pytest.approx(r.flops / 790e12 * 1e3)
    assert H200.sources["bf16"] == "measured" and H200.sources["bandwidth"] == "measured"
    assert H200.sources["fp32"] == "datasheet" and H200.sources["tf32"] == "datasheet"


def test_elementwise_bias_add_on_h200():
    rows, features = 48, 520  # L1/02 at small size
    r = roofline(build_graph(*reference("builtin/L1/02_bias_add")), "h200")
    nbytes = 4 * (rows * features + features + rows * features)
    assert (r.flops, r.library_flops, r.elementwise_flops) == (rows * features, 0, rows * features)
    assert (r.bytes, r.bytes_params) == (nbytes, 4 * features)
    assert r.bound == "memory"
    assert r.floor_ms == pytest.approx(nbytes / 4.3e12 * 1e3)
    assert r.compute_ms == pytest.approx(rows * features / 67e12 * 1e3)


def test_linear_epilogue_counts_gemm_and_per_element_work():
    b, i, o = 32, 200, 136  # L2/01: linear (with bias), gelu, mul
    r = roofline(build_graph(*reference("builtin/L2/01_linear_gelu_scale")), "a100")
    assert r.library_flops == 2 * b * i * o
    assert r.elementwise_flops == 2 * b * o  # gelu and mul: one per output element each
    assert r.bytes == 4 * (b * i + o * i + o + b * o)
    assert r.device == "a100_sxm"


def test_embedding_reads_only_gathered_rows():
    batch, seq, dim = 4, 50, 64  # L1/14: the 1000-row table is larger than the rows it gathers
    r = roofline(build_graph(*reference("builtin/L1/14_embedding_lookup")), "h100")
    out = 4 * batch * seq * dim
    assert r.bytes == 8 * batch * seq + out + out and r.flops == 0
    assert r.device == "h100_sxm" and r.bound == "memory"


def test_softmax_and_bf16_residual_rmsnorm():
    r = roofline(build_graph(*reference("builtin/L1/03_softmax")), "h200")
    assert r.flops == 5 * 64 * 1000 and r.bytes == 2 * 4 * 64 * 1000
    tokens, hidden = 48, 256  # bf16 activations and weight: 2 bytes each
    r = roofline(build_graph(*reference("builtin/L2/07_residual_add_rmsnorm_bf16")), "h200")
    assert (r.bytes_inputs, r.bytes_outputs, r.bytes_params) == (2 * 2 * tokens * hidden, 2 * tokens * hidden,
                                                                2 * hidden)


def test_device_table_and_lookup():
    assert set(DEVICES) == {"h200", "h100_sxm", "a100_sxm"}
    assert device_peaks("NVIDIA H100").key == "h100_sxm" and device_peaks("A100").key == "a100_sxm"
    assert device_peaks("cpu", measure=False) == CPU_FALLBACK
    with pytest.raises(ValueError, match="unknown device"):
        device_peaks("tpu")
    for peaks in DEVICES.values():
        assert set(peaks.sources) == {"bandwidth", "fp32", "tf32", "bf16", "fp16"}
        assert peaks.flops["fp32"] < peaks.flops["tf32"] < peaks.flops["fp16"] * 1.01


def test_cpu_peaks_are_measured_once_and_cached(tmp_path):
    first = cpu_peaks(tmp_path)
    assert first.key == "cpu" and first.sources["bandwidth"] == "measured"
    assert first.bandwidth > 1e8 and first.flops["fp32"] > 1e8
    stored = json.loads((tmp_path / "device_peaks.json").read_text())
    assert len(stored) == 1
    assert cpu_peaks(tmp_path) == first  # the second call reads the cache
