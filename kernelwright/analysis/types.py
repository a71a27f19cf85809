"""Records of the reference analysis: the op graph, its classification, profile and roofline.

Everything here is plain data (pydantic), so a record crosses the child-process boundary as JSON
and prompt templates can render it without importing torch. Times are milliseconds per forward
call, bytes are bytes, FLOPs are floating-point operations (a multiply-add counts as two).
"""

from __future__ import annotations

import enum
import math
from typing import Any, Optional

from pydantic import BaseModel, Field


class OpKind(str, enum.Enum):
    LIBRARY_HEAVY = "library_heavy"  # GEMM/conv/embedding/attention: cuBLAS/cuDNN territory
    ELEMENTWISE = "elementwise"
    REDUCTION = "reduction"
    NORMALIZATION = "normalization"
    DATA_MOVEMENT = "data_movement"
    OTHER = "other"


class Role(str, enum.Enum):
    """What a node means for the work a kernel must do (independent of its kind)."""

    COMPUTE = "compute"  # reads runtime data and produces new values
    VIEW = "view"  # a view of its input: no data moves
    META = "meta"  # reads shapes/dtypes only (x.shape, .size(), getattr)
    CONSTANT = "constant"  # depends on no graph input or parameter (masks, factories)
    NOOP = "noop"  # returned its own input (.contiguous() on contiguous data, .float() on fp32)


class Source(str, enum.Enum):
    GRAPH_INPUT = "graph_input"
    PARAMETER = "parameter"
    BUFFER = "buffer"
    CONSTANT = "constant"  # a tensor computed without graph inputs, or one held outside the module
    INTERMEDIATE = "intermediate"


class GraphShape(str, enum.Enum):
    SINGLE_OP = "single_op"
    LIBRARY_EPILOGUE = "library_epilogue"
    FUSIBLE_CHAIN = "fusible_chain"
    NETWORK = "network"


class TensorMeta(BaseModel):
    shape: list[int]
    dtype: str  # "float32", "bfloat16", "int64", ...

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.numel * dtype_size(self.dtype)


def dtype_size(dtype: str) -> int:
    sizes = {"float64": 8, "int64": 8, "complex64": 8, "float32": 4, "int32": 4, "float16": 2,
             "bfloat16": 2, "int16": 2, "int8": 1, "uint8": 1, "bool": 1, "float8_e4m3fn": 1, "float8_e5m2": 1}
    return sizes.get(dtype, 4)


class OpInput(BaseModel):
    """One tensor a node reads: where it comes from and what it looks like."""

    name: str  # producing node, graph input, or parameter qualname ("linear.weight")
    source: Source
    arg: str  # positional index ("0", "1.0" inside a list) or keyword / module attribute name
    shape: Optional[list[int]] = None
    dtype: Optional[str] = None


class OpNode(BaseModel):
    name: str  # unique in the graph, execution order
    target: str  # canonical op name: "linear", "gelu", "softmax", "add", ...
    kind: OpKind
    role: Role
    raw: str  # what the front end called it: "call_module:Linear", "aten.addmm.default"
    inputs: list[OpInput] = Field(default_factory=list)
    outputs: list[TensorMeta] = Field(default_factory=list)  # usually one
    scalars: dict[str, Any] = Field(default_factory=dict)  # non-tensor arguments and module settings
    flops: int = 0  # as counted by torch.utils.flop_counter (matmul/conv-class ops only)

    @property
    def output(self) -> Optional[TensorMeta]:
        return self.outputs[0] if self.outputs else None

    @property
    def substantive(self) -> bool:
        return self.role == Role.COMPUTE


class GraphTensor(BaseModel):
    name: str
    source: Source
    shape: list[int]
    dtype: str

    @property
    def meta(self) -> TensorMeta:
        return TensorMeta(shape=self.shape, dtype=self.dtype)


class OpGraph(BaseModel):
    method: str  # "fx" (torch.fx symbolic trace + shape propagation) or "dispatch" (ATen ops of one run)
    fallback_reason: Optional[str] = None  # why fx was not used, when method == "dispatch"
    inputs: list[GraphTensor] = Field(default_factory=list)  # forward() arguments that are tensors
    params: list[GraphTensor] = Field(default_factory=list)  # parameters and buffers the graph reads
    nodes: list[OpNode] = Field(default_factory=list)
    outputs: list[str] = Field(default_factory=list)  # names whose values forward returns
    output_meta: list[TensorMeta] = Field(default_factory=list)

    def node(self, name: str) -> OpNode:
        for n in self.nodes:
            if n.name == name:
                return n
        raise KeyError(name)

    def substantive(self) -> list[OpNode]:
        return [n for n in self.nodes if n.substantive]


