"""Runs Triton kernels with a NumPy stand-in for `triton.language` (child side of tl_shim.py).

Started as a plain script (`python -I tl_child.py`, inside the confinement): it imports NumPy and
the standard library only, nothing of kernelwright or torch, so it starts in a fraction of a second.
The job (JSON on stdin) holds the skeleton's kernel source once per region, the launch grid and the
probe arrays; each region's kernel is run program by program, as Triton's launcher would, and one
JSON line per region comes back: the output values, or the error and whether Triton would have
refused it while compiling (a name it lacks, a block indexed like a list, `**` on a block) or it
went wrong while running.

Semantics kept from Triton where a small model's regions meet them: blocks are float32 and cannot
be indexed, iterated or raised to a power; masked loads give `other` (0.0 in the skeleton); sums
and maxima reduce over a whole block, masked lanes included; maximum/minimum ignore NaN (Triton's
default propagate_nan=NONE); a name triton.language lacks is an error, one it has that this file
does not implement makes the region `unsupported` (the real list: tl_shim.TL_NAMES).
"""

from __future__ import annotations

import base64
import json
import math
import signal
import sys
import types

import numpy as np

REGION_TIMEOUT_S = 5


class TritonCompileError(Exception):
    """What Triton's compiler would refuse."""


class NotModelled(Exception):
    """A real Triton name this stand-in does not implement."""


class Block(np.ndarray):
    """A Triton tensor: NumPy arithmetic, Triton's restrictions."""

    def to(self, dtype, **_kw):
        return _cast(self, dtype)

    def __getitem__(self, key):
        keys = key if isinstance(key, tuple) else (key,)
        if all(k is None or (isinstance(k, slice) and k == slice(None)) for k in keys):
            return np.ndarray.__getitem__(self, key)
        raise TritonCompileError("Triton blocks cannot be indexed by position (unsupported tensor index)")

    def __setitem__(self, key, value):
        raise TritonCompileError("Triton blocks cannot be assigned to by position")

    def __iter__(self):
        raise TritonCompileError("Triton blocks cannot be iterated")

    def __pow__(self, other):
        raise TritonCompileError("unsupported operand type(s) for **: Triton tensors have no power operator")

    __rpow__ = __pow__

    def __bool__(self):
        if self.size != 1:
            raise TritonCompileError("a Triton block has no truth value (use tl.where)")
        return bool(np.ndarray.item(self))

    # member functions Triton tensors have
    def sum(self, axis=None, keep_dims=False, **_kw):
        return tl_sum(self, axis, keep_dims)

    def max(self, axis=None, keep_dims=False, **_kw):
        return tl_max(self, axis, keep_dims)

    def min(self, axis=None, keep_dims=False, **_kw):
        return tl_min(self, axis, keep_dims)

    def exp(self):
        return _f(np.exp)(self)

    def sigmoid(self):
        return _sigmoid(self)

    def __array_wrap__(self, out, context=None, return_scalar=False):
        return np.ndarray.__array_wrap__(self, out, context, False)


def block(v, dtype=np.float32):
    return np.asarray(v, dtype=dtype).view(Block)


class DType:
    def __init__(self, name: str, np_type):
        self.name, self.np_type = name, np_type

    def __repr__(self) -> str:
        return f"tl.{self.name}"


class Pointer:
    """A pointer (or a block of pointers) into one of the kernel's buffers."""

    def __init__(self, buf: np.ndarray, dtype: DType, offset=0):
        self.buf, self.dtype_, self.offset = buf, dtype, offset

    @property
    def dtype(self):
        return types.SimpleNamespace(element_ty=self.dtype_)

    def __add__(self, other):
        return Pointer(self.buf, self.dtype_, self.offset + np.asarray(other).astype(np.int64))

    __radd__ = __add__


