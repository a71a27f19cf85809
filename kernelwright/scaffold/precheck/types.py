"""Records of the region pre-check: what it found for one region, in a form a repair prompt can show."""

from __future__ import annotations

import enum
from array import array
from dataclasses import dataclass
from typing import Optional

from pydantic import BaseModel, Field


class PrecheckStatus(str, enum.Enum):
    PASS = "pass"  # every probe matched the segment computed by PyTorch
    COUNTEREXAMPLE = "counterexample"  # a probe where the region's value differs
    COMPILE_ERROR = "compile_error"  # the region's math does not compile (C++/CUDA) or parse/bind (Triton)
    RUNTIME_ERROR = "runtime_error"  # it crashed, hung or raised on the probes
    UNSUPPORTED = "unsupported"  # the pre-check cannot judge it (no probes, torch calls in the region, ...)


class Counterexample(BaseModel):
    index: int  # the probe element (elementwise) or probe row (row segments)
    row: bool = False  # a row segment: `index` is a row, `inputs` a few of its columns
    label: str  # what kind of probe: "edge", "sweep", "drawn", "constant", "one large value", ...
    column: Optional[int] = None  # row segments: the first column that differs
    # the inputs at that element; for rows, a few columns around `column`, keyed "x[j]"
    inputs: dict[str, float] = Field(default_factory=dict)
    expected: float
    got: float
    atol: float
    rtol: float
    bad: int = 1  # how many probe values differ in all


class PrecheckResult(BaseModel):
    status: PrecheckStatus
    target: str
    seconds: float = 0.0  # wall time of the call this result came from, shared by its regions
    counterexample: Optional[Counterexample] = None
    error: str = ""  # compile_error: the compiler's first error; runtime_error / unsupported: why
    probes: int = 0  # probe values compared

    @property
    def passed(self) -> bool:
        return self.status == PrecheckStatus.PASS

    def render(self) -> str:
        """A few lines for a repair prompt."""
        if self.status == PrecheckStatus.PASS:
            return f"The region matches PyTorch on all {self.probes} probe values."
        if self.status != PrecheckStatus.COUNTEREXAMPLE or self.counterexample is None:
            return {"compile_error": "The region does not compile: ", "runtime_error": "The region failed on the probes: ",
                    "unsupported": "Not checked: "}[self.status.value] + self.error
        c = self.counterexample
        where = (f"probe {c.index} ({c.label})" if not c.row else f"probe row {c.index} ({c.label})"
                 + (f", column {c.column}" if c.column is not None else ""))
        args = ", ".join(f"{k} = {_num(v)}" for k, v in c.inputs.items())
        return (f"Wrong result at {where}: with {args} PyTorch gives {_num(c.expected)}, the region gives "
                f"{_num(c.got)} ({c.bad} of {self.probes} probe values differ beyond atol={c.atol:g}, rtol={c.rtol:g}).")


def _num(v: float) -> str:
    return f"{v:.6g}"


@dataclass
class RegionRun:
    """One region's fate in a harness (native.py, tl_shim.py): its values on the probes, or why
    there are none. Internal to the pre-check; the caller gets a PrecheckResult."""

    values: Optional[array] = None
    compile_error: str = ""
    runtime_error: str = ""
    unsupported: str = ""
