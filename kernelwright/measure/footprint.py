"""What a GPU evaluation holds on its device at its peak, counted from a call's bytes.

One place for the accounting of the judge's copies (docs/evaluator.md, "Memory at KernelBench's
sizes"), and for the rules that keep it small at KernelBench's sizes (some level-1 calls move 8-16
GiB). The judge and the two runners each hold a CUDA context and their own copy of the module's
parameters; the judge allocates both runners' arenas (cuda_arena.py: one device allocation each,
mapped by the runner, counted once); it draws every call's inputs itself, keeps its copies of both
outputs (copied out inside the timed interval) and compares them.

Two stages take the most:

- correctness (the candidate's runner at work, the reference's runner loaded beside it): the
  judge's inputs, its reference's private copy of them and output, the candidate's output copied
  out, the previous trial's pair of outputs (a cache check), the candidate's arena, the comparison's
  float64 chunks, and the candidate runner's own output before it lands in the arena;
- timing: the judge's inputs, both arenas, both outputs copied out, both runners' own outputs and
  the cache flush buffer.

The forward's intermediates (`Call.work_bytes`) count once in KernelBench's single process and once
per process that runs a forward in ours. Not counted on either side: what the allocator's
fragmentation adds.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

GIB = 1 << 30
MIB = 1 << 20
# A CUDA context with torch's kernels loaded, cuBLAS and cuDNN handles: about this much on the H100
# and H200 (torch 2.x, CUDA 12); an estimate, the driver's count varies with the libraries loaded.
CONTEXT_BYTES = 512 * MIB
FLUSH_BYTES = 256 * MIB  # timing.MIN_GPU_FLUSH_BYTES: 4x the L2 of an H100/H200 is below it
# A call (inputs + outputs) above this is staged at the same place of its arena every call, with
# fresh values: the arena is one call's bytes, not two. Below it every call gets a fresh place (a
# memo keyed by address never even sees the same address twice); above it a memo keyed by address
# sees fresh values there and returns a wrong output, which the check of every call rejects.
ONE_PLACE_ABOVE_BYTES = 1 * GIB
# Above this many output bytes the correctness trials keep only the previous trial's outputs for
# the cache check (the same output for different inputs), not every earlier trial's.
KEEP_ALL_TRIALS_BELOW_BYTES = 256 * MIB


def tensor_bytes(values: Any) -> int:
    """The bytes of the tensors among `values` (nested lists and tuples flattened)."""
    import torch

    from kernelwright.measure.compare import flatten

    return sum(t.numel() * t.element_size() for t in flatten(values) if isinstance(t, torch.Tensor))


def shapes_of(values: list[Any]) -> list[Any]:
    """The tensors among `values` as meta tensors of the same shapes and dtypes (what a runner's
    output buffers are shaped by), anything else as it is: no device memory held for them."""
    import torch

    return [torch.empty(v.shape, dtype=v.dtype, device="meta") if isinstance(v, torch.Tensor) else v for v in values]


def one_place(call_bytes: int) -> bool:
    """Whether a call of these bytes (inputs + outputs) reuses one place of its arena."""
    return call_bytes > ONE_PLACE_ABOVE_BYTES


def arena_bytes(call_bytes: int) -> int:
    """An arena's size for calls of `call_bytes`: two calls' room (a fresh place every call), or one."""
    return call_bytes if one_place(call_bytes) else 2 * call_bytes


def trials_kept(out_bytes: int, trials: int) -> int:
    """How many earlier trials' outputs the cache check keeps."""
    return max(1, trials - 1) if out_bytes < KEEP_ALL_TRIALS_BELOW_BYTES else 1


def compare_bytes(out_bytes: int) -> int:
    """compare._tensor_mismatch's temporaries: the two float64 copies of a chunk, their masks and
    allclose's own differences (about twelve float32-sized copies of a chunk), never more than the
    same of the whole output."""
    from kernelwright.measure.compare import CHUNK_ELEMENTS

    return 12 * min(out_bytes, 4 * CHUNK_ELEMENTS)


@dataclass(frozen=True)
class Call:
    """The bytes that decide a task's footprint: one call's inputs and outputs, the module's
    parameters and buffers (the candidate's assumed the same size as the reference's)."""

    in_bytes: int
    out_bytes: int
    param_bytes: int = 0
    # what the forward holds at its peak beyond its inputs and its output (its intermediates)
    work_bytes: int = 0
    trials: int = 5  # EvalConfig.trials

    @property
    def call_bytes(self) -> int:
        return self.in_bytes + self.out_bytes


@dataclass(frozen=True)
class Peak:
    """One stage's device memory, by what holds it (bytes)."""

    contexts: int
    parameters: int
    arenas: int
    inputs: int
    outputs: int
    compare: int
    work: int = 0  # the forwards' intermediates, in every process that runs one at this stage
    flush: int = 0

    @property
    def total(self) -> int:
        return sum(getattr(self, f.name) for f in fields(self))


def correctness(call: Call) -> Peak:
    i, o = call.in_bytes, call.out_bytes
    return Peak(contexts=3 * CONTEXT_BYTES, parameters=3 * call.param_bytes, arenas=arena_bytes(call.call_bytes),
                inputs=2 * i,  # the judge's set and its reference's private copy
                # the judge's reference output and the candidate's copied out, the earlier trials'
                # pairs kept for the cache check, and the candidate runner's own output
                outputs=2 * o + 2 * o * trials_kept(o, call.trials) + o,
                compare=compare_bytes(o), work=2 * call.work_bytes)  # the judge's reference, the candidate


def timing(call: Call) -> Peak:
    i, o = call.in_bytes, call.out_bytes
    return Peak(contexts=3 * CONTEXT_BYTES, parameters=3 * call.param_bytes, arenas=2 * arena_bytes(call.call_bytes),
                inputs=i,  # the judge's draw; the previous call's set is let go before the next is drawn
                outputs=2 * o + 2 * o,  # both copied out of the arenas, both runners' own
                # both runners' forwards; the judge's cached blocks went back when the reference's
                # arena was allocated (cuda_arena.CudaArena.create)
                compare=compare_bytes(o), work=2 * call.work_bytes, flush=FLUSH_BYTES)


def peak(call: Call) -> Peak:
    """The larger of the two stages: what a GPU evaluation of this task needs on its device."""
    return max(correctness(call), timing(call), key=lambda p: p.total)


def kernelbench(call: Call) -> int:
    """KernelBench's own evaluator (one process, one context): the inputs, both modules' parameters,
    the reference's and the new module's outputs, one forward's intermediates (its allocator reuses
    them for the other's). Its comparison's temporaries are not counted."""
    return CONTEXT_BYTES + 2 * call.param_bytes + call.in_bytes + 2 * call.out_bytes + call.work_bytes
