"""A Triton row kernel's broadcast inputs: the position found once a row (kw_row_at's modes 0 and 1)
is the per-value formula's for every broadcast pattern a row can meet; the launcher's mode choice
never picks a shortcut the pattern does not allow. Run as plain Python, the way the pre-check's
stand-in runs the kernel (triton.jit as the identity, blocks as NumPy arrays)."""

from __future__ import annotations

import itertools
import math
import subprocess
import types

import numpy as np
import pytest
import torch

from kernelwright.scaffold.writers.base import BCAST_HELPER
from kernelwright.scaffold.writers.triton import TRITON_ROW_AT, TRITON_ROW_MODE


def _helpers() -> dict:
    scope = {"math": math, "triton": types.SimpleNamespace(jit=lambda f: f),
             "tl": types.SimpleNamespace(constexpr=int)}
    exec(BCAST_HELPER + TRITON_ROW_AT + TRITON_ROW_MODE, scope)  # noqa: S102 -- our own skeleton text
    return scope


def _patterns(shape: tuple[int, ...]):
    """Every tensor shape that broadcasts to `shape` by dropping leading dims or setting dims to 1."""
    nd = len(shape)
    for drop in range(nd):
        tail = shape[drop:]
        for ones in itertools.product([False, True], repeat=len(tail)):
            yield tuple(1 if o else d for d, o in zip(tail, ones))


def test_a_rows_position_found_once_is_the_per_value_position() -> None:
    h = _helpers()
    modes_seen = set()
    for shape in [(2, 3, 4, 5), (3, 8), (4, 2, 6)]:
        for k in range(1, len(shape)):  # the row: the last k dims
            cols, rows = math.prod(shape[-k:]), math.prod(shape[:-k])
            offs = np.arange(cols, dtype=np.int64)
            for pshape in _patterns(shape):
                t = torch.arange(math.prod(pshape), dtype=torch.float32).reshape(pshape)
                values, inner, span = h["_kw_bcast"](t, shape)
                want = t.expand(shape).reshape(rows, cols).numpy()
                mode = h["_kw_row_mode"](inner, span, cols)
                modes_seen.add(mode)
                for row in range(rows):
                    at = h["kw_row_at"](row, cols, offs, inner, span, mode)
                    got = values.numpy()[np.broadcast_to(at, (cols,))]
                    assert np.array_equal(got, want[row]), (shape, k, pshape, mode, row)
    assert modes_seen == {0, 1, 2}  # every mode met, the shortcuts and the per-value formula


