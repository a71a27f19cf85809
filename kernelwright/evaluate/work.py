"""Work, not presence: did the custom code compute the candidate's output, and did the candidate
stay away from the reference?

"Custom code ran" (instrument.py counts successful calls) is not "custom code did the work": an
identity kernel followed by PyTorch math, a kernel whose result is thrown away, or a call on a
throwaway tensor all run custom code. After correctness, the judge has the candidate's runner run its forward
a few more times on fresh inputs with a *probe* installed around every custom call (extension
functions, Triton launches, operators the candidate registered with the dispatcher):

- `TimeProbe`: synchronized time inside custom calls over the time of the whole forward
  (`EvalResult.custom_share`), measured outside the timing loop so timing stays clean;
- `InspectProbe`: which entry points computed something. A call whose every output (returned
  tensors, and tensor arguments it wrote) equals one of its inputs (same values, any shape, after
  a cast), or is a constant fill, or that produced nothing, only copied: it did no work;
- `PerturbProbe`: every call of an entry point that did work has its outputs replaced by
  deterministic noise (the elements it wrote in its tensor arguments, in place; the tensors it
  returns, as scrambled clones so an input it merely returned is left alone). If the module's
  output still matches the reference, it does not depend on the custom code.

Reaching the reference. The candidate's runner never holds the reference: the judge computes it
in its own process and times it in a runner of its own, so nothing of it is in the candidate's
memory to find (by gc, a frame, a closure). Where a runner does load it (`load_reference`), it is
loaded from its source under a random name that is not left in `sys.modules`, with no file in the
candidate's folder.
"""

from __future__ import annotations

import os
import secrets
import time
import types
from contextlib import contextmanager
from typing import Any, Callable, Iterator, Optional

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from kernelwright.child import load_task_module

_perf_counter = time.perf_counter  # captured before any candidate code runs (as in timing.py)

NOISE_SEED = 0x6B77


# --- reaching the reference ---------------------------------------------------------------

def load_reference(source: str) -> tuple[types.ModuleType, str]:
    """Execute the task's source as a module nobody can import: returns it and the file name its
    code objects carry. It sits in `sys.modules` only while its body runs (dataclasses, pickling
    of classes look themselves up there); no file is written."""
    tag = secrets.token_hex(8)
    filename = f"<reference-{tag}>"
    return load_task_module(source, filename, f"_kw_ref_{tag}"), filename


def build_reference(source: str, seed: int, device: Any) -> tuple[types.ModuleType, str, list[Any], Any]:
    """The task's module (`load_reference`), the file name its code carries, its init inputs and its
    `Model` on `device`, each drawn and built under `seed` as the candidate's will be."""
    import copy

    from kernelwright.measure.draw import seed_all

    module, filename = load_reference(source)
    seed_all(seed)
    init_inputs = module.get_init_inputs()
    seed_all(seed)
    with torch.no_grad():
        model = module.Model(*copy.deepcopy(init_inputs)).to(device)
    return module, filename, init_inputs, model


# --- probes around custom calls -------------------------------------------------------------

def tensors_in(obj: Any, depth: int = 0) -> list[torch.Tensor]:
    """The tensors in a call's arguments or result (tuples, lists, dict values; a few levels)."""
    if isinstance(obj, torch.Tensor):
        return [obj]
    if depth > 4:
        return []
    if isinstance(obj, (tuple, list)):
        return [t for x in obj for t in tensors_in(x, depth + 1)]
    if isinstance(obj, dict):
        return [t for x in obj.values() for t in tensors_in(x, depth + 1)]
    return []


def _snapshot(args: tuple, kwargs: dict) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """A call's tensor arguments and copies of them as they were before it ran."""
    inputs = tensors_in((args, kwargs))
    return inputs, [t.detach().clone() for t in inputs]


def _changed(now: torch.Tensor, before: torch.Tensor) -> Optional[torch.Tensor]:
    """Elementwise mask of what a call wrote into `now` (None: it wrote nothing). A tensor resized
    in place counts as wholly written."""
    if now.shape != before.shape or now.dtype != before.dtype:
        return torch.ones(now.shape, dtype=torch.bool, device=now.device)
    diff = now != before
    if now.is_floating_point() or now.is_complex():
        diff &= ~(now.isnan() & before.isnan())
    return diff if bool(diff.any()) else None


class Probe:
    """Runs one custom call; subclasses observe or alter it."""

    def call(self, key: str, fn: Callable[..., Any], args: tuple, kwargs: dict) -> Any:
        return fn(*args, **kwargs)


_urandom = os.urandom  # captured before any candidate code runs


def _spot_rate() -> int:
    """How many times in 256 a spot check perturbs a custom call: 16, or KERNELWRIGHT_SPOT_IN_256
    (1-128; tests raise it so that a short timing loop is sure to be spot-checked). Read when the
    runner starts, before any candidate code."""
    try:
        return max(1, min(128, int(os.environ.get("KERNELWRIGHT_SPOT_IN_256", "16"))))
    except ValueError:
        return 16


