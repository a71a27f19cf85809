"""Output comparison: structure, shape, dtype, tolerance, non-finite values, mismatch statistics.

Every floating output is judged twice over: element by element (allclose at the tolerance) and as a
whole (its norm-wise relative error against the reference, `relative_error`, at most the
tolerance's rtol). The elementwise test alone is blind where most of an output's values are below
its atol (a long softmax, whose values are near 1/N): there it passed values rounded to 3-4 mantissa
bits, or every value under atol written as zero. An honest fp32 kernel (another summation order, a
fast exp) is 1e-7 to 1e-5 off as a whole; fp32 outputs rounded to fp16 are about 3e-4 off, to bf16
about 2e-3, a TF32 GEMM about 5e-4: a precision below the task's dtype fails.

A floating output outside the tolerance gets a second hearing where the caller can run the
reference in float64 (`exact`): it passes when its error against that run is at most
ACCURACY_FACTOR times the reference's own, in the worst element and in root mean square alike.
The tolerance alone asks a kernel to round like the reference's library: an fp32 product summed
over K = 8192 is 2e-3 off the exact one (cuBLAS on the H200), so a kernel five times closer to the
exact product but rounding differently fails 1e-4 (an H200 session in docs/results/sessions/). A precision
downgrade still fails: one TF32 pass is 70-230 times the reference's error there. The same
measure is torch.compile's own accuracy check (torch._dynamo.utils.same with an fp64 reference:
RMSE at most twice the eager fp32 model's).

Functions from torch are captured at import (in the judge and the runner, before candidate code runs), so a
candidate that rebinds `torch.allclose` cannot change the verdict.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional

import torch

from kernelwright.records import Accuracy, Mismatch, Tolerance

_allclose = torch.allclose
_isfinite = torch.isfinite
_isclose = torch.isclose
_equal = torch.equal

# How much less accurate than the reference an output may be, against the reference run in float64
# (both its largest error and its root mean square); plus a tenth of the tolerance's atol, so that
# a reference that happens to be exact in float64 is not a bar of zero.
ACCURACY_FACTOR = 2.0
# How close the reference must be to its own float64 run for that run to count as the exact answer
# (the half-precision tolerance: bf16 rounding is 4e-3; an fp32 GEMM over K = 8192 is 2e-5 relative)
SAME_RUN_TOL = 1e-2
# The least norm-wise relative error the whole-output test demands, whatever rtol says (rtol=0 asks
# for atol alone): a few fp32 ulps.
MIN_RELATIVE = 1e-6

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
    # a match decided against the float64 run (an output outside the tolerance, as accurate)
    accuracy: Optional[Accuracy] = None


Exact = Callable[[], Optional[list[Any]]]


def compare(ref: Any, cand: Any, tol: Tolerance, trial: int, exact: Optional[Exact] = None) -> Comparison:
    """`exact`, where given: the reference's flattened outputs on the same inputs run in float64 (None
    where it cannot run so), asked only for an output outside the tolerance."""
    refs, cands = flatten(ref), flatten(cand)
    accuracy: Optional[Accuracy] = None
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
        if m is None:
            continue
        exact_outs = exact() if exact is not None and r.is_floating_point() else None
        e = exact_outs[i] if exact_outs is not None and i < len(exact_outs) else None
        a = as_accurate(r, c, e, tol) if e is not None else None
        if a is not None and passes(a, tol):
            if accuracy is None or _ratio(a) > _ratio(accuracy):
                accuracy = a
            continue
        m.accuracy = a  # heard and found less accurate: the record says by how much
        return Comparison(False, "mismatch", _describe(i, m, tol), m)
    return Comparison(True, "match", "", worst, accuracy)


def relative_bound(tol: Tolerance) -> float:
    """The largest norm-wise relative error an output may have against the reference."""
    return max(tol.rtol, MIN_RELATIVE)


def relative_error(r64: torch.Tensor, c64: torch.Tensor, keep: torch.Tensor) -> Optional[float]:
    """||c - r|| / ||r|| over the elements `keep` (float64 tensors); None where the reference is all
    zero there (no scale to be relative to: the elementwise atol decides)."""
    norm = float(r64[keep].norm())
    if norm == 0.0:
        return None
    return float((c64 - r64)[keep].norm()) / norm


def as_accurate(r: torch.Tensor, c: torch.Tensor, e: Any, tol: Tolerance) -> Optional[Accuracy]:
    """The candidate's and the reference's errors against `e`, the reference's output run in float64;
    None where `e` is no float64 run of this output (another shape or dtype: the module cast inside),
    or where the candidate is non-finite and the reference is not, or not in the same way."""
    if not isinstance(e, torch.Tensor) or e.dtype != torch.float64 or tuple(e.shape) != tuple(r.shape):
        return None
    r64, c64, e64 = r.detach().double(), c.detach().double(), e.detach().to(r.device)
    ref_finite = _isfinite(r64)
    if bool((~_isfinite(c64) & ref_finite).any()):
        return None
    off = ~ref_finite  # the reference's NaN and Inf: the candidate's must be the same there
    if bool(off.any()) and not identical(r64[off], c64[off]):
        return None
    keep = ref_finite & _isfinite(e64)
    if not bool(keep.any()):
        return None
    # The float64 run must be a run of the same computation: a reference that draws random numbers,
    # or rounds to half precision inside, is off its float64 run by far more than rounding, and its
    # "error" would be a bar any output clears.
    # As a whole too: an atol of 1e-2 alone would call any run of small outputs the same.
    same = relative_error(e64, r64, keep)
    if not _allclose(r64[keep], e64[keep], atol=SAME_RUN_TOL, rtol=SAME_RUN_TOL) or (same or 0.0) > SAME_RUN_TOL:
        return None
    ref_err, cand_err = (r64 - e64)[keep].abs(), (c64 - e64)[keep].abs()
    return Accuracy(comparisons=1, max_abs_err=float(cand_err.max()), ref_max_abs_err=float(ref_err.max()),
                    rms_err=float(cand_err.square().mean().sqrt()), ref_rms_err=float(ref_err.square().mean().sqrt()),
                    scale=float(e64[keep].square().mean().sqrt()))


def passes(a: Accuracy, tol: Tolerance) -> bool:
    # A tenth of the tolerance, so that a reference exact in float64 is not a bar of zero: of its
    # atol, or of the output's own scale where that is smaller (small outputs: atol would swallow them).
    slack = min(tol.atol, relative_bound(tol) * a.scale) / 10 if a.scale is not None else tol.atol / 10
    return (a.max_abs_err <= ACCURACY_FACTOR * a.ref_max_abs_err + slack
            and a.rms_err <= ACCURACY_FACTOR * a.ref_rms_err + slack)


def _ratio(a: Accuracy) -> float:
    return a.max_abs_err / a.ref_max_abs_err if a.ref_max_abs_err > 0 else float("inf")


def merge_accuracy(seen: Optional[Accuracy], new: Optional[Accuracy]) -> Optional[Accuracy]:
    """Comparisons decided against float64 so far: their count, and the worst one's errors."""
    if new is None:
        return seen
    if seen is None:
        return new
    worst = new if _ratio(new) > _ratio(seen) else seen
    return worst.model_copy(update={"comparisons": seen.comparisons + new.comparisons})


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


