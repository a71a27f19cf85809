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

from kernelwright.scaffold.skeleton import BCAST_HELPER, TRITON_ROW_AT, TRITON_ROW_MODE


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


CUDA_CHECK = r'''
int main() {
    long bad = 0, checked = 0;
    const int64_t big = int64_t(1) << 33;  // past 32 bits: the 64-bit path
    const int64_t sizes[] = {1, 2, 3, 4, 5, 7, 8, 12, 16, 33, 64, 100, 4096, big};
    for (int64_t inner : sizes) for (int64_t span : sizes) {
        const int64_t starts[] = {0, 4, inner * span - 4, inner * span + 8, 3 * inner * span + 12, big * 3 + 4};
        for (int64_t base : starts) {
            if (base < 0) continue;
            int64_t at[4];
            kw_bcast_run<4>(base, inner, span, at);
            for (int k = 0; k < 4; ++k, ++checked) bad += at[k] != (base + k) / inner % span;
        }
        for (int64_t cols : {int64_t(1), int64_t(4), int64_t(12), int64_t(4096)}) for (int64_t row : {0, 1, 5, 777}) {
            const KwRowBcast b = kw_row_bcast(row, cols, inner, span);
            for (int64_t j = 0; j < cols && j < 64; ++j, ++checked)
                bad += kw_row_at(b, row, cols, j, inner, span) != (row * cols + j) / inner % span;
        }
    }
    printf("%ld %ld\n", checked, bad);
    return 0;
}
'''


@pytest.mark.build
def test_cudas_positions_found_once_are_the_per_value_positions(tmp_path) -> None:
    """CUDA's kw_bcast_run (four consecutive elements, one division) and kw_row_bcast/kw_row_at (a
    row, one division) against `(i / inner) % span`, in 32-bit and 64-bit ranges, compiled by the
    host compiler through the pre-check's device shim (the code nvcc builds, on the host)."""
    from kernelwright.scaffold.precheck.native import COMPILER, FLAGS
    from kernelwright.scaffold.precheck.native_shim import COMMON, CUDA_SHIM
    from kernelwright.scaffold.skeleton import CUDA_IO

    src = tmp_path / "check.cpp"
    src.write_text(COMMON + CUDA_SHIM + CUDA_IO + CUDA_CHECK)
    subprocess.run([COMPILER, *FLAGS, str(src), "-o", str(tmp_path / "check")], check=True, capture_output=True)
    checked, bad = map(int, subprocess.run([str(tmp_path / "check")], check=True, capture_output=True,
                                           text=True).stdout.split())
    assert checked > 10_000 and bad == 0
