"""Dynamic evidence, gathered inside the worker: did custom compiled code run, was anything tampered.

Custom-kernel proof. Before the candidate is imported, the entry points that produce compiled
code are wrapped:
- `torch.utils.cpp_extension.load_inline` / `load`: the returned extension module is wrapped so
  that each of its functions counts its *successful* calls (a call that raised and was papered
  over by a PyTorch fallback does not count);
- Triton: `JITFunction.run` (compiled launches, also reached through autotuners) and, under
  TRITON_INTERPRET=1, the interpreter's `run`;
- operators a candidate registers with the dispatcher (`TORCH_LIBRARY`, `is_python_module=False`):
  the set of operator names before and after import is diffed; calls to new ones are counted
  from a profiler trace of one extra forward.
These counters must move during `forward` in every correctness trial; whether the calls did the
work (the output depends on them, they are not copies) is then decided by work.py, whose probes
these wrappers route every call through while it checks.

Tamper check. A snapshot of the objects the evaluator relies on (clocks, synchronize, events,
comparison functions, RNG seeding, the evaluator's own functions) is taken before the candidate
is imported and compared after every phase; any rebinding is a cheat.
"""

from __future__ import annotations

import inspect
import logging
import os
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any, Callable, Optional

import torch
import torch.utils.cpp_extension as cpp_extension

log = logging.getLogger(__name__)


class PassThrough:
    """The probe of an ordinary call: runs it. Every custom call goes through a probe, whatever the
    call's stage, so that a probe's presence says nothing about the call."""

    def call(self, key: str, fn: Callable[..., Any], args: tuple, kwargs: dict) -> Any:
        return fn(*args, **kwargs)


PASS_THROUGH = PassThrough()


class CallCounter:
    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()
        self.builds: list[dict[str, Any]] = []  # one per load_inline/load call
        self.triton_kernels: set[str] = set()
        # Every custom call goes through this (work.py's probes while the judge checks the work).
        self.probe: Any = PASS_THROUGH

    def total(self) -> int:
        return sum(self.calls.values())

    def snapshot(self) -> dict[str, int]:
        return dict(self.calls)


class _CountingModule:
    """Stands in for an extension module; its functions count successful calls."""

    def __init__(self, module: Any, label: str, counter: CallCounter):
        object.__setattr__(self, "_kw_module", module)
        object.__setattr__(self, "_kw_label", label)
        object.__setattr__(self, "_kw_counter", counter)
        object.__setattr__(self, "_kw_cache", {})

    def __getattr__(self, name: str) -> Any:
        cache = object.__getattribute__(self, "_kw_cache")
        if name in cache:
            return cache[name]
        value = getattr(object.__getattribute__(self, "_kw_module"), name)
        if callable(value) and not name.startswith("__"):
            value = _counted(value, f"{object.__getattribute__(self, '_kw_label')}.{name}",
                             object.__getattribute__(self, "_kw_counter"))
        cache[name] = value
        return value

    def __dir__(self) -> list[str]:
        return dir(object.__getattribute__(self, "_kw_module"))


def _counted(fn: Callable[..., Any], key: str, counter: CallCounter) -> Callable[..., Any]:
    def counted(*args: Any, **kwargs: Any) -> Any:
        result = counter.probe.call(key, fn, args, kwargs)
        counter.calls[key] += 1
        return result

    counted.__name__ = getattr(fn, "__name__", key)
    counted.__doc__ = getattr(fn, "__doc__", None)
    return counted


@dataclass(frozen=True)
class BuildPlace:
    """Where load_inline builds go: `scratch/builds/<key>` (the worker's own folder), and where
    the trusted builder's verified builds of this job's keys are read from (buildcache.py)."""

    scratch: str
    cache_root: Optional[str] = None
    compiled: frozenset[str] = frozenset()  # keys the trusted builder compiled to objects (compile-only)


