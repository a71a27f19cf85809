"""GPU memory shared between the judge and a runner: one device allocation, exported by CUDA IPC.

The GPU twin of arena.Arena (same interface: place, view, fits, close). The judge allocates the
arena with the CUDA driver's own `cuMemAlloc`, *outside* torch's caching allocator, and sends its
IPC handle to one runner; the runner maps it (`cuIpcOpenMemHandle`) and views it as tensors.

Why not torch's own CUDA tensor sharing (torch.multiprocessing): it exports the caching allocator's
whole *segment*, and other tensors of the judge (the reference's outputs, the next call's inputs)
may live in the same segment, where a kernel of the candidate's could read or write them through
the mapping. An allocation of our own holds nothing but the arena, and a runner's context can reach
no other memory of the judge's (CUDA contexts have separate address spaces).

Both sides run torch first (the primary context is current on the calling thread), then the driver
calls below run in that context. Tensors are made from the raw pointer through
`__cuda_array_interface__`; torch never frees them: `close` does.
"""

from __future__ import annotations

import ctypes
from typing import Optional

import torch

from kernelwright.evaluate.arena import ALIGN, Placement, TensorRef, dtype_of, round_up

HANDLE_BYTES = 64  # CU_IPC_HANDLE_SIZE
_LAZY_PEER_ACCESS = 1  # CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS: the only flag cuIpcOpenMemHandle takes


class _Handle(ctypes.Structure):
    _fields_ = [("reserved", ctypes.c_char * HANDLE_BYTES)]


class CudaError(RuntimeError):
    pass


_driver: Optional[ctypes.CDLL] = None


def _cu() -> ctypes.CDLL:
    global _driver
    if _driver is None:
        lib = ctypes.CDLL("libcuda.so.1")
        lib.cuMemAlloc_v2.argtypes = [ctypes.POINTER(ctypes.c_uint64), ctypes.c_size_t]
        lib.cuMemFree_v2.argtypes = [ctypes.c_uint64]
        lib.cuIpcGetMemHandle.argtypes = [ctypes.POINTER(_Handle), ctypes.c_uint64]
        lib.cuIpcOpenMemHandle_v2.argtypes = [ctypes.POINTER(ctypes.c_uint64), _Handle, ctypes.c_uint]
        lib.cuIpcCloseMemHandle.argtypes = [ctypes.c_uint64]
        lib.cuGetErrorName.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)]
        _driver = lib
    return _driver


def _check(code: int, what: str) -> None:
    if code:
        name = ctypes.c_char_p()
        _cu().cuGetErrorName(code, ctypes.byref(name))
        raise CudaError(f"{what} failed: {(name.value or b'?').decode()} ({code})")


class _Interface:
    """A raw device range as torch.as_tensor reads it (no stream: nothing to wait for)."""

    def __init__(self, ptr: int, nbytes: int):
        self.__cuda_array_interface__ = {"shape": (nbytes,), "typestr": "|u1", "data": (ptr, False),
                                         "version": 3, "strides": None}


class CudaArena(Placement):
    """A device allocation shared with one runner. The judge `create`s it; a runner `attach`es."""

    def __init__(self, ptr: int, nbytes: int, device: torch.device, owner: bool):
        self.ptr, self.nbytes, self.device, self.owner = ptr, nbytes, device, owner
        with torch.cuda.device(device):
            self.bytes = torch.as_tensor(_Interface(ptr, nbytes), device=device)
        self.cursor = 0
        self.closed = False

    @classmethod
    def create(cls, nbytes: int, device: torch.device) -> "CudaArena":
        nbytes = max(ALIGN, round_up(nbytes))
        _current(device)
        # the arena is allocated beside torch's caching allocator, not from it: blocks torch freed
        # (the reference's private copy of the inputs, its intermediates) go back to the driver first
        torch.cuda.empty_cache()
        ptr = ctypes.c_uint64()
        _check(_cu().cuMemAlloc_v2(ctypes.byref(ptr), nbytes), "cuMemAlloc")
        return cls(ptr.value, nbytes, device, owner=True)

    def handle(self) -> str:
        """The IPC handle, hex: what the runner needs to map this allocation (and nothing else)."""
        h = _Handle()  # create made the allocation's context current on this thread
        _check(_cu().cuIpcGetMemHandle(ctypes.byref(h), self.ptr), "cuIpcGetMemHandle")
        return ctypes.string_at(ctypes.addressof(h), HANDLE_BYTES).hex()  # .reserved would stop at a NUL

    @classmethod
    def attach(cls, handle_hex: str, nbytes: int, device: torch.device) -> "CudaArena":
        raw = bytes.fromhex(handle_hex)
        if len(raw) != HANDLE_BYTES:
            raise ValueError("not a CUDA IPC handle")
        h = _Handle()
        ctypes.memmove(ctypes.byref(h), raw, HANDLE_BYTES)
        _current(device)
        ptr = ctypes.c_uint64()
        _check(_cu().cuIpcOpenMemHandle_v2(ctypes.byref(ptr), h, _LAZY_PEER_ACCESS), "cuIpcOpenMemHandle")
        return cls(ptr.value, nbytes, device, owner=False)

    def view(self, ref: TensorRef) -> torch.Tensor:
        dtype = dtype_of(ref.dtype)
        n = ref.nbytes()
        if ref.offset < 0 or ref.offset + n > self.nbytes or ref.offset % ALIGN:
            raise ValueError("a tensor outside the arena")
        if n == 0:
            return torch.empty(ref.shape, dtype=dtype, device=self.device)
        return self.bytes[ref.offset:ref.offset + n].view(dtype).view(ref.shape)

    def close(self) -> None:
        """Free (the judge) or unmap (a runner). Work queued on the range must be finished first."""
        if self.closed:
            return
        self.closed = True
        self.bytes = None  # type: ignore[assignment]
        try:
            torch.cuda.synchronize(self.device)
            if self.owner:
                _cu().cuMemFree_v2(self.ptr)
            else:
                _cu().cuIpcCloseMemHandle(self.ptr)
        except Exception:  # noqa: BLE001 - a dead context at exit: the process's end frees it anyway
            pass


def _current(device: torch.device) -> None:
    """Make torch's primary context for `device` current on this thread (the driver calls use it)."""
    torch.cuda.set_device(device)
    torch.cuda.init()
    torch.empty(1, device=device)  # the runtime makes the primary context current on first use