def _cast(v, dtype):
    if isinstance(dtype, DType):
        return block(np.asarray(v).astype(dtype.np_type), dtype.np_type)
    raise TritonCompileError(f"cannot cast to {dtype!r}")


def _is_int(a) -> bool:
    return (isinstance(a, (int, np.integer)) and not isinstance(a, bool)) or \
        (isinstance(a, np.ndarray) and np.issubdtype(a.dtype, np.integer))


def _f(fn, float_only: bool = True):
    """A tl function on blocks. Triton's math functions take floating-point blocks only: an integer
    (`tl.sqrt(2)`: the constant becomes an int32 block) is refused while compiling."""
    def apply(*args):
        if float_only and any(_is_int(a) for a in args):
            raise TritonCompileError("Expected dtype ['fp32', 'fp64'] but got int32 (a math function on an integer)")
        with np.errstate(all="ignore"):
            out = fn(*[np.asarray(a) if isinstance(a, np.ndarray) else np.asarray(a, dtype=np.float32) for a in args])
        return block(out, np.asarray(out).dtype if np.asarray(out).dtype != np.float64 else np.float32)
    return apply


def _sigmoid(x):
    with np.errstate(all="ignore"):
        return block(1.0 / (1.0 + np.exp(-np.asarray(x, dtype=np.float32))))


_erf = np.vectorize(math.erf, otypes=[np.float64])


def _reduce(fn, x, axis, keep_dims):
    with np.errstate(all="ignore"):
        return block(fn(np.asarray(x), axis=axis, keepdims=keep_dims), np.asarray(x).dtype)


def tl_sum(x, axis=None, keep_dims=False, **_kw):
    return _reduce(np.sum, x, axis, keep_dims)


def tl_max(x, axis=None, keep_dims=False, **_kw):
    return _reduce(np.fmax.reduce, x, axis, keep_dims)


def tl_min(x, axis=None, keep_dims=False, **_kw):
    return _reduce(np.fmin.reduce, x, axis, keep_dims)


class State:
    pid = 0
    grid = 1


def _load(ptr, mask=None, other=None, **_kw):
    if not isinstance(ptr, Pointer):
        raise TritonCompileError("tl.load takes a pointer")
    idx = np.asarray(ptr.offset, dtype=np.int64)
    if mask is None:
        if np.any(idx < 0) or np.any(idx >= ptr.buf.size):
            raise IndexError("a load outside its tensor (an illegal memory access on the GPU)")
        return block(ptr.buf[idx])
    m = np.broadcast_to(np.asarray(mask, dtype=bool), idx.shape)
    safe = np.where(m, idx, 0)
    if np.any(m & ((idx < 0) | (idx >= ptr.buf.size))):
        raise IndexError("a masked-in load outside its tensor (an illegal memory access on the GPU)")
    return block(np.where(m, ptr.buf[safe], np.float32(0.0 if other is None else other)))


def _store(ptr, value, mask=None, **_kw):
    idx = np.asarray(ptr.offset, dtype=np.int64)
    vals = np.broadcast_to(np.asarray(value, dtype=np.float32), idx.shape)
    m = np.ones(idx.shape, bool) if mask is None else np.broadcast_to(np.asarray(mask, dtype=bool), idx.shape)
    if np.any(m & ((idx < 0) | (idx >= ptr.buf.size))):
        raise IndexError("a store outside its tensor (an illegal memory access on the GPU)")
    ptr.buf[idx[m]] = vals[m]


def _where(c, a, b):
    return block(np.where(np.asarray(c, dtype=bool), a, b))


def _softmax(x, dim=None, **_kw):
    a = np.asarray(x, dtype=np.float32)
    axis = 0 if dim is None else dim
    with np.errstate(all="ignore"):
        e = np.exp(a - np.fmax.reduce(a, axis=axis, keepdims=True))
        return block(e / np.sum(e, axis=axis, keepdims=True))