def test_a_row_kernels_broadcast_input_is_one_value_or_one_vector_a_row() -> None:
    """Given the row length, _kw_bcast lays out like x every pattern that is neither one value a row
    nor a vector along it (what the CUDA row kernel's kw_row_vec can read), and the values stay the
    broadcast tensor's."""
    h = _helpers()
    laid_out = 0
    for shape in [(2, 3, 4, 5), (3, 8), (4, 2, 6)]:
        for k in range(1, len(shape)):
            cols = math.prod(shape[-k:])
            for pshape in _patterns(shape):
                t = torch.arange(math.prod(pshape), dtype=torch.float32).reshape(pshape)
                values, inner, span = h["_kw_bcast"](t, shape, cols)
                assert inner % cols == 0 or (inner == 1 and span % cols == 0), (shape, k, pshape)
                flat = torch.arange(math.prod(shape))
                assert torch.equal(values[(flat // inner) % span], t.expand(shape).reshape(-1)), (shape, k, pshape)
                laid_out += values.numel() == math.prod(shape) and t.numel() < values.numel()
    assert laid_out > 0  # some patterns needed the layout


CUDA_CHECK = r"""
static float kw_vals[4096 * 4];
int main() {
    long bad = 0, checked = 0;
    // the dividers: n / d for n below 2^31 and every kind of d (1, powers of two, odd, the largest)
    const int64_t ds[] = {1, 2, 3, 4, 5, 7, 12, 100, 641, 4096, 65535, 65536, 1000003, (int64_t(1) << 30) + 1,
                          0x7fffffff};
    for (int64_t d : ds) {
        const KwDiv v = kw_divider_of(d);
        for (uint32_t n : {0u, 1u, 2u, 3u, 99u, 4095u, 4096u, 65536u, 1234567u, 0x3fffffffu, 0x7ffffffeu, 0x7fffffffu})
            for (uint32_t e : {0u, 1u, 2u}) {
                const uint32_t m = n >= e ? n - e : n;
                bad += kw_div(m, v) != m / d; ++checked;
            }
        for (uint32_t m = static_cast<uint32_t>(d > 4 ? d - 4 : 0); m < d * 3 + 4 && m <= 0x7fffffffu && m < d + 70000; ++m, ++checked)
            bad += kw_div(m, v) != m / d;
        uint32_t r = 12345u;  // and dividends spread over the whole range (a linear congruential walk)
        for (int i = 0; i < 200000; ++i, ++checked) {
            r = r * 1664525u + 1013904223u;
            const uint32_t m = r >> 1;
            bad += kw_div(m, v) != m / d;
        }
    }
    bad += kw_divider_of(0).d != 0 || kw_divider_of(int64_t(1) << 31).d != 0;  // no magic: the 64-bit path
    for (int i = 0; i < 4096 * 4; ++i) kw_vals[i] = static_cast<float>(i);
    const int64_t big = int64_t(1) << 33;  // past 32 bits: the 64-bit path
    const int64_t sizes[] = {1, 2, 3, 4, 5, 7, 8, 12, 16, 33, 64, 100, 4096, big};
    for (int64_t inner : sizes) for (int64_t span : sizes) {
        const int64_t starts[] = {0, 4, inner * span - 4, inner * span + 8, 3 * inner * span + 12, big * 3 + 4};
        for (int64_t base : starts) {
            if (base < 0) continue;
            int64_t at[4];
            kw_bcast_run<4>(base, inner, span, at);
            for (int k = 0; k < 4; ++k, ++checked) bad += at[k] != (base + k) / inner % span;
            if (span > 4096 || base % 4 != 0) continue;  // kw_bcast_load4 reads the values: span of them
            const KwDiv di = kw_divider_of(inner), dsp = kw_divider_of(span);
            for (int64_t n : {base + 4, base + 3, base + 1}) {  // whole, and the tail's element by element
                float v[4];
                kw_bcast_load4(kw_vals, base, n, inner, span, di, dsp, v);
                for (int k = 0; k < 4; ++k, ++checked)
                    bad += v[k] != (base + k < n ? static_cast<float>((base + k) / inner % span) : 0.0f);
            }
        }
        for (int64_t cols : {int64_t(1), int64_t(4), int64_t(12), int64_t(4096)}) for (int64_t row : {0, 1, 5, 777}) {
            if (!(inner % cols == 0 || (inner == 1 && span % cols == 0))) continue;  // the host lays these out
            int64_t step;
            const float* base = kw_row_vec(kw_vals, row, cols, inner, span, step);
            for (int64_t j = 0; j < cols && j < 64; ++j, ++checked)
                bad += (base - kw_vals) + j * step != (row * cols + j) / inner % span;
        }
    }
    printf("%ld %ld\n", checked, bad);
    return 0;
}
"""


@pytest.mark.build
def test_cudas_positions_found_once_are_the_per_value_positions(tmp_path) -> None:
    """CUDA's broadcast positions against `(i / inner) % span`: the launch's dividers (kw_div), the
    elementwise kernel's four values a step (kw_bcast_load4: one value, a vector, position by
    position, the tail) and their stepping (kw_bcast_run), and a row's pointer and step
    (kw_row_vec), in 32-bit and 64-bit ranges, compiled by the host compiler through the
    pre-check's device shim (the code nvcc builds, on the host)."""
    from kernelwright.scaffold.precheck.native import COMPILER, FLAGS
    from kernelwright.scaffold.precheck.native_shim import COMMON, CUDA_SHIM
    from kernelwright.scaffold.writers.cuda import CUDA_IO

    src = tmp_path / "check.cpp"
    src.write_text(COMMON + CUDA_SHIM + CUDA_IO + CUDA_CHECK)
    subprocess.run([COMPILER, *FLAGS, str(src), "-o", str(tmp_path / "check")], check=True, capture_output=True)
    checked, bad = map(int, subprocess.run([str(tmp_path / "check")], check=True, capture_output=True,
                                           text=True).stdout.split())
    assert checked > 10_000 and bad == 0


STAGE_CHECK = r'''
alignas(16) static uint16_t kw_g16[4096 + 8];
alignas(16) static float kw_g32[4096 + 8];
static int64_t kw_cols;
static int kw_shift;
static uint16_t* kw_s16;
static float* kw_s32;
static void kw_stage_body() {
    KW_DYNAMIC_SHARED(kw_stage);
    int64_t off = 0;
    uint16_t* a = kw_stage_slot<uint16_t>(kw_stage, off, kw_cols);
    float* b = kw_stage_slot<float>(kw_stage, off, kw_cols);
    kw_stage_row(kw_g16 + kw_shift, a, kw_cols);
    kw_stage_row(kw_g32 + kw_shift, b, kw_cols);
    __syncthreads();
    if (threadIdx.x == 0) { kw_s16 = a; kw_s32 = b; }
}
int main() {
    for (int i = 0; i < 4096 + 8; ++i) { kw_g16[i] = static_cast<uint16_t>(i * 7 + 1); kw_g32[i] = i * 0.5f + 3.0f; }
    long bad = 0, checked = 0;
    for (int64_t cols : {int64_t(1), int64_t(7), int64_t(8), int64_t(12), int64_t(64), int64_t(100), int64_t(4096)})
        for (int shift : {0, 1}) {  // 1: a row that does not start on 16 bytes (the element-wise path)
            kw_cols = cols; kw_shift = shift;
            kw_launch(1, 32, kw_stage_body);
            bad += ((reinterpret_cast<uintptr_t>(kw_s16) | reinterpret_cast<uintptr_t>(kw_s32)) & 15) != 0;
            bad += reinterpret_cast<char*>(kw_s32) - reinterpret_cast<char*>(kw_s16) != (cols * 2 + 15) / 16 * 16;
            for (int64_t j = 0; j < cols; ++j, checked += 2)
                bad += (kw_s16[j] != kw_g16[shift + j]) + (kw_s32[j] != kw_g32[shift + j]);
        }
    printf("%ld %ld\n", checked, bad);
    return 0;
}
'''


@pytest.mark.build
def test_cudas_staged_rows_are_the_rows_in_their_own_type(tmp_path) -> None:
    """kw_stage_row copies a row to shared memory as it is (16 bytes at a time where aligned, else
    value by value) and kw_stage_slot lays the rows of two types out 16-byte aligned, each taking
    its own type's bytes (a half-precision row half a float row's): a 2-byte and a 4-byte row of
    several lengths, aligned and not, staged by 32 threads of the pre-check's device shim."""
    from kernelwright.scaffold.precheck.native import COMPILER, FLAGS
    from kernelwright.scaffold.precheck.native_shim import COMMON, CUDA_SHIM
    from kernelwright.scaffold.writers.cuda import CUDA_IO

    src = tmp_path / "stage.cpp"
    src.write_text(COMMON + CUDA_SHIM + CUDA_IO + STAGE_CHECK)
    subprocess.run([COMPILER, *FLAGS, str(src), "-o", str(tmp_path / "stage")], check=True, capture_output=True)
    checked, bad = map(int, subprocess.run([str(tmp_path / "stage")], check=True, capture_output=True,
                                           text=True).stdout.split())
    assert checked == 2 * 2 * (1 + 7 + 8 + 12 + 64 + 100 + 4096) and bad == 0
