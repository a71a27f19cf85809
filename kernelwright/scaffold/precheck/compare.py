"""The region's values against the segment's, as the evaluator compares (measure/compare.py), but
per probe value so the first difference can be shown. No torch: the parent stays light.

* tolerance: the evaluator's defaults for the segment's output dtype (1e-4 for float32, 1e-2 for
  float16 / bfloat16, atol and rtol alike);
* a value matches when |got - expected| <= atol + rtol * |expected|, NaN matches NaN only, an
  infinity matches the same infinity only (torch.allclose with equal_nan=True, which is what the
  evaluator's check comes to once it has counted non-finite values where the reference has none);
* the region's float result is rounded to the output dtype first, as the kernel's store does.
"""

from __future__ import annotations

import base64
import math
import struct
from array import array
from typing import Optional

from kernelwright.scaffold.precheck.types import Counterexample
from kernelwright.scaffold.types import Probes, Segment, SegmentKind

DEFAULT_TOL = {"float32": 1e-4, "float16": 1e-2, "bfloat16": 1e-2}
ROW_WINDOW = 2  # columns shown on each side of the first bad one


def decode(text: str) -> array:
    a = array("f")
    a.frombytes(base64.b64decode(text))
    return a


def encode_floats(values: list[float] | array) -> str:
    """The probes' encoding (probes.encode) of float32 values, without torch."""
    return base64.b64encode(array("f", values).tobytes()).decode()


def tolerance(seg: Segment) -> float:
    return DEFAULT_TOL.get(seg.out_dtype, 1e-4)


def round_to(v: float, dtype: str) -> float:
    """``v`` (a float32) stored as ``dtype`` and read back."""
    if dtype == "float16":
        try:
            return struct.unpack("<e", struct.pack("<e", v))[0]
        except OverflowError:  # beyond the largest half: the cast gives an infinity
            return math.copysign(math.inf, v)
    if dtype == "bfloat16":
        if math.isnan(v):
            return v
        bits = struct.unpack("<I", struct.pack("<f", v))[0]
        bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000  # round to nearest even
        return struct.unpack("<f", struct.pack("<I", bits))[0]
    return v


def close(got: float, expected: float, tol: float) -> bool:
    if math.isnan(got) or math.isnan(expected):
        return math.isnan(got) and math.isnan(expected)
    if math.isinf(got) or math.isinf(expected):
        return got == expected
    return abs(got - expected) <= tol + tol * abs(expected)


def first_difference(seg: Segment, probes: Probes, got: array) -> tuple[Optional[Counterexample], int]:
    """(the first probe value that differs, or None; how many were compared)."""
    expected = decode(probes.expected)
    tol = tolerance(seg)
    if len(got) != len(expected):
        raise ValueError(f"the harness returned {len(got)} values for {len(expected)} probes")
    bad = [k for k in range(len(expected)) if not close(round_to(got[k], seg.out_dtype), expected[k], tol)]
    if not bad:
        return None, len(expected)
    k = bad[0]
    inputs = {name: decode(text) for name, text in probes.inputs.items()}
    row = seg.kind == SegmentKind.ROW
    per_row = row and seg.per_row_output
    if not row:
        shown = {name: vals[k] for name, vals in inputs.items()}
        index, label, column = k, probes.labels[k], None
    else:
        index = k if per_row else k // probes.cols
        column = None if per_row else k % probes.cols
        centre = column if column is not None else 0
        lo, hi = max(0, centre - ROW_WINDOW), min(probes.cols, centre + ROW_WINDOW + 1)
        shown = {f"{name}[{j}]": vals[index * probes.cols + j] for name, vals in inputs.items() for j in range(lo, hi)}
        label = probes.labels[index]
    ce = Counterexample(index=index, row=row, label=label, column=column, inputs=shown, expected=expected[k],
                        got=round_to(got[k], seg.out_dtype), atol=tol, rtol=tol, bad=len(bad))
    return ce, len(expected)