SPOT_IN_256 = _spot_rate()


class SpotCheck(Probe):
    """The probe of every ordinary call (trials, timed calls, re-check): after a custom call has
    returned, the OS's randomness decides, 1 time in 16, to replace the tensors it returned with
    noise (as PerturbProbe does), and says so in the call's reply (`perturbed`). Nothing exists
    before the call returns that could tell a candidate which calls will be perturbed; once it
    knows, its forward depended on the kernel (the output moves) or did not (it still matches the
    reference: not credited), and a claim about it either way can only lose (judge.py)."""

    def __init__(self) -> None:
        self.perturbed: list[str] = []
        self.noise = PerturbProbe(set())
        # (noise handed to the candidate, what the call really returned): `restore` writes the
        # latter into the former once the call's outputs are taken, so that a result the candidate
        # keeps (a lazily computed weight, a cache) holds the kernel's values in later calls
        self.replaced: list[tuple[torch.Tensor, torch.Tensor]] = []

    def call(self, key: str, fn: Callable[..., Any], args: tuple, kwargs: dict) -> Any:
        result = fn(*args, **kwargs)
        returned = tensors_in(result)
        if not returned or _urandom(1)[0] >= SPOT_IN_256:
            return result
        # A tensor returned that is (a view of) an argument, an output argument written in place
        # say, could only be scrambled in place, where it may be an input or a parameter: such
        # calls are left to the work stage's probes, which know what a call wrote.
        arguments = {_storage(t) for t in tensors_in((args, kwargs))}
        if any(_storage(t) in arguments for t in returned):
            return result
        self.perturbed.append(key)
        scrambled = self.noise.scramble_result(result, [])
        self.replaced += [(n, t) for n, t in zip(tensors_in(scrambled), returned) if n is not t]
        return scrambled

    def restore(self) -> None:
        """After the call's outputs were taken: every noise tensor holds what its call returned."""
        with torch.no_grad():
            for noise, real in self.replaced:
                if noise.shape == real.shape and noise.dtype == real.dtype:
                    noise.copy_(real)
        self.replaced = []


class TimeProbe(Probe):
    def __init__(self, sync: Callable[[], None]):
        self.sync, self.seconds = sync, 0.0

    def call(self, key: str, fn: Callable[..., Any], args: tuple, kwargs: dict) -> Any:
        self.sync()
        start = _perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            self.sync()
            self.seconds += _perf_counter() - start


# ATen operators that allocate, view, copy, fill or read metadata: what a kernel's C++ wrapper does
# around its own loop. Every other aten:: operator dispatched inside a custom call is library compute.
_NOT_COMPUTE = frozenset("""
    empty empty_like empty_strided new_empty new_empty_strided zeros zeros_like ones ones_like full full_like
    new_zeros new_ones new_full fill_ zero_ copy_ clone contiguous _to_copy to view _unsafe_view reshape
    _reshape_alias as_strided expand expand_as permute transpose t squeeze unsqueeze select slice narrow
    detach alias resize_ set_ lift_fresh unbind split chunk flatten size stride sym_size sym_stride
    is_contiguous item _local_scalar_dense arange numel dim is_same_size record_stream
""".split())


class LibraryOps(TorchDispatchMode):
    """Inside one custom call: the ATen compute operators it dispatched (C++ `at::addmm`,
    `torch::conv2d`... reach the dispatcher, and so this mode, like a Python caller's) and the
    synchronized time they took."""

    def __init__(self, sync: Callable[[], None]):
        super().__init__()
        self.sync, self.seconds = sync, 0.0
        self.ops: dict[str, int] = {}
        # the storages compute operators returned, held (so that no address is reused meanwhile)
        # until `made_by_library` asks about a call's results
        self.produced: list[Any] = []

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: Optional[dict] = None) -> Any:
        name = func.name()  # "aten::addmm.out"
        namespace, _, rest = name.partition("::")
        if namespace != "aten" or rest.split(".")[0] in _NOT_COMPUTE:
            return func(*args, **(kwargs or {}))
        self.sync()
        start = _perf_counter()
        try:
            out = func(*args, **(kwargs or {}))
        finally:
            self.sync()
            self.seconds += _perf_counter() - start
            op = f"aten::{rest.split('.')[0]}"
            self.ops[op] = self.ops.get(op, 0) + 1
        self.produced += [t.untyped_storage() for t in tensors_in(out)]
        return out

    def made_by_library(self, result: Any) -> bool:
        """Every tensor `result` holds is one a compute operator returned during the call (its
        `.out` variants' outputs included): the call's answer is ATen's. Forgets the call."""
        made = {_storage_of(s) for s in self.produced}
        self.produced = []
        returned = tensors_in(result)
        return bool(returned) and all(_storage(t) in made for t in returned)


