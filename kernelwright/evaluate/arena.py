"""Shared memory between the judge and a runner: one memfd, tensors viewed at offsets.

The judge creates the arena (os.memfd_create), sends its descriptor to one runner over their
socket (link.py), and places each call's inputs and output buffers in it; the runner views the same
bytes as tensors (torch.frombuffer on its own mapping) and never sees the judge's private memory.
Each runner gets an arena of its own, so the candidate cannot touch what the reference runner reads.

Placement is a bump allocator that wraps around: consecutive calls sit at different offsets, and
every call gets freshly drawn values (the judge draws them), so a memo keyed by address never
serves a call. On a GPU the same placement runs over a CUDA IPC allocation (cuda_arena.py).
"""

from __future__ import annotations

import mmap
import os
from typing import Any

import torch
from pydantic import BaseModel

from kernelwright.measure import footprint

ALIGN = 64  # a cache line: no two tensors share one, and every dtype is aligned

_DTYPES = {str(d).replace("torch.", ""): d for d in (
    torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8, torch.uint8, torch.int16,
    torch.int32, torch.int64, torch.bool, torch.complex64, torch.complex128)}  # the usual; others by name


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.", "")


def dtype_of(name: str) -> torch.dtype:
    dtype = _DTYPES.get(name) or any_dtype(name)
    if dtype is None:
        raise ValueError(f"dtype {name!r} cannot cross the arena")
    return dtype


def any_dtype(name: str) -> torch.dtype | None:
    """torch's dtype of that name (also a runner's claim about its output, so only a torch.dtype)."""
    found = getattr(torch, name, None) if name.isidentifier() else None
    return found if isinstance(found, torch.dtype) else None


class TensorRef(BaseModel):
    """A contiguous tensor at `offset` bytes into an arena."""

    offset: int
    dtype: str
    shape: list[int]

    def nbytes(self) -> int:
        n = 1
        for s in self.shape:
            n *= s
        return n * dtype_of(self.dtype).itemsize


def round_up(n: int) -> int:
    """`n` bytes rounded up to the arena's alignment (every tensor starts on an ALIGN boundary)."""
    return (n + ALIGN - 1) // ALIGN * ALIGN


class Placement:
    """The bump allocator of an arena of `nbytes` (this memfd one, or cuda_arena.CudaArena)."""

    nbytes: int
    cursor: int = 0

    def place(self, dtype: torch.dtype, shape: Any) -> TensorRef:
        """Room for one tensor after the previous one, wrapping to the start when full. The caller
        sizes the arena (`fits`) so that one call's tensors never wrap onto each other."""
        ref = TensorRef(offset=0, dtype=dtype_name(dtype), shape=list(shape))
        need = round_up(ref.nbytes())
        if self.cursor + need > self.nbytes:
            self.cursor = 0
        ref.offset = self.cursor
        self.cursor += need
        return ref

    def fits(self, nbytes: int) -> bool:
        """Whether a call needing `nbytes` has its room (footprint.arena_bytes): twice its bytes, so
        consecutive calls never share an address (an address comes back every other call, with
        new values: a memo keyed by it serves a wrong output, which the check of every timed call
        catches); once its bytes above footprint.ONE_PLACE_ABOVE_BYTES, every call at the start
        (`start`). Not more: on a GPU two runners' arenas of a full-size task are gigabytes each."""
        return footprint.arena_bytes(nbytes) <= self.nbytes

    def start(self, nbytes: int) -> None:
        """Before a call's first `place`: a call that reuses one place starts at the arena's start,
        so its tensors never wrap onto each other whatever the call before it left."""
        if footprint.one_place(nbytes):
            self.cursor = 0


class Arena(Placement):
    """A shared mapping of a memfd. The judge `create`s one; a runner `attach`es to its fd."""

    def __init__(self, fd: int, nbytes: int):
        self.fd, self.nbytes = fd, nbytes
        self.mm = mmap.mmap(fd, nbytes, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        self.cursor = 0

    @classmethod
    def create(cls, nbytes: int) -> "Arena":
        nbytes = max(ALIGN, round_up(nbytes))
        fd = os.memfd_create("kw-arena", os.MFD_CLOEXEC)
        os.ftruncate(fd, nbytes)
        return cls(fd, nbytes)

    @classmethod
    def attach(cls, fd: int, nbytes: int) -> "Arena":
        if os.fstat(fd).st_size < nbytes:
            raise ValueError("the arena is smaller than announced")
        return cls(fd, nbytes)

    def view(self, ref: TensorRef) -> torch.Tensor:
        """The tensor `ref` names, sharing the arena's bytes."""
        dtype = dtype_of(ref.dtype)
        numel = ref.nbytes() // dtype.itemsize
        if ref.offset < 0 or ref.offset + ref.nbytes() > self.nbytes:
            raise ValueError("a tensor outside the arena")
        if numel == 0:
            return torch.empty(ref.shape, dtype=dtype)
        return torch.frombuffer(self.mm, dtype=dtype, count=numel, offset=ref.offset).view(ref.shape)

    def close(self) -> None:
        try:
            self.mm.close()
        except BufferError:
            pass  # a tensor still views it; the mapping goes with the process
        try:
            os.close(self.fd)
        except OSError:
            pass


def call_bytes(tensors: list[torch.Tensor]) -> int:
    """Arena bytes the tensors of one call take, alignment included."""
    return sum(round_up(t.numel() * t.element_size()) for t in tensors)