def install(counter: CallCounter, place: Optional[BuildPlace] = None,
            build_fn: Optional[Callable[..., Any]] = None) -> None:
    """Wrap the compiled-code entry points. `build_fn` replaces load_inline (compile-only mode)."""
    real_inline = build_fn or cpp_extension.load_inline
    real_load = cpp_extension.load
    signature = inspect.signature(cpp_extension.load_inline)

    def make(real: Callable[..., Any], kind: str) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            name = kwargs.get("name", args[0] if args else "?")
            started = time.monotonic()
            record: dict[str, Any] = {"kind": kind, "name": str(name), "ok": False}
            counter.builds.append(record)
            try:
                if kind == "load_inline" and place:
                    module = _keyed_build(real, signature, place, args, kwargs, record)
                else:
                    module = real(*args, **kwargs)
            except BaseException as e:
                # kept even when the candidate catches it: a compile-only verdict reads it
                record["error_type"] = type(e).__name__
                record["error"] = _failure_text(e)
                raise
            finally:
                record["seconds"] = round(time.monotonic() - started, 3)
            record["ok"] = True
            record["products"] = build_products(module)
            if module is None:  # is_python_module=False: ops were registered with the dispatcher
                return None
            return _CountingModule(module, str(name), counter)

        wrapper.__name__ = real.__name__
        wrapper.__doc__ = real.__doc__
        return wrapper

    cpp_extension.load_inline = make(real_inline, "load_inline")  # type: ignore[assignment]
    cpp_extension.load = make(real_load, "load")  # type: ignore[assignment]
    _install_triton(counter)


def _failure_text(e: BaseException) -> str:
    """A failed build's error as the taxonomy needs it: its relevant lines, the compiler's included."""
    from kernelwright.evaluate.taxonomy import first_relevant_lines

    log = str(getattr(e, "log", "") or "")
    return first_relevant_lines(f"{type(e).__name__}: {e}\n{log}", max_lines=30)[:8000]


def build_products(module: Any) -> list[str]:
    """The files a build produced, as the loader saw them: the objects of a compile-only build, the
    library an extension module or a dispatcher-operator library was loaded from."""
    objects = getattr(module, "__dict__", {}).get("__objects__") if module is not None else None
    if isinstance(objects, list):
        return [str(o) for o in objects]
    if isinstance(module, str):  # is_python_module=False: the library's path
        return [module]
    path = getattr(module, "__file__", None)
    return [str(path)] if isinstance(path, str) else []


def _keyed_build(real: Callable[..., Any], signature: inspect.Signature, place: BuildPlace,
                 args: tuple[Any, ...], kwargs: dict[str, Any], record: dict[str, Any]) -> Any:
    """Load the trusted builder's verified build of these sources (buildcache.py), or build in
    `<scratch>/builds/<hash of what is built>`, which dies with the box."""
    from kernelwright.evaluate import buildcache

    try:
        bound = signature.bind(*args, **kwargs)
    except TypeError:
        return real(*args, **kwargs)  # let load_inline raise its own, genuine TypeError
    key = buildcache.build_key(dict(bound.arguments), os.environ.get("TORCH_CUDA_ARCH_LIST", ""),
                               buildcache.torch_version() or torch.__version__)
    name = str(bound.arguments.get("name"))
    record["key"] = key
    python_module = bound.arguments.get("is_python_module", True)
    # a standalone build is an executable, not a library to load: always built here
    if place.cache_root and not bound.arguments.get("is_standalone", False):
        # the trusted builder's build of these exact arguments (its copy in this box), verified
        failed = buildcache.failure(place.cache_root, key)
        if failed is not None:
            # the trusted builder compiled exactly these arguments and failed: the same error
            record["cache_scope"] = "shared (failed)"
            raise _rebuilt_error(failed)
        if key in place.compiled:
            # compiled to objects by the trusted builder (compile-only with a CPU torch): nothing to
            # load, and the judge takes its evidence from the builder, not from this process
            from kernelwright.evaluate.compile_only import CompiledNotLinked

            record["cache_scope"] = "shared (objects)"
            return CompiledNotLinked(name, [])
        folder, record["cache"] = buildcache.lookup(place.cache_root, buildcache.SHARED, key, name)
        if folder is not None:
            record["cache_scope"] = "shared"
            return cpp_extension._import_module_from_library(name, folder, python_module)
    build_dir = os.path.join(place.scratch, "builds", key)
    os.makedirs(build_dir, exist_ok=True)
    bound.arguments["build_directory"] = build_dir
    return real(*bound.args, **bound.kwargs)


