"""Output comparison: structure, shape, dtype, tolerance, non-finite values, mismatch statistics.

Functions from torch are captured at import (in the judge and the runner, before candidate code runs), so a
candidate that rebinds `torch.allclose` cannot change the verdict.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional

import torch

from kernelwright.records import Mismatch, Tolerance

_allclose = torch.allclose
_isfinite = torch.isfinite
_isclose = torch.isclose
_equal = torch.equal

# Defaults: fp32 as current KernelBench (1e-4); half precision 1e-2.
DEFAULT_TOL = {
    torch.float32: 1e-4,
    torch.float64: 1e-6,
    torch.float16: 1e-2,
    torch.bfloat16: 1e-2,
}


def flatten(out: Any) -> list[Any]:
    """Outputs may be a tensor or a (nested) tuple/list of them; scalars are kept as they are."""
    if isinstance(out, (tuple, list)):
        items: list[Any] = []
        for o in out:
            items.extend(flatten(o))
        return items
    return [out]


def tolerance_for(ref_outputs: list[Any], atol: Optional[float], rtol: Optional[float]) -> Tolerance:
    dtypes = [t.dtype for t in ref_outputs if isinstance(t, torch.Tensor) and t.is_floating_point()]
    # The loosest precision present decides the default: one bf16 output makes the task bf16.
    default, name = 1e-4, "float32"
    for dt in dtypes:
        tol = DEFAULT_TOL.get(dt, 1e-4)
        if tol >= default:
            default, name = tol, str(dt).replace("torch.", "")
    if not dtypes:
        name = str(ref_outputs[0].dtype).replace("torch.", "") if ref_outputs and isinstance(ref_outputs[0], torch.Tensor) else "none"
    return Tolerance(atol=default if atol is None else atol, rtol=default if rtol is None else rtol, dtype=name)


@dataclass
class Comparison:
    ok: bool
    kind: str  # "match" | "shape" | "mismatch" | "subclass"
    message: str = ""
    mismatch: Optional[Mismatch] = None


def compare(ref: Any, cand: Any, tol: Tolerance, trial: int) -> Comparison:
    refs, cands = flatten(ref), flatten(cand)
    if len(refs) != len(cands):
        return Comparison(False, "shape", f"expected {len(refs)} outputs, got {len(cands)}")
    worst: Optional[Mismatch] = None
    for i, (r, c) in enumerate(zip(refs, cands)):
        if not isinstance(r, torch.Tensor):
            if r != c:
                return Comparison(False, "mismatch", f"output {i}: expected {r!r}, got {c!r}",
                                  Mismatch(trial=trial, detail="non-tensor output differs"))
            continue
        if not isinstance(c, torch.Tensor):
            return Comparison(False, "shape", f"output {i}: expected a tensor, got {type(c).__name__}")
        if type(c) is not torch.Tensor:
            # A subclass can override comparison or compute lazily after the timer stops.
            return Comparison(False, "subclass", f"output {i} is a {type(c).__name__}, a torch.Tensor subclass")
        if tuple(c.shape) != tuple(r.shape):
            return Comparison(False, "shape", f"output {i}: expected shape {tuple(r.shape)}, got {tuple(c.shape)}")
        if c.dtype != r.dtype:
            return Comparison(False, "mismatch", f"output {i}: expected dtype {r.dtype}, got {c.dtype}",
                              Mismatch(trial=trial, detail="dtype differs"))
        if c.device != r.device:
            return Comparison(False, "mismatch", f"output {i}: expected device {r.device}, got {c.device}",
                              Mismatch(trial=trial, detail="device differs"))
        m = _tensor_mismatch(r, c, tol, trial)
        if m is not None:
            worst = m
            return Comparison(False, "mismatch", _describe(i, m, tol), m)
    return Comparison(True, "match", "", worst)


def trial_verdict(result: Comparison, ref: Any, cand: Any,
                  previous: list[tuple[Any, Any]]) -> Optional[tuple[str, str, dict[str, Any]]]:
    """What a correctness trial ends with: None when it passed, else (verdict, message, record fields).
    `previous` holds the earlier trials' (reference, candidate) outputs: the same candidate output for
    different reference outputs is a cached result."""
    if result.kind == "subclass":
        return "cheat", result.message, {"cheat_reasons": ["output is a tensor subclass"]}
    for prev_r, prev_c in previous:
        if identical(prev_c, cand) and not identical(prev_r, ref):
            return ("cheat", "the candidate returned the same output for different inputs",
                    {"cheat_reasons": ["output reused across calls (cached result)"]})
    if result.kind == "shape":
        return "shape_mismatch", result.message, {}
    if not result.ok:
        return "wrong_output", result.message, {"mismatch": result.mismatch.model_dump() if result.mismatch else None}
    return None


def _tensor_mismatch(r: torch.Tensor, c: torch.Tensor, tol: Tolerance, trial: int) -> Optional[Mismatch]:
    if not r.is_floating_point() and not r.is_complex():
        if _equal(r, c):
            return None
        diff = (r != c)
        return Mismatch(trial=trial, mismatch_fraction=float(diff.float().mean()), detail="integer output differs")
    r64, c64 = r.detach().double(), c.detach().double()
    ref_finite, cand_finite = _isfinite(r64), _isfinite(c64)
    # NaN/Inf only count as a match where the reference has the same non-finite value.
    bad_nonfinite = int((~cand_finite & ref_finite).sum())
    if bad_nonfinite == 0 and _allclose(c64, r64, atol=tol.atol, rtol=tol.rtol, equal_nan=True):
        return None
    both = ref_finite & cand_finite
    diff = (c64 - r64).abs()[both]
    close = _isclose(c64, r64, atol=tol.atol, rtol=tol.rtol, equal_nan=True)
    return Mismatch(
        trial=trial,
        max_abs_diff=float(diff.max()) if diff.numel() else None,
        mean_abs_diff=float(diff.mean()) if diff.numel() else None,
        mismatch_fraction=float((~close).double().mean()),
        nonfinite_in_candidate=bad_nonfinite,
    )


def _describe(i: int, m: Mismatch, tol: Tolerance) -> str:
    head = f"output {i} differs from the reference (atol={tol.atol:g}, rtol={tol.rtol:g})"
    detail = m.summary()
    return f"{head}; {detail}" if detail else head


def identical(a: Any, b: Any) -> bool:
    """Bitwise-equal outputs (NaNs in the same places count as equal)."""
    fa, fb = flatten(a), flatten(b)
    if len(fa) != len(fb):
        return False
    for x, y in zip(fa, fb):
        if not (isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor)):
            if x != y:
                return False
            continue
        if x.shape != y.shape or x.dtype != y.dtype:
            return False
        if x.is_floating_point():
            same = (x == y) | (x.isnan() & y.isnan())
            if not bool(same.all()):
                return False
        elif not _equal(x, y):
            return False
    return True


UNJOINED = ("the output changed after forward returned: work on another stream was not joined to the "
            "caller's stream")


def unjoined(out: Any, device: torch.device, synchronize: Callable[[], None]) -> bool:
    """On a GPU: is an output still being written after forward returned to the caller? A snapshot
    on the current stream (it runs after everything forward queued *there*) differs from the
    outputs once the whole device is done (`synchronize`, the caller's own captured one)."""
    tensors = [t for t in flatten(out) if isinstance(t, torch.Tensor) and t.is_cuda]
    snap = [t.clone() for t in tensors]
    torch.cuda.current_stream(device).synchronize()
    synchronize()
    return not all(identical(s, t) for s, t in zip(snap, tensors))
