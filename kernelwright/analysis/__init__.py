"""What a reference module computes and what it costs.

* ``build_graph(model, inputs)`` -> ``OpGraph``: canonical ops with shapes, dtypes, FLOPs and roles
  (torch.fx, or the ATen ops of one run when fx cannot trace); ``classify(graph)`` ->
  ``Classification`` (single_op | library_epilogue | fusible_chain | network, difficulty, reason);
  ``epilogue_chains(graph)`` -> the fusible runs after each library op, with broadcast patterns.
* ``profile_reference(model, inputs, device)`` -> ``ProfileReport``: self time per op, forward times.
* ``roofline(graph | model, device_info, inputs=...)`` -> ``Roofline``; ``device_peaks`` and
  ``DEVICES`` hold the peak table.
* ``analyze(task, device, size, profile)`` -> ``TaskAnalysis``: all of it, in a child process.

Importing this package imports torch but never initialises CUDA.
"""

from __future__ import annotations

from kernelwright.analysis.graph import build_graph
from kernelwright.analysis.profile import profile_reference
from kernelwright.analysis.report import TaskAnalysis
from kernelwright.analysis.roofline import DEVICES, device_peaks, roofline
from kernelwright.analysis.runner import AnalysisError, analyze
from kernelwright.analysis.structure import classify, epilogue_chains
from kernelwright.analysis.types import (
                    ChainInput,
                    Classification,
                    DevicePeaks,
                    EpilogueChain,
                    GraphShape,
                    OpGraph,
                    OpInput,
                    OpKind,
                    OpNode,
                    OpTime,
                    ProfileReport,
                    Role,
                    Roofline,
                    Source,
                    TensorMeta,
)

__all__ = [
                    "DEVICES",
                    "AnalysisError",
                    "ChainInput",
                    "Classification",
                    "DevicePeaks",
                    "EpilogueChain",
                    "GraphShape",
                    "OpGraph",
                    "OpInput",
                    "OpKind",
                    "OpNode",
                    "OpTime",
                    "ProfileReport",
                    "Role",
                    "Roofline",
                    "Source",
                    "TaskAnalysis",
                    "TensorMeta",
                    "analyze",
                    "build_graph",
                    "classify",
                    "device_peaks",
                    "epilogue_chains",
                    "profile_reference",
                    "roofline",
]