# Elements compared at once: the float64 copies and masks of a comparison are made per chunk (128
# MiB a side), so judging an 8 GiB output never holds several float64 copies of the whole of it.
CHUNK_ELEMENTS = 1 << 24


def _chunks(r: torch.Tensor, c: torch.Tensor) -> Any:
    """(reference, candidate) pieces of both outputs in float64, CHUNK_ELEMENTS at a time."""
    rf, cf = r.detach().reshape(-1), c.detach().reshape(-1)
    for s in range(0, rf.numel(), CHUNK_ELEMENTS):
        yield rf[s:s + CHUNK_ELEMENTS].double(), cf[s:s + CHUNK_ELEMENTS].double()


def _tensor_mismatch(r: torch.Tensor, c: torch.Tensor, tol: Tolerance, trial: int) -> Optional[Mismatch]:
    if not r.is_floating_point() and not r.is_complex():
        if _equal(r, c):
            return None
        diff = (r != c)
        return Mismatch(trial=trial, mismatch_fraction=float(diff.float().mean()), detail="integer output differs")
    # Chunk by chunk (CHUNK_ELEMENTS): an 8 GiB output never holds several float64 copies of itself.
    bad_nonfinite = not_close = count = 0
    total, largest, err_sq, ref_sq = 0.0, None, 0.0, 0.0
    for r64, c64 in _chunks(r, c):
        ref_finite, cand_finite = _isfinite(r64), _isfinite(c64)
        # NaN/Inf only count as a match where the reference has the same non-finite value.
        bad_nonfinite += int((~cand_finite & ref_finite).sum())
        both = ref_finite & cand_finite
        delta = (c64 - r64)[both]
        if delta.numel():
            largest = max(largest or 0.0, float(delta.abs().max()))
            total += float(delta.abs().sum())
            count += delta.numel()
            err_sq += float(delta.square().sum())
            ref_sq += float(r64[both].square().sum())
        not_close += int((~_isclose(c64, r64, atol=tol.atol, rtol=tol.rtol, equal_nan=True)).sum())
    # as relative_error, over the whole output: None where the reference is all zero
    whole = (err_sq ** 0.5) / (ref_sq ** 0.5) if ref_sq > 0.0 else None
    if bad_nonfinite == 0 and not_close == 0 and (whole is None or whole <= relative_bound(tol)):
        return None
    return Mismatch(
        trial=trial,
        max_abs_diff=largest,
        mean_abs_diff=total / count if count else None,
        mismatch_fraction=not_close / r.numel(),
        nonfinite_in_candidate=bad_nonfinite,
        elements=r.numel(),
        relative_error=whole,
    )


def _describe(i: int, m: Mismatch, tol: Tolerance) -> str:
    head = (f"output {i} differs from the reference (atol={tol.atol:g}, rtol={tol.rtol:g}, relative error of "
            f"the whole output at most {relative_bound(tol):g})")
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