def make_tl(names: set[str]) -> types.ModuleType:
    f32, f16, bf16 = DType("float32", np.float32), DType("float16", np.float16), DType("bfloat16", np.float32)
    i32, i64 = DType("int32", np.int32), DType("int64", np.int64)
    impl = {
        "float32": f32, "float16": f16, "bfloat16": bf16, "int32": i32, "int64": i64, "float64": f32,
        "constexpr": object,
        "program_id": lambda axis=0: block(State.pid, np.int32),
        "num_programs": lambda axis=0: block(State.grid, np.int32),
        "arange": lambda start, end: block(np.arange(start, end), np.int32),
        "full": lambda shape, value, dtype: block(np.full(shape, value), dtype.np_type),
        "zeros": lambda shape, dtype: block(np.zeros(shape), dtype.np_type),
        "zeros_like": lambda x: block(np.zeros_like(np.asarray(x))),
        "full_like": lambda x, v, **_: block(np.full_like(np.asarray(x), v)),
        "load": _load, "store": _store, "where": _where,
        "exp": _f(np.exp), "exp2": _f(np.exp2), "log": _f(np.log), "log2": _f(np.log2), "sqrt": _f(np.sqrt),
        "sqrt_rn": _f(np.sqrt), "rsqrt": _f(lambda v: 1.0 / np.sqrt(v)), "abs": _f(np.abs, False), "floor": _f(np.floor),
        "ceil": _f(np.ceil), "cos": _f(np.cos), "sin": _f(np.sin), "erf": _f(lambda v: _erf(v)),
        "fma": _f(lambda a, b, c: a * b + c), "fdiv": _f(lambda a, b, **_: a / b), "div_rn": _f(lambda a, b: a / b),
        "sigmoid": _sigmoid, "softmax": _softmax,
        "maximum": _f(np.fmax, False), "minimum": _f(np.fmin, False),
        "clamp": _f(lambda v, lo, hi: np.fmin(np.fmax(v, lo), hi), False),
        "sum": tl_sum, "max": tl_max, "min": tl_min,
        "cumsum": lambda x, axis=0, reverse=False, **_: block(np.cumsum(np.asarray(x)[::-1] if reverse else x,
                                                                            axis=axis)[::-1] if reverse
                                                              else np.cumsum(np.asarray(x), axis=axis)),
        "argmax": lambda x, axis, **_: block(np.argmax(np.asarray(x), axis=axis), np.int32),
        "argmin": lambda x, axis, **_: block(np.argmin(np.asarray(x), axis=axis), np.int32),
        "cdiv": lambda a, b: (a + b - 1) // b,
        "static_range": range, "range": range,
        "broadcast_to": lambda x, *shape: block(np.broadcast_to(np.asarray(x), shape[0] if len(shape) == 1 and
                                                                isinstance(shape[0], (tuple, list)) else shape)),
        "reshape": lambda x, *shape, **_: block(np.reshape(np.asarray(x), shape[0] if len(shape) == 1 and
                                                           isinstance(shape[0], (tuple, list)) else shape)),
        "expand_dims": lambda x, axis: block(np.expand_dims(np.asarray(x), axis)),
        "static_print": lambda *a, **k: None, "device_print": lambda *a, **k: None,
        "static_assert": lambda *a, **k: None, "device_assert": lambda *a, **k: None,
        "debug_barrier": lambda: None, "multiple_of": lambda x, *_: x, "max_contiguous": lambda x, *_: x,
    }
    libdevice = {"tanh": _f(np.tanh), "exp": _f(np.exp), "log": _f(np.log), "log1p": _f(np.log1p),
                 "expm1": _f(np.expm1), "erf": _f(lambda v: _erf(v)), "sqrt": _f(np.sqrt),
                 "rsqrt": _f(lambda v: 1.0 / np.sqrt(v)), "pow": _f(np.power), "fast_expf": _f(np.exp),
                 "fast_logf": _f(np.log), "exp2": _f(np.exp2), "fabs": _f(np.abs), "abs": _f(np.abs),
                 "fmax": _f(np.fmax), "fmin": _f(np.fmin), "tan": _f(np.tan), "sinh": _f(np.sinh),
                 "cosh": _f(np.cosh), "atan": _f(np.arctan), "floor": _f(np.floor), "round": _f(np.round)}
    tl = _Namespace("triton.language", impl, names)
    tl.math = _Namespace("triton.language.math", {k: v for k, v in impl.items() if k in (
        "exp", "exp2", "log", "log2", "sqrt", "sqrt_rn", "rsqrt", "abs", "floor", "ceil", "cos", "sin", "erf",
        "fma", "fdiv", "div_rn", "maximum", "minimum", "clamp")}, None)
    lib = _Namespace("libdevice", libdevice, None)
    tl.extra = types.SimpleNamespace(cuda=types.SimpleNamespace(libdevice=lib), libdevice=lib)
    return tl