class InspectProbe(Probe):
    """Which entry points computed something (`work`), of all those called (`seen`), and the ATen
    compute they dispatched from inside (`library`: its time in `library_seconds`)."""

    def __init__(self, sync: Callable[[], None] = lambda: None) -> None:
        self.seen: set[str] = set()
        self.work: set[str] = set()
        self.library = LibraryOps(sync)
        self.library_made: set[str] = set()  # entry points whose every result an ATen operator returned

    def call(self, key: str, fn: Callable[..., Any], args: tuple, kwargs: dict) -> Any:
        inputs, before = _snapshot(args, kwargs)
        with self.library:
            result = fn(*args, **kwargs)
        if self.library.made_by_library(result):
            self.library_made.add(key)
        self.seen.add(key)
        written = [t for t, b in zip(inputs, before) if _changed(t, b) is not None]
        outputs = tensors_in(result) + written
        if any(not _copy_or_fill(o, before) for o in outputs):
            self.work.add(key)
        return result


def _copy_or_fill(out: torch.Tensor, inputs: list[torch.Tensor]) -> bool:
    """`out` holds nothing computed: empty, one value repeated, or an input's values (any shape,
    after a cast)."""
    flat = out.detach().reshape(-1)
    if flat.numel() == 0:
        return True
    if flat.numel() > 1 and bool((flat == flat[0]).all()):
        return True
    for x in inputs:
        if x.numel() == flat.numel():
            try:
                same = torch.equal(flat, x.reshape(-1).to(device=flat.device, dtype=flat.dtype))
            except (RuntimeError, TypeError):
                continue
            if same:
                return True
    return False


class PerturbProbe(Probe):
    """Replaces what the calls of `keys` produce with deterministic noise."""

    def __init__(self, keys: set[str]):
        self.keys = keys
        self.calls = 0

    def call(self, key: str, fn: Callable[..., Any], args: tuple, kwargs: dict) -> Any:
        if key not in self.keys:
            return fn(*args, **kwargs)
        inputs, before = _snapshot(args, kwargs)
        result = fn(*args, **kwargs)
        written = []
        with torch.no_grad():
            for t, b in zip(inputs, before):
                mask = _changed(t, b)
                if mask is not None:
                    t.copy_(torch.where(mask, self._noise(t), t))
                    written.append(t)
        return self.scramble_result(result, written)

    def scramble_result(self, result: Any, written: list[torch.Tensor]) -> Any:
        if isinstance(result, torch.Tensor):
            storage = _storage(result)
            if storage is not None and any(_storage(w) == storage for w in written):
                return result  # a view of an argument it wrote: already scrambled in place
            with torch.no_grad():
                return self._noise(result)
        if isinstance(result, (tuple, list)):
            items = [self.scramble_result(x, written) for x in result]
            return type(result)(items) if isinstance(result, list) else tuple(items)
        if isinstance(result, float):
            return -3.0 * result + 1.0
        return result

    def _noise(self, t: torch.Tensor) -> torch.Tensor:
        """A tensor like `t` whose values carry nothing of `t`'s: random, larger, sign-mixed."""
        self.calls += 1
        t = t.detach()
        if t.dtype == torch.bool:
            return ~t
        if not (t.is_floating_point() or t.is_complex()):
            # integers (indices, counts): the call's own values, moved to other positions, so an
            # index stays in range
            return t.reshape(-1).roll(1).reshape(t.shape).clone()
        gen = torch.Generator(device=t.device)
        gen.manual_seed(NOISE_SEED + self.calls)
        real = torch.view_as_real(t) if t.is_complex() else t
        finite = real[real.isfinite()]
        scale = 1.0 + (float(finite.abs().max()) if finite.numel() else 0.0)
        noise = torch.randn(real.shape, generator=gen, device=t.device, dtype=torch.float32) * (3.0 * scale)
        limit = torch.finfo(real.dtype).max
        noise = noise.clamp(-limit, limit).to(real.dtype)
        return torch.view_as_complex(noise) if t.is_complex() else noise


def _storage_of(storage: Any) -> Optional[int]:
    try:
        return storage.data_ptr()
    except Exception:  # noqa: BLE001
        return None


def _storage(t: torch.Tensor) -> Optional[int]:
    try:
        return t.untyped_storage().data_ptr()
    except Exception:  # noqa: BLE001 - tensors without storage (sparse, meta)
        return None


class _OpRouter(TorchDispatchMode):
    """Sends calls of the candidate's own dispatcher operators through a probe."""

    def __init__(self, ops: set[str], probe: Probe):
        super().__init__()
        self.ops, self.probe = ops, probe

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: Optional[dict] = None) -> Any:
        kwargs = kwargs or {}
        name = func.name()
        if name in self.ops or name.split(".")[0] in self.ops:
            return self.probe.call(f"op.{name.split('.')[0]}", func, args, kwargs)
        return func(*args, **kwargs)


@contextmanager
def probing(counter: Any, probe: Probe, new_ops: set[str]) -> Iterator[None]:
    """Route every custom call (wrapped extension functions, Triton launches, new dispatcher
    operators) through `probe` for the duration."""
    before, counter.probe = counter.probe, probe
    try:
        if new_ops:
            with _OpRouter(new_ops, probe):
                yield
        else:
            yield
    finally:
        counter.probe = before
