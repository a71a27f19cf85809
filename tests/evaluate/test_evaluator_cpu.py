"""The evaluator on the CPU, against honest and hostile candidates (tests/fixtures/candidates/cpu).

Every candidate runs for real: a real child process, real C++ builds through load_inline.
"""

from __future__ import annotations

import os
import time

import pytest

from kernelwright.evaluate import evaluate
from kernelwright.records import Verdict
from kernelwright.tasks import load_task

from tests.conftest import CANDIDATES, TASKS, candidate_param

CPU = CANDIDATES / "cpu"


@pytest.fixture(scope="module")
def bias_relu():
    return load_task(str(TASKS / "bias_relu.py"))


def run(task, name, cfg):
    return evaluate(task, (CPU / name).read_text(), cfg)


# (candidate file, expected verdict with static rules on, expected verdict with them off or None)
CASES = [
    ("correct_cpp.py", Verdict.CORRECT, None),
    ("torch_only.py", Verdict.NO_CUSTOM_KERNEL, None),
    ("compiled_then_torch.py", Verdict.NO_CUSTOM_KERNEL, None),
    ("wrong_cpp.py", Verdict.WRONG_OUTPUT, None),
    ("shape_cpp.py", Verdict.SHAPE_MISMATCH, None),
    ("runtime_error.py", Verdict.RUNTIME_ERROR, None),
    ("sources_keyword.py", Verdict.HALLUCINATED_API, None),
    ("missing_header.py", Verdict.HALLUCINATED_API, None),
    ("cpp_syntax_error.py", Verdict.COMPILE_ERROR, None),
    ("syntax_error.py", Verdict.SYNTAX_ERROR, None),
    ("no_code.txt", Verdict.NO_CODE, None),
    ("no_modelnew.py", Verdict.STATIC_VIOLATION, None),
    ("markdown_answer.md", Verdict.CORRECT, None),
    ("cached_output.py", Verdict.CHEAT, None),
    ("cache_after_warmup.py", Verdict.CHEAT, None),
    ("tensor_subclass.py", Verdict.CHEAT, None),
    ("inherits_reference.py", Verdict.STATIC_VIOLATION, None),
    ("fallback_on_error.py", Verdict.STATIC_VIOLATION, Verdict.NO_CUSTOM_KERNEL),
    ("patch_timer.py", Verdict.STATIC_VIOLATION, Verdict.CHEAT),
    ("patch_evaluator.py", Verdict.STATIC_VIOLATION, Verdict.CHEAT),
    ("os_exit.py", Verdict.STATIC_VIOLATION, Verdict.CRASH),
    ("sys_exit.py", Verdict.STATIC_VIOLATION, Verdict.CRASH),
    ("segfault_cpp.py", Verdict.CRASH, None),
]


@pytest.mark.parametrize("name,expected,expected_dynamic", [candidate_param(CPU / c[0], *c[1:]) for c in CASES])
def test_verdicts(bias_relu, fast_cfg, name, expected, expected_dynamic):
    result = run(bias_relu, name, fast_cfg())
    assert result.verdict == expected, (result.error, result.output_tail)
    if expected_dynamic is not None:
        dynamic = run(bias_relu, name, fast_cfg(static_checks=False))
        assert dynamic.verdict == expected_dynamic, (dynamic.error, dynamic.output_tail)


@pytest.mark.build
def test_correct_record_is_complete(bias_relu, fast_cfg):
    r = run(bias_relu, "correct_cpp.py", fast_cfg())
    assert r.verdict == Verdict.CORRECT and r.compiled and r.correct and r.custom_kernel
    assert r.judge == "split"  # written by the judge, which never imported the candidate
    assert r.custom_calls.get("kw_fixture_bias_relu.bias_relu", 0) >= 3
    assert r.speedup is not None and r.runtime_ms > 0 and r.ref_runtime_ms > 0
    assert r.timing.calls == 20 and r.ref_timing.calls == 20
    # the protocol's null calls were timed in the same loop: their cost is on both records
    assert r.timing.protocol_ms is not None and r.timing.protocol_ms == r.ref_timing.protocol_ms > 0
    assert "null call" in r.timing.protocol
    assert r.net_speedup is None or r.net_speedup > 0
    assert r.tolerance.atol == 1e-4 and r.tolerance.rtol == 1e-4 and r.tolerance.dtype == "float32"
    # shared_build: the trusted builder (or the shared cache) served its literal load_inline call
    assert [s.name for s in r.stages] == ["shared_build", "setup", "load_reference", "compile", "init", "correctness",
                                         "timing", "recheck", "work"]
    assert 0.0 < r.custom_share <= 1.0 and r.copy_only_calls == []
    assert all(s.ok for s in r.stages)


def test_tolerance_is_configurable_and_recorded(bias_relu, fast_cfg):
    r = run(bias_relu, "torch_only.py", fast_cfg(atol=1e-2, rtol=1e-2, time=False))
    assert r.tolerance.atol == 1e-2 and r.speedup is None


@pytest.mark.build
def test_uninitialized_memory_is_not_correct(bias_relu, fast_cfg):
    r = run(bias_relu, "uninitialized_output.py", fast_cfg())
    assert r.verdict in (Verdict.WRONG_OUTPUT, Verdict.CHEAT), r.error
    assert not r.correct