class _Namespace:
    def __init__(self, name: str, impl: dict, real: set[str] | None):
        self._name, self._impl, self._real = name, impl, real

    def __getattr__(self, attr: str):
        if attr.startswith("__"):
            raise AttributeError(attr)
        if attr in self._impl:
            return self._impl[attr]
        if self._real is None or attr in self._real:
            raise NotModelled(f"{self._name}.{attr}")
        raise TritonCompileError(f"module '{self._name}' has no attribute '{attr}'")


def _timeout(*_):
    raise TimeoutError("the region ran past the time limit")


def run_region(job: dict, source: str, tl) -> dict:
    scope = {"tl": tl, "triton": types.SimpleNamespace(jit=lambda f: f, language=tl, cdiv=lambda a, b: (a + b - 1) // b),
             "math": math}
    try:
        exec(compile(source, "<kernel>", "exec"), scope)  # noqa: S102 -- confined child, model code
    except SyntaxError as e:
        return {"kind": "compile", "error": f"line {e.lineno}: SyntaxError: {e.msg}"}
    kernel = scope["kw_fused_kernel"]
    out = np.full(job["out_len"], np.nan, dtype=np.float32)
    out_dtype = {"float32": DType("float32", np.float32), "float16": DType("float16", np.float16),
                 "bfloat16": DType("bfloat16", np.float32)}[job["out_dtype"]]
    args = []
    for a in job["args"]:
        buf = np.frombuffer(base64.b64decode(a["values"]), dtype="<f4").copy()
        args.append(Pointer(buf, DType("float32", np.float32)))
        if a["pattern"] == "broadcast":
            args += [1, buf.size]  # values[(i // 1) % total] == values[i]
    args.append(Pointer(out, out_dtype))
    args += job["tail"]
    State.grid = job["grid"]
    signal.alarm(REGION_TIMEOUT_S)
    try:
        for pid in range(job["grid"]):
            State.pid = pid
            kernel(*args, BLOCK=job["block"])
    except TritonCompileError as e:
        return {"kind": "compile", "error": str(e)}
    except NotModelled as e:
        return {"kind": "unsupported", "error": f"{e} is not modelled by the pre-check"}
    except (NameError, AttributeError, TypeError, SyntaxError, UnboundLocalError) as e:
        return {"kind": "compile", "error": f"{type(e).__name__}: {e}"}
    except Exception as e:  # noqa: BLE001 -- the region's own failure, reported as such
        return {"kind": "runtime", "error": f"{type(e).__name__}: {e}"}
    finally:
        signal.alarm(0)
    return {"values": base64.b64encode(out.astype("<f4").tobytes()).decode()}


def main() -> int:
    job = json.loads(sys.stdin.read())
    signal.signal(signal.SIGALRM, _timeout)
    tl = make_tl(set(job["tl_names"]))
    for k, source in enumerate(job["sources"]):
        print(json.dumps({"k": k, **run_region(job, source, tl)}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
