"""benchmarks/kernel_profile.py reads Nsight Compute's raw CSV: the header, a units row it must skip,
then one row per profiled kernel in launch order (the order its two reads, with and without the
NVTX names, are matched by)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "kernel_profile.py"

RAW = '''==PROF== Connected to process 1234
"ID","Process ID","Kernel Name","gpu__time_duration.sum","dram__bytes.sum"
"","","","nsecond","byte"
"0","1234","triton_red_fused_native_layer_norm_0","128000","511000000"
"1","1234","kw_fused_kernel","214000","514000000"
'''


def _bench():
    spec = importlib.util.spec_from_file_location("kernel_profile", BENCH)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_units_row_and_ncus_own_lines_are_not_kernels() -> None:
    rows = _bench()._rows(RAW)
    assert [r["Kernel Name"] for r in rows] == ["triton_red_fused_native_layer_norm_0", "kw_fused_kernel"]
    assert rows[1]["gpu__time_duration.sum"] == "214000"


def test_every_column_is_a_metric_ncu_is_asked_for() -> None:
    bench = _bench()
    assert set(bench.SCALE) <= set(bench.METRICS)
    assert all("." in m or m.startswith("launch__") for m in bench.METRICS.values())
