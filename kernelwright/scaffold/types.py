"""Records of scaffolded generation: what a kernel must compute, and the program built around it.

A ``Segment`` is derived in a child process from the traced reference (``plan.py``): the run of
elementwise / reduction / normalization ops the kernel replaces, its tensors and their
broadcasting, and the reference's own lines for it. A ``Scaffold`` is a complete candidate
program in one target language with one marked region (``writers/``); ``assemble`` splices a
model's answer into it. Plain data, so both cross process boundaries as JSON and replays of
recorded runs see byte-identical prompts.
"""

from __future__ import annotations

import enum
from typing import Optional

from pydantic import BaseModel, Field

from kernelwright.records import Versioned
from kernelwright.scaffold.compiled import as_compiled

# The one marker pair every target uses; the prompt and the splicer both read them from here.
BEGIN = "REGION BEGIN"
END = "REGION END"
# Targets whose skeleton takes a GEMM into the kernel (ScaffoldPlan.gemm): Triton's tl.dot gives a
# tiled, autotuned GEMM in a few lines; CUDA and C++ keep the library GEMM in PyTorch.
GEMM_TARGETS = frozenset({"triton"})


class SegmentKind(str, enum.Enum):
    ELEMENTWISE = "elementwise"  # out[i] depends on element i of each input (after broadcasting)
    ROW = "row"  # out row r depends on row r of the inputs: reductions, softmax, norms, scans
    # out = epilogue(A @ B (+ bias)): the GEMM itself is taken into the kernel (Triton only, see
    # ScaffoldPlan.gemm); the epilogue is elementwise on the fp32 accumulator, the main arg
    GEMM = "gemm"


class KernelArg(BaseModel):
    """One tensor the kernel reads."""

    name: str  # the variable name in the region: "x" for the main input, else from its origin
    origin: str  # the reference's name for it: an fx node ("linear") or a parameter ("norm.weight")
    shape: list[int]
    dtype: str  # "float32", "float16", "bfloat16"
    main: bool = False  # the largest input: the kernel's grid follows it
    # How it lines up with the main input: "same" (one value per element), "scalar", or
    # "broadcast" (value at flat index i is values[(i // inner) % span], computed at run time).
    pattern: str = "same"
    describe: str = ""  # one line for the prompt


class GemmSpec(BaseModel):
    """The GEMM a `gemm` segment takes in: out[..., m, n] = sum_k A[..., m, k] * B[..., k, n] (+ bias[n]).

    A's leading dims fold into M unless the GEMM is batched (bmm, or matmul of two 3-D operands: one
    product per leading index). The operands are the arguments `kw_fused` gets before the epilogue's
    extras, in this order: a, b, bias."""

    op: str  # the reference's op, canonical: linear | matmul | bmm (addmm is linear, mm is matmul)
    a: KernelArg  # [..., M, K]
    b: KernelArg  # [K, N] ([N, K] where b_transposed), [batch, K, N] where batched
    bias: Optional[KernelArg] = None  # [N], added to the accumulator before the region
    b_transposed: bool = False  # B holds [N, K] (F.linear / nn.Linear's weight): read through its strides
    batched: bool = False
    m: int
    n: int
    k: int
    batch: int = 1
    lines: int = 1  # the first `lines` of the segment's torch_lines are the GEMM's own (the K loop computes them)


class Segment(BaseModel):
    kind: SegmentKind
    nodes: list[str]  # fx node names replaced by the kernel, in execution order
    targets: list[str]  # their canonical ops
    args: list[KernelArg]
    out_shape: list[int]
    out_dtype: str
    row_dims: int = 0  # ROW: how many trailing dims of the main input make one row
    rows: int = 0
    cols: int = 0
    per_row_output: bool = False  # ROW: one value per row instead of a whole row
    out_keepdim: bool = False  # ROW, per-row: the output keeps the reduced dims as size 1
    torch_lines: list[str] = Field(default_factory=list)  # the reference's code for the segment
    module_notes: list[str] = Field(default_factory=list)  # nn modules it calls, with their settings
    op_notes: list[str] = Field(default_factory=list)  # definitions of the ops it uses
    gemm: Optional[GemmSpec] = None  # GEMM: the product the kernel computes before the region

    @property
    def main(self) -> KernelArg:
        return next(a for a in self.args if a.main)

    @property
    def extras(self) -> list[KernelArg]:
        return [a for a in self.args if not a.main]

    @property
    def pass_through(self) -> bool:
        """The empty region (y stays the main input) is already correct: a lone GEMM's epilogue."""
        return self.kind == SegmentKind.GEMM and self.epilogue().torch_lines == [f"y = {self.main.name}"]

    def epilogue(self) -> "Segment":
        """A GEMM segment's region seen as the elementwise kernel it is on the accumulator, without
        the GEMM's own node, op and lines (the K loop is the skeleton's; gemm_plan puts them first):
        what the pre-check runs, what the oracle writes and what a line-at-a-time search splits
        (the region's names and probes are the same)."""
        if self.kind != SegmentKind.GEMM or self.gemm is None:
            return self
        return self.model_copy(update={"kind": SegmentKind.ELEMENTWISE, "gemm": None, "nodes": self.nodes[1:],
                                       "targets": self.targets[1:],
                                       "torch_lines": self.torch_lines[self.gemm.lines:]})


