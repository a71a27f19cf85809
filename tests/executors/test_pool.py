"""EvalPool on the CPU: real sandboxed children, real C++ builds, against the plain evaluator.

The pool must change how fast verdicts come, never what they are."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from kernelwright.device import available_cores
from kernelwright.evaluate import evaluate
from kernelwright.evaluate.evaluator import EvalRun, precheck, run_prepared
from kernelwright.executors.dedupe import result_key
from kernelwright.executors.pool import EvalPool, PoolConfig, Slot
from kernelwright.records import NOT_JUDGED, Verdict
from kernelwright.tasks import load_task
from tests.conftest import CANDIDATES, TASKS

CPU = CANDIDATES / "cpu"
GPU = CANDIDATES / "gpu"


@pytest.fixture(scope="module")
def bias_relu():
    return load_task(str(TASKS / "bias_relu.py"))


def text(name: str, folder: Path = CPU) -> str:
    return (folder / name).read_text()


@pytest.mark.build
def test_pool_gives_the_evaluators_verdicts_and_links_duplicates(bias_relu, fast_cfg):
    cfg = fast_cfg()
    names = ["correct_cpp.py", "wrong_cpp.py", "correct_cpp.py", "torch_only.py", "cpp_syntax_error.py",
             "syntax_error.py"]
    expected = [Verdict.CORRECT, Verdict.WRONG_OUTPUT, Verdict.CORRECT, Verdict.NO_CUSTOM_KERNEL,
                Verdict.COMPILE_ERROR, Verdict.SYNTAX_ERROR]
    with EvalPool(PoolConfig(devices=["cpu"], compile_workers=1)) as pool:
        futures = [pool.submit(bias_relu, text(n), cfg) for n in names]
        results = [f.result(timeout=900) for f in futures]
        stats = pool.snapshot()
    assert [r.verdict for r in results] == expected
    # the duplicate was evaluated once: same record, but each caller owns its copy
    assert stats.linked_duplicates == 1 and results[0] == results[2] and results[0] is not results[2]
    assert stats.decided_before_sandbox == 1  # the Python syntax error never reached a process
    # correct, wrong (same extension source: one build in the cache) and the broken C++ were prebuilt
    assert stats.prebuilt == 3 and stats.decided_at_build == 1 and stats.evaluated == 3
    built = results[0]
    assert built.stages[0].name == "prebuild" and built.custom_kernel and built.compiled
    # a build error decided in a compile slot reads exactly like the evaluator's own record
    broken = results[4]
    assert not broken.compile_only and broken.device == "cpu" and not broken.compiled
    assert "expected" in (broken.error or "")
    direct = evaluate(bias_relu, text("cpp_syntax_error.py"), cfg)
    assert direct.verdict == broken.verdict and direct.error == broken.error


def test_slot_is_recycled_after_timeout_and_crash_and_the_next_verdict_is_clean(bias_relu, fast_cfg):
    cfg = fast_cfg(timeout=20.0)
    with EvalPool(PoolConfig(devices=["cpu"], compile_workers=1)) as pool:
        spin = pool.submit(bias_relu, text("spin_python.py"), cfg).result(timeout=300)
        # os._exit is a static violation first; with the rules off it reaches a process and crashes it
        crash = pool.submit(bias_relu, text("os_exit.py"), cfg.but(static_checks=False)).result(timeout=300)
        # its own limit: the short one is for the spin, and a loaded machine can take 20 s to time a call
        after = pool.submit(bias_relu, text("torch_only.py"), cfg.but(timeout=300.0)).result(timeout=600)
        stats = pool.snapshot()
    assert spin.verdict == Verdict.TIMEOUT and crash.verdict == Verdict.CRASH
    assert stats.recycled == 2
    assert after.verdict == Verdict.NO_CUSTOM_KERNEL and after.correct


def test_a_slot_runs_prewarmed_workers_each_with_its_own_scratch(bias_relu, fast_cfg, tmp_path):
    cfg = fast_cfg()
    slot = Slot("s0", max_jobs=1, prewarm=True, overlap=False)
    assert slot.env_for({"PATH": "/usr/bin"})["MAX_JOBS"] == "1"
    pre = precheck(bias_relu, text("torch_only.py"), cfg)
    try:
        first = run_prepared(bias_relu, pre, cfg, slot.run)
        spare = slot._spare
        assert spare is not None and spare.proc.poll() is None  # the next worker waits, torch imported
        scratch = spare.scratch
        second = run_prepared(bias_relu, pre, cfg, slot.run)
        assert spare.proc.poll() is not None  # ... and it was the one that ran the second job
        assert first.verdict == second.verdict == Verdict.NO_CUSTOM_KERNEL
        assert second.confinement.trusted
        # its scratch (its only writable folder) went with it; the next spare has a fresh one
        assert not os.path.exists(scratch) and slot._spare.scratch != scratch
        slot.recycle()
        assert slot._spare is None and slot.recycled == 1
    finally:
        slot.discard_spare()


@pytest.mark.build
def test_several_slots_on_one_device_share_its_queue_and_give_the_same_verdicts(bias_relu, fast_cfg):
    # a device listed twice is one device; slots_per_device=2 puts two slots on its one queue
    with EvalPool(PoolConfig(devices=["cpu", "cpu"], compile_workers=1, slots_per_device=2)) as pool:
        slots = [s for s in pool._slots if not s.name.startswith("compile")]
        assert [s.name for s in slots] == ["cpu", "cpus1"] and list(pool._device_q) == ["cpu"]
        ran: list[str] = []
        for s in slots:
            def recording(*a, _run=s.run, _name=s.name, **k):
                ran.append(_name)
                return _run(*a, **k)
            s.run = recording
        futures = [pool.submit(bias_relu, text(n), fast_cfg()) for n in ("correct_cpp.py", "wrong_cpp.py")]
        results = [f.result(timeout=900) for f in futures]
    assert [r.verdict for r in results] == [Verdict.CORRECT, Verdict.WRONG_OUTPUT]
    assert sorted(ran) == ["cpu", "cpus1"]  # the second evaluation did not wait for the first's slot


def test_compile_slots_never_run_more_jobs_than_cores():
    with EvalPool(PoolConfig(devices=["cpu"], compile_workers=2)) as pool:
        compile_slots = [s for s in pool._slots if s.name.startswith("compile")]
        assert len(compile_slots) == 2
        assert sum(s.max_jobs for s in compile_slots) <= max(2, available_cores())


def test_queues_serve_the_lowest_priority_first_then_in_order_of_arrival():
    """A search's launch variants (priority 1) wait behind first candidates queued after them; the
    stop marker comes after everything queued."""
    from types import SimpleNamespace

    from kernelwright.executors.pool import _STOP, _Queue

    q = _Queue()
    jobs = [SimpleNamespace(name=n, run=EvalRun(priority=p)) for n, p in
            (("variant a", 1), ("first", 0), ("variant b", 1), ("second", 0))]
    q.put(jobs[0])
    q.put(_STOP)
    for job in jobs[1:]:
        q.put(job)
    assert [q.get().name for _ in jobs] == ["first", "second", "variant a", "variant b"]
    assert q.get() is _STOP


def test_dedupe_key_is_task_code_and_settings(bias_relu):
    cfg = EvalRun(device="cpu")
    key = result_key(bias_relu, "abc", cfg)
    assert key == result_key(bias_relu, "abc", cfg.but(keep_workdir=True))
    assert key == result_key(bias_relu, "abc", cfg.but(priority=1))  # when, not what
    assert key == result_key(bias_relu, "abc", cfg.but(deadline=12.5))  # whether, not what
    assert key != result_key(bias_relu, "abd", cfg)
    assert key != result_key(bias_relu, "abc", cfg.but(trials=3))
    other = load_task("builtin/L1/02_bias_add")
    assert key != result_key(other, "abc", cfg)


def test_a_candidate_queued_past_its_cells_clock_is_recorded_unjudged_and_not_linked(bias_relu, fast_cfg):
    # the clock is asked when the evaluation would begin, after the queue: a passed deadline is
    # not_built, saying why, and starts no process; the same code from a cell with time left (no
    # deadline) is judged afresh, not handed the unjudged record
    cfg = fast_cfg()
    with EvalPool(PoolConfig(devices=["cpu"], prebuild=False)) as pool:
        late = pool.submit(bias_relu, text("torch_only.py"), cfg.but(deadline=time.monotonic() - 1)).result(300)
        assert pool.snapshot().past_clock == 1 and pool.snapshot().evaluated == 0
        fresh = pool.submit(bias_relu, text("torch_only.py"), cfg).result(300)
        stats = pool.snapshot()
    assert late.verdict == Verdict.NOT_BUILT and late.error.startswith(NOT_JUDGED) and "clock ran out" in late.error
    assert fresh.verdict == Verdict.NO_CUSTOM_KERNEL and stats.evaluated == 1 and stats.linked_duplicates == 0
    direct = evaluate(bias_relu, text("torch_only.py"), cfg.but(deadline=time.monotonic() - 1))
    assert direct.verdict == Verdict.NOT_BUILT and direct.error == late.error


@pytest.mark.gpu
def test_pool_on_a_gpu_recycles_after_an_illegal_address(tmp_path):
    import torch

    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU visible")
    task = load_task(str(TASKS / "bias_relu.py"))
    cfg = EvalRun.of(device="cuda:0", trials=3, warmup=3, iters=20, input_sets=4, cache_dir=str(tmp_path))
    names = ["correct_cuda.py", "illegal_address_cuda.py", "correct_cuda.py", "correct_triton.py"]
    with EvalPool(PoolConfig(devices=["cuda:0"])) as pool:
        results = [pool.submit(task, text(n, GPU), cfg).result(timeout=900) for n in names]
        stats = pool.snapshot()
    direct = [evaluate(task, text(n, GPU), cfg).verdict for n in names]
    assert [r.verdict for r in results] == direct
    assert stats.linked_duplicates == 1 and stats.recycled >= 1


@pytest.mark.build
def test_closing_cancels_what_never_ran_and_every_duplicate_copy_with_it(bias_relu, fast_cfg):
    cfg = fast_cfg()
    pool = EvalPool(PoolConfig(devices=["cpu"], compile_workers=1, prewarm=False))
    texts = [text("correct_cpp.py"), text("wrong_cpp.py"), text("wrong_cpp.py")]  # the last two are one job
    futures = [pool.submit(bias_relu, t, cfg) for t in texts]
    pool.close()  # the compile slot holds the first build; the second job is still queued
    assert all(f.done() for f in futures[1:]) and all(f.cancelled() for f in futures[1:])