@pytest.mark.build
def test_late_thread_is_caught(bias_relu, fast_cfg):
    assert run(bias_relu, "late_thread.py", fast_cfg()).verdict == Verdict.STATIC_VIOLATION
    dynamic = run(bias_relu, "late_thread.py", fast_cfg(static_checks=False))
    assert dynamic.verdict in (Verdict.WRONG_OUTPUT, Verdict.CHEAT), dynamic.error
    assert not dynamic.correct


def test_python_infinite_loop_times_out_and_next_evaluation_is_fine(bias_relu, fast_cfg):
    start = time.monotonic()
    r = run(bias_relu, "spin_python.py", fast_cfg(timeout=20))
    assert r.verdict == Verdict.TIMEOUT and "correctness" in r.error
    assert time.monotonic() - start < 40
    assert run(bias_relu, "torch_only.py", fast_cfg(time=False)).verdict == Verdict.NO_CUSTOM_KERNEL


@pytest.mark.build
def test_cpp_infinite_loop_times_out(bias_relu, fast_cfg):
    from kernelwright.evaluate.evaluator import precheck, run_prepared

    # compile-only: it stops after the import
    assert run(bias_relu, "spin_cpp.py", fast_cfg(compile_only=True)).verdict == Verdict.COMPILED
    # The trusted builder built it into the shared scope, compile-only too (its literal arguments); a
    # pool's prebuild finds it there, so that the 30 s are the kernel spinning, with room for a loaded
    # machine to load the build.
    pre = precheck(bias_relu, (CPU / "spin_cpp.py").read_text(), fast_cfg())
    assert run_prepared(bias_relu, pre, fast_cfg(), prebuild=True).verdict == Verdict.COMPILED
    r = run(bias_relu, "spin_cpp.py", fast_cfg(timeout=30))
    assert r.verdict == Verdict.TIMEOUT and r.compiled and "correctness" in r.error, (r.error, r.stages)


@pytest.mark.build
def test_segfault_is_a_crash_with_signal(bias_relu, fast_cfg):
    r = run(bias_relu, "segfault_cpp.py", fast_cfg())
    assert r.verdict == Verdict.CRASH and "SIGSEGV" in r.error


def test_print_flood_is_capped(bias_relu, fast_cfg):
    r = run(bias_relu, "print_flood.py", fast_cfg(time=False))
    assert r.verdict == Verdict.NO_CUSTOM_KERNEL
    assert r.output_tail is not None and len(r.output_tail) <= 4000


def test_forked_child_does_not_outlive_the_evaluation(bias_relu, fast_cfg):
    marker = f"{time.time_ns() % 10**9}.25"  # the child's sleep argument: found by a /proc scan
    source = f'''
import os
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, features):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(features))

    def forward(self, x):
        if os.fork() == 0:
            os.execv("/bin/sleep", ["sleep", "{marker}"])
        return torch.relu(x + self.bias)
'''
    assert evaluate(bias_relu, source, fast_cfg()).verdict == Verdict.STATIC_VIOLATION
    r = evaluate(bias_relu, source, fast_cfg(static_checks=False, time=False))
    assert r.verdict == Verdict.CHEAT and "child process" in r.error
    assert _running_with(marker) == []


def _running_with(marker: str) -> list[int]:
    found = []
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{entry}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    continue  # a zombie has already ended; only its exit status is left
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                if marker.encode() in f.read():
                    found.append(int(entry))
        except (OSError, IndexError):
            continue
    return found


def test_speedup_above_10x_is_flagged(fast_cfg):
    task = load_task(str(TASKS / "slow_reference.py"))
    source = '''
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        return x.sum(dim=1)
'''
    r = evaluate(task, source, fast_cfg(warmup=1, iters=5))
    assert r.verdict == Verdict.NO_CUSTOM_KERNEL and r.speedup > 10
    assert any(f.startswith("speedup_above_10x") for f in r.flags)


@pytest.mark.build
def test_a_build_of_the_candidates_own_process_is_never_cached(bias_relu, fast_cfg, build_cache):
    # a name read only by running the candidate (and no other test's): its own process builds it,
    # in its box's scratch, and only the trusted builder's products are ever cached
    text = (CPU / "correct_cpp.py").read_text().replace('name="kw_fixture_bias_relu"',
                                                        'name="kw_fixture_" + str("bias_relu_own")')
    first = evaluate(bias_relu, text, fast_cfg(time=False))
    assert first.verdict == Verdict.CORRECT and first.builds[0]["cache"] == "miss"
    assert not any(s.name == "shared_build" for s in first.stages)
    assert list(build_cache.rglob("kw_fixture_bias_relu_own*")) == []


@pytest.mark.build
@pytest.mark.nvcc
def test_compile_only_builds_cuda_without_a_gpu(bias_relu, fast_cfg):
    """No GPU here: CUDA sources are compiled for real (to objects with a CPU torch), not run."""
    import shutil

    if shutil.which("nvcc") is None:
        pytest.skip("nvcc not on PATH")
    gpu = CANDIDATES / "gpu"
    ok = evaluate(bias_relu, (gpu / "correct_cuda.py").read_text(), fast_cfg(device="cuda", compile_only=True))
    assert ok.verdict == Verdict.COMPILED and ok.compiled and ok.compile_only, (ok.error, ok.output_tail)
    broken = (gpu / "correct_cuda.py").read_text().replace("fmaxf", "relu").replace("v > 0.f ? v : 0.f", "relu(v)")
    bad = evaluate(bias_relu, broken, fast_cfg(device="cuda", compile_only=True))
    assert bad.verdict == Verdict.HALLUCINATED_API and not bad.compiled, bad.error