class StepPart(BaseModel):
    """One line of a composite op's definition (softplus, mish, softmax, a LayerNorm), so that op is
    written a line at a time like the segment's own lines (decompose.py, steps.py)."""

    target: str  # the op this part is (exp, amax, mul, ...): its kind makes it a row task or not
    # torch text over {a} (the op's input), {p1}, {p2}, ... (earlier parts) and {w}, {b} (the
    # weight and bias of the module the op is)
    expr: str
    values: str  # its value on the probes, encoded like Probes.steps
    dtype: str = "float32"
    per_row: bool = False


class Probes(BaseModel):
    """Probe inputs for a segment and PyTorch's result on them, from the planning child
    (probes.py); the pre-check runs a region on them. Values are float32, little-endian, base64
    (exact, NaN and inf included), each as the kernel loads it: converted from the arg's dtype."""

    count: int  # ELEMENTWISE: probe elements; ROW: probe rows
    cols: int  # values per row (1 for elementwise)
    inputs: dict[str, str]  # arg name -> count * cols values, broadcasting already applied
    expected: str  # count * cols values (count for one value per row), of the segment's out dtype
    labels: list[str]  # ELEMENTWISE: per element, ROW: per row, what kind of probe it is
    # Each of the segment's ops' values on the probes, in the order of its torch lines ("" where one
    # is not a float per element, or per row), their dtypes, and (ROW) whether one is a value per
    # row (count values) rather than a whole row (count * cols): a line's own check (steps.py)
    steps: list[str] = Field(default_factory=list)
    step_dtypes: list[str] = Field(default_factory=list)
    step_rows: list[bool] = Field(default_factory=list)
    # A composite op's line as the lines of its definition, with their values ([] where a line is
    # not split): the last part is the op's own value
    step_parts: list[list[StepPart]] = Field(default_factory=list)


class ScaffoldPlan(Versioned):
    """What the child process found: a segment and the ModelNew around it, or why not."""

    task_id: str
    available: bool
    reason: str  # one line: what the region covers, or why there is none
    segment: Optional[Segment] = None
    # The candidate's Python around the kernel: the reference's module-level code (minus Model and
    # its input functions) and `class ModelNew` whose forward calls `kw_fused(...)`.
    prelude: str = ""
    model_new: str = ""
    probes: Optional[Probes] = None  # for the region pre-check; None where they could not be made
    # The same task planned with its GEMM taken into the kernel (a `gemm` segment, the epilogue after
    # it, a ModelNew calling the kernel in place of both), where the planner found one that covers
    # at least this plan's segment; only the targets in GEMM_TARGETS are written from it
    # (for_target), so the CUDA and C++ plans are what they were.
    gemm: Optional["ScaffoldPlan"] = None

    def for_target(self, target: str) -> "ScaffoldPlan":
        """The plan a target's skeleton and pre-check use."""
        if target in GEMM_TARGETS and self.gemm is not None and self.gemm.available:
            return self.gemm
        return self


class Scaffold(BaseModel):
    """A complete candidate in one target with one region left to fill."""

    task_id: str
    target: str  # cuda | triton | cpp
    available: bool
    reason: str
    segment: Optional[Segment] = None
    program: str = ""  # the whole candidate; the region holds `placeholder`
    placeholder: str = ""  # the exact text standing for the region in `program`
    default_region: str = ""  # what the region holds when left empty (a pass-through)
    indent: str = ""  # the region's indentation in `program`
    language: str = ""  # of the region: "cuda", "cpp" or "python"
    kernel_view: str = ""  # the kernel's code as shown to the model, region marked
    variables: list[str] = Field(default_factory=list)  # what the region can read and must write
    # A GEMM skeleton's twin that leaves the GEMM to the library and runs the same region as an
    # elementwise epilogue after it (compose._library_twin); speed search times both.
    library_twin: Optional["Scaffold"] = None

    def program_with(self, region: str) -> str:
        """The candidate with ``region`` (unindented lines) in place of the placeholder; an empty
        region leaves the default, a pass-through."""
        return self.with_region(self.program, region)

    def with_region(self, text: str, region: str) -> str:
        """``text`` (the program, or a part of it holding the placeholder) with ``region`` in place.
        The region as compiled (`as_compiled`)."""
        region = as_compiled(self.target, region if region.strip() else self.default_region)
        lines = region.strip("\n").splitlines()
        return text.replace(self.placeholder, "\n".join((self.indent + line) if line.strip() else "" for line in lines))


class Assembly(BaseModel):
    """A model answer spliced into a scaffold."""

    region: str  # what went into the region, after the splicer's repairs
    code: str  # the assembled candidate
    repairs: list[str] = Field(default_factory=list)  # what the splicer changed in the answer, in words
    empty: bool = False  # the answer held no usable region text