class Classification(BaseModel):
    shape: GraphShape
    difficulty: float  # 0 (trivial) .. 1 (hard); an ordinal heuristic, see structure.py
    reason: str  # one line
    library_ops: list[str] = Field(default_factory=list)  # node names
    epilogue: list[str] = Field(default_factory=list)  # node names after the library op (library_epilogue)
    epilogue_targets: list[str] = Field(default_factory=list)  # their canonical ops, e.g. ["gelu", "mul"]
    prologue: list[str] = Field(default_factory=list)  # fusible nodes before the library op, if any
    kinds: dict[str, int] = Field(default_factory=dict)  # substantive nodes per kind


class ChainInput(BaseModel):
    """A tensor an epilogue chain reads besides the library op's output."""

    name: str
    source: Source
    shape: list[int]
    dtype: str
    consumer: str  # the chain node that reads it
    against: list[int]  # shape of the chain tensor at that node, which this one broadcasts to
    broadcast: str  # same | scalar | row_vector | per_channel | per_row | leading | partial
    broadcast_dims: list[int] = Field(default_factory=list)  # dims of `against` it is broadcast along


class EpilogueChain(BaseModel):
    anchor: str  # the library-heavy node
    anchor_target: str
    main: TensorMeta  # the anchor's output: the tensor the chain starts from
    nodes: list[str]  # chain nodes in execution order (views included)
    targets: list[str]  # canonical ops of the non-view chain nodes, in order
    inputs: list[ChainInput] = Field(default_factory=list)
    outputs: list[str] = Field(default_factory=list)  # chain nodes whose values leave the chain
    anchor_leaves: bool = False  # the library op's own output is read outside the chain too
    output: Optional[TensorMeta] = None  # the (last) value leaving the chain
    has_reduction: bool = False  # a reduction/normalization needs a whole row/group per tile


class OpTime(BaseModel):
    op: str  # profiler name, e.g. "aten::addmm"
    target: str  # canonical name, e.g. "linear"
    self_ms: float  # per forward call
    share: float  # of the summed self time, 0..1
    calls: float  # per forward call


class ProfileReport(BaseModel):
    device: str
    clock: str  # "self_cpu" or "self_device"
    warmup: int
    iters: int
    top: list[OpTime] = Field(default_factory=list)
    ops_total: int = 0  # distinct ops seen
    self_total_ms: float  # summed self time of every op in one forward (median over calls)
    window_ms: float  # wall time of one profiled forward, minus an empty range's cost (median)
    span_ms: float  # first op start to last op end in one profiled forward (median)
    range_cost_ms: float = 0.0  # what an empty range costs, subtracted from each window (so span <= window + this)
    forward_ms: float  # median forward time without the profiler (the evaluator's protocol)
    profiler_overhead_ms: float  # window_ms - forward_ms (negative when caches/noise favour the window)
    host_gap_ms: float  # window time inside no op: Python, dispatch, profiler bookkeeping
    coverage: float  # self / span on the CPU, self device time / window on CUDA (median over calls)
    window_coverage: float  # self / window (median over calls): how much of the forward ops explain
    ratio_to_forward: float  # self_total_ms / forward_ms
    tolerance: float
    consistent: bool  # |coverage - 1| <= tolerance
    protocol: str


class DevicePeaks(BaseModel):
    key: str  # "h200", "h100_sxm", "a100_sxm", "cpu"
    name: str
    bandwidth: float  # bytes/s, DRAM/HBM copy bandwidth
    flops: dict[str, float]  # per compute dtype ("fp32", "tf32", "bf16", "fp16"): FLOP/s, dense
    sources: dict[str, str]  # per number: "measured", "datasheet", "assumed"
    note: Optional[str] = None


class Roofline(BaseModel):
    device: str  # DevicePeaks.key
    flops: int  # library + elementwise
    library_flops: int  # matmul/conv class, from FlopCounterMode
    elementwise_flops: int  # everything else, counted per element
    bytes: int  # minimum traffic: inputs, parameters and outputs once each
    bytes_inputs: int
    bytes_params: int
    bytes_outputs: int
    intensity: float  # FLOP per byte
    compute_dtype: str  # which peak the library FLOPs use
    compute_ms: float
    memory_ms: float
    floor_ms: float  # max(compute_ms, memory_ms)
    bound: str  # "memory" | "compute"
    ridge: float  # intensity where the device turns compute bound (library peak / bandwidth)

    def fraction_of_floor(self, measured_ms: float) -> float:
        """floor / measured: 1.0 means the measured time sits on the roofline."""
        return self.floor_ms / measured_ms if measured_ms > 0 else float("nan")


class GraphSummary(BaseModel):
    method: str
    fallback_reason: Optional[str] = None
    nodes: int
    substantive: int
    kinds: dict[str, int]
    ops: list[str]  # canonical targets of the substantive nodes, in order (capped)
    library_ops: list[str]  # canonical targets of the library-heavy nodes
    inputs: list[TensorMeta]
    outputs: list[TensorMeta]
    params: int  # parameter + buffer tensors read
    param_bytes: int