def _rebuilt_error(text: str) -> Exception:
    """The exception the trusted builder's load_inline raised, from its recorded text: its own
    built-in type where it has one (torch raises RuntimeError for a failed build)."""
    import builtins

    name, _, message = text.partition(": ")
    cls = getattr(builtins, name, None)
    if isinstance(cls, type) and issubclass(cls, Exception):
        return cls(message)
    return RuntimeError(text)


def _install_triton(counter: CallCounter) -> None:
    try:
        from triton.runtime.jit import JITFunction
    except Exception:  # triton missing or broken: nothing to wrap
        return
    classes: list[Any] = [JITFunction]
    try:
        from triton.runtime.interpreter import InterpretedFunction
        classes.append(InterpretedFunction)
    except Exception:
        pass
    for cls in classes:
        real_run = cls.run

        def run(self: Any, *args: Any, _real: Callable[..., Any] = real_run, **kwargs: Any) -> Any:
            # warmup=True compiles without launching: not a call
            if kwargs.get("warmup", False):
                return _real(self, *args, **kwargs)
            name = getattr(getattr(self, "fn", None), "__name__", None) or getattr(self, "__name__", "triton")
            key = f"triton.{name}"
            # a launch writes its tensor arguments: a probe sees them change
            result = counter.probe.call(key, lambda *a, **k: _real(self, *a, **k), args, kwargs)
            counter.calls[key] += 1
            return result

        cls.run = run


def dispatcher_ops() -> set[str]:
    try:
        return set(torch._C._dispatch_get_all_op_names())
    except Exception:
        return set()


def count_new_op_calls(new_ops: set[str], fn: Callable[[], Any]) -> dict[str, int]:
    """Run `fn` under the profiler and count calls to operators the candidate registered."""
    if not new_ops:
        fn()
        return {}
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        fn()
    hits: Counter[str] = Counter()
    for evt in prof.events():
        if evt.name in new_ops:
            hits[f"op.{evt.name}"] += 1
    return dict(hits)


# --- tamper check ---------------------------------------------------------------------------

def _guarded() -> list[tuple[str, Any, str]]:
    import time as time_mod

    import kernelwright.measure.compare as compare_mod
    import kernelwright.measure.timing as timing_mod

    items: list[tuple[str, Any, str]] = [
        ("time", time_mod, "perf_counter"), ("time", time_mod, "time"), ("time", time_mod, "monotonic"),
        ("time", time_mod, "perf_counter_ns"), ("torch", torch, "allclose"), ("torch", torch, "equal"),
        ("torch", torch, "manual_seed"), ("torch", torch, "isfinite"), ("torch.Tensor", torch.Tensor, "__eq__"),
        ("torch.Tensor", torch.Tensor, "clone"), ("torch.Tensor", torch.Tensor, "to"),
        ("torch.cuda", torch.cuda, "synchronize"), ("torch.cuda", torch.cuda, "Event"),
        ("torch.cuda.Event", torch.cuda.Event, "elapsed_time"), ("torch.cuda.Event", torch.cuda.Event, "record"),
        ("torch.cuda.Event", torch.cuda.Event, "synchronize"),
    ]
    for mod in (timing_mod, compare_mod):
        for name in dir(mod):
            if not name.startswith("__") and callable(getattr(mod, name)):
                items.append((mod.__name__, mod, name))
    return items


class TamperGuard:
    def __init__(self) -> None:
        self.items = _guarded()
        self.originals = [getattr(obj, attr, None) for _, obj, attr in self.items]

    def rebase(self) -> None:
        """Take the snapshot again: after a check found nothing changed, the evaluator imported
        something that rebinds guarded objects itself (torch._dynamo wraps torch.manual_seed)."""
        self.originals = [getattr(obj, attr, None) for _, obj, attr in self.items]

    def changed(self) -> list[str]:
        out = []
        for (label, obj, attr), orig in zip(self.items, self.originals):
            if getattr(obj, attr, None) is not orig:
                out.append(f"{label}.{attr} was replaced")
        return out


# --- the process's children, for its own cleanup (leftover work is the judge's to find: leftovers.py)

def child_pids() -> set[int]:
    me = str(os.getpid())
    pids = set()
    try:
        entries = os.listdir("/proc")
    except OSError:
        return pids
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
            if fields[1].decode() == me:
                pids.add(int(entry))
        except (OSError, IndexError):
            continue
    return pids
