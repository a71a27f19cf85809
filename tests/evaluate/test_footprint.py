"""The judge's device memory at KernelBench's sizes: the accounting (measure/footprint.py), the
arena that holds one call above the size limit, and the chunked comparison that never makes float64
copies of a whole output."""

from __future__ import annotations

import torch

from kernelwright.evaluate.arena import Placement
from kernelwright.measure import compare, footprint
from kernelwright.records import Tolerance

GIB = footprint.GIB
CARD = 79 * GIB  # an 80 GB card


class _Bump(Placement):
    def __init__(self, nbytes: int):
        self.nbytes, self.cursor = nbytes, 0


def _call_offsets(arena: _Bump, shapes: list[tuple[int, ...]], nbytes: int) -> list[int]:
    arena.start(nbytes)
    return [arena.place(torch.float32, s).offset for s in shapes]


def test_a_normal_call_gets_a_fresh_place_and_a_large_one_reuses_one(monkeypatch):
    shapes = [(16,), (16,)]  # two tensors of 64 bytes: a call of 128 bytes
    small = _Bump(footprint.arena_bytes(128))
    assert small.fits(128) and small.nbytes == 256
    first, second = _call_offsets(small, shapes, 128), _call_offsets(small, shapes, 128)
    assert set(first).isdisjoint(second)

    monkeypatch.setattr(footprint, "ONE_PLACE_ABOVE_BYTES", 100)
    large = _Bump(footprint.arena_bytes(128))
    assert large.fits(128) and large.nbytes == 128
    large.cursor = 64  # whatever an earlier, smaller call left: this call still starts at the start
    assert _call_offsets(large, shapes, 128) == [0, 64] == _call_offsets(large, shapes, 128)


def test_chunked_comparison_says_what_the_whole_one_says(monkeypatch):
    tol = Tolerance(atol=1e-4, rtol=1e-4, dtype="float32")
    r = torch.randn(5, 9, generator=torch.Generator().manual_seed(0))
    c = r.clone()
    c[1, 2] += 1
    c[0, 0] += 0.5
    c[4, 8] = float("nan")
    whole = compare._tensor_mismatch(r, c, tol, 0)
    monkeypatch.setattr(compare, "CHUNK_ELEMENTS", 7)
    chunked = compare._tensor_mismatch(r, c, tol, 0)
    assert whole is not None and chunked is not None
    assert chunked.nonfinite_in_candidate == whole.nonfinite_in_candidate == 1
    assert chunked.mismatch_fraction == whole.mismatch_fraction == 3 / 45
    assert chunked.max_abs_diff == whole.max_abs_diff
    assert abs(chunked.mean_abs_diff - whole.mean_abs_diff) < 1e-12
    assert compare._tensor_mismatch(r, r.clone(), tol, 0) is None


def test_a_call_of_gigabytes_that_kernelbench_fits_fits_ours():
    # level-1 shapes of KernelBench: an elementwise op on 8 GiB, a pooling of 16 GiB to 0.13 GiB,
    # a pointwise convolution of 4 GiB to 8 GiB
    for in_gib, out_gib in ((8, 8), (16, 0.13), (4, 8)):
        call = footprint.Call(int(in_gib * GIB), int(out_gib * GIB))
        assert footprint.kernelbench(call) <= CARD
        assert footprint.peak(call).total <= CARD, (in_gib, out_gib, footprint.peak(call))


def test_normal_sizes_keep_every_trial_and_a_fresh_place():
    assert footprint.trials_kept(1 << 20, 5) == 4 and footprint.trials_kept(GIB, 5) == 1
    assert not footprint.one_place(100 << 20) and footprint.arena_bytes(100 << 20) == 200 << 20


def test_shapes_of_holds_no_memory():
    out = footprint.shapes_of([torch.ones(3, 4, dtype=torch.float16), 2.0])
    assert out[0].device.type == "meta" and out[0].shape == (3, 4) and out[0].dtype == torch.float16
    assert out[1] == 2.0 and footprint.tensor_bytes(out) == 24


class _FakeServed:
    """A runner as time_served_pair sees it: a call of `fresh` placement that doubles its input."""

    def __init__(self, fresh: bool):
        self.fresh = fresh

    def stage(self, inputs):
        from types import SimpleNamespace

        return SimpleNamespace(inputs=inputs, fresh_place=self.fresh)

    def run(self, staged):
        return [staged.inputs[0] * 2]

    def before_call(self):  # the idle check of the runner's tree: a process of one thread here
        pass

    def after_call(self):
        pass

    def inputs_after(self, staged):
        return staged.inputs

    def threads(self, n):
        pass


def test_the_timing_record_says_when_calls_reused_one_place():
    from kernelwright.measure import timing

    cfg = timing.TimingConfig(warmup=1, iters=3, flush_cache=False)
    draw = lambda: [torch.ones(4)]  # noqa: E731
    for fresh in (True, False):
        pair = timing.time_served_pair(_FakeServed(fresh), _FakeServed(True), draw, lambda r, c, i: None,
                                       torch.device("cpu"), cfg, threads=1)
        assert pair.candidate.fresh_place is fresh and ("at one place of the arena" in pair.candidate.protocol) is not fresh
