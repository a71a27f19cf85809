"""Work proven where it is timed, by code this evaluation built (evaluate/proof.py, work.SpotCheck,
work.LibraryOps), and compile-only verdicts from what was built (candidate_load.compile_only_verdict).

The build tier evaluates hostile fixtures (tests/fixtures/candidates/cpu/hostile/proof_*.py,
compile_*.py) against an honest control; the proof_* fixtures that build share one C++ source, so
the extension builds once (the honest control's evaluation builds it into the shared cache, and
the cache fixtures then find it there). The spot checks' rate is raised to 1 in 4 for these
evaluations, so that a short timing loop is sure to be spot-checked. The unmarked tests drive the
parts on real tensors, real Python objects and maps text.
"""

from __future__ import annotations

import os
import re

import pytest
import torch

from kernelwright.evaluate import evaluate, proof, work
from kernelwright.evaluate.candidate_load import compile_only_verdict, triton_kernels
from kernelwright.records import Verdict
from kernelwright.tasks import load_task

from tests.conftest import CANDIDATES, TASKS

HOSTILE = CANDIDATES / "cpu" / "hostile"


@pytest.fixture(scope="module")
def bias_relu():
    return load_task(str(TASKS / "bias_relu.py"))


@pytest.fixture(scope="module")
def proof_cfg(build_cache):
    from kernelwright.evaluate import EvalRun

    def make(**overrides):
        env = {"KERNELWRIGHT_SPOT_IN_256": "64", "KERNELWRIGHT_CACHE": str(build_cache)}
        base = dict(device="cpu", trials=3, warmup=3, iters=20, input_sets=4, timeout=300.0,
                    cache_dir=str(build_cache), extra_env=env)
        base.update(overrides)
        return EvalRun.of(**base)

    return make


@pytest.fixture(scope="module")
def honest(bias_relu, proof_cfg):
    """The honest control, timed: spot checks in its trials and timed calls leave it correct."""
    return evaluate(bias_relu, (HOSTILE / "proof_honest.py").read_text(), proof_cfg())


@pytest.mark.build
def test_honest_kernel_keeps_its_credit(honest):
    assert honest.verdict == Verdict.CORRECT, (honest.verdict, honest.error, honest.output_tail)
    assert honest.custom_kernel and honest.custom_calls.get("kw_fixture_proof.bias_relu", 0) >= 3
    assert honest.library_share is not None and honest.library_share < 0.2
    assert honest.timing is not None and honest.timing.calls == 20


# (fixture, source rewrite, timed, verdict with static rules off, words the error must hold)
HOSTILE_CASES = [
    ("proof_aten_compute.py", None, False, Verdict.NO_CUSTOM_KERNEL, "compute is ATen's: what its calls returned"),
    ("proof_counted_only.py", None, True, Verdict.CHEAT, "not in a timed call"),
    ("proof_discarded_unless_probed.py", None, True, Verdict.NO_CUSTOM_KERNEL, "unannounced spot check"),
    ("proof_forged_evidence.py", None, False, Verdict.NO_CUSTOM_KERNEL, "no library this evaluation built"),
]


@pytest.mark.build
def test_another_candidates_build_is_out_of_reach(honest, bias_relu, proof_cfg):
    """The build cache holds the honest control's library now, but the box sees only the entries of
    its own job's keys (buildcache.provide): the fixture that would load it finds nothing."""
    assert honest.verdict == Verdict.CORRECT
    source = (HOSTILE / "proof_cache_library.py").read_text()
    r = evaluate(bias_relu, source, proof_cfg(static_checks=False, time=False))
    assert r.verdict != Verdict.CORRECT and not r.custom_kernel, (r.verdict, r.error)
    assert "no kw_fixture_proof library in the build cache" in (r.error or ""), (r.verdict, r.error)


@pytest.mark.build
@pytest.mark.parametrize("name,rewrite,timed,expected,words", HOSTILE_CASES,
                         ids=[c[0] + ("-copied" if c[1] else "") for c in HOSTILE_CASES])
def test_hostile_proof(honest, bias_relu, proof_cfg, name, rewrite, timed, expected, words):
    assert honest.verdict == Verdict.CORRECT  # its build is in the shared cache now
    source = (HOSTILE / name).read_text()
    if rewrite:
        source = source.replace(*rewrite)
    r = evaluate(bias_relu, source, proof_cfg(static_checks=False, time=timed))
    assert r.verdict == expected, (r.verdict, r.error, r.output_tail)
    assert words in (r.error or "") and not r.custom_kernel


@pytest.mark.build
def test_caught_failed_build_is_not_compiled(bias_relu, proof_cfg):
    r = evaluate(bias_relu, (HOSTILE / "compile_caught_failure.py").read_text(), proof_cfg(compile_only=True))
    assert r.verdict == Verdict.COMPILE_ERROR, (r.verdict, r.error)
    assert "caught" in r.error and "bias_relu" in r.error and not r.compiled


def test_fake_triton_class_is_not_a_kernel(bias_relu, proof_cfg):
    r = evaluate(bias_relu, (HOSTILE / "compile_fake_triton.py").read_text(), proof_cfg(compile_only=True))
    assert r.verdict == Verdict.NO_CUSTOM_KERNEL, (r.verdict, r.error)


def test_proof_fixtures_share_one_build():
    """The proof fixtures that build carry the same C++ source and load_inline call: one build."""
    blocks = {re.search(r'CPP_SOURCE = r""".*?"""\n\next = load_inline\(.*?\)\n', path.read_text(), re.S).group(0)
              for path in HOSTILE.glob("proof_*.py") if "ext = load_inline" in path.read_text()}
    assert len(blocks) == 1


# --- the parts --------------------------------------------------------------------------------

def test_compile_only_verdict_reads_what_was_built(tmp_path):
    roots = (str(tmp_path / "builds"),)
    obj = tmp_path / "builds" / "k" / "main.o"
    obj.parent.mkdir(parents=True)
    obj.write_bytes(b"\x7fELF" + bytes(60))
    claimed = tmp_path / "elsewhere.o"
    claimed.write_bytes(b"\x7fELF" + bytes(60))
    not_elf = tmp_path / "builds" / "k" / "fake.o"
    not_elf.write_text("object")
    built = {"name": "e", "ok": True, "products": [str(obj)]}
    assert compile_only_verdict(None, [built], roots) == ("compiled", None)
    for products in ([str(claimed)], [str(not_elf)], []):
        assert compile_only_verdict(None, [{**built, "products": products}], roots)[0] == "no_custom_kernel"
    failed = {"name": "b", "ok": False, "error_type": "RuntimeError",
              "error": "main.cpp:1:16: error: expected ')' before '{' token"}
    verdict, error = compile_only_verdict(None, [built, failed], roots)
    assert verdict == "compile_error" and "caught" in error


def test_triton_kernels_are_known_by_their_type():
    import types

    class JITFunction:
        def run(self):
            return None

    JITFunction.__module__ = "triton.runtime.jit"
    fake = types.ModuleType("m")
    fake.kernel = JITFunction()
    assert triton_kernels(fake) == []
    triton = pytest.importorskip("triton")

    @triton.jit
    def real(x):
        pass

    fake.real = real
    assert triton_kernels(fake) == ["real"]


def test_spot_check_replaces_returned_tensors_and_leaves_aliases(monkeypatch):
    monkeypatch.setattr(work, "_urandom", lambda n: b"\x00")  # every draw hits
    spot = work.SpotCheck()
    x = torch.randn(4, 5)
    keep = x.clone()
    y = spot.call("k", torch.relu, (x,), {})
    assert spot.perturbed == ["k"] and not torch.allclose(y, torch.relu(x)) and torch.equal(x, keep)
    out = torch.empty(4, 5)
    spot.perturbed = []
    same = spot.call("k", lambda t, o: o.copy_(t * 2), (x, out), {})  # an output argument returned
    assert same is out and spot.perturbed == [] and torch.equal(out, x * 2)
    monkeypatch.setattr(work, "_urandom", lambda n: b"\xff")  # no draw hits
    assert torch.equal(spot.call("k", torch.relu, (x,), {}), torch.relu(x)) and spot.perturbed == []


def test_library_ops_time_aten_compute_only():
    ops = work.LibraryOps(lambda: None)
    a, b, c = torch.randn(64, 64), torch.randn(64, 64), torch.randn(64)
    with ops:
        out = torch.empty_like(a)
        torch.relu(torch.addmm(c, a, b)).contiguous()
        out.copy_(a)
    assert set(ops.ops) == {"aten::addmm", "aten::relu"} and ops.seconds > 0


def test_inspect_probe_names_calls_whose_answer_aten_returned():
    probe = work.InspectProbe()
    x, b = torch.randn(8, 16), torch.randn(16)

    def aten(t, bias):
        return torch.relu(torch.add(t, bias))

    def own(t, bias):
        out = torch.empty_like(t)
        torch.add(t, bias, out=torch.empty_like(t))  # ATen work, not the answer
        out.copy_((t + bias).clamp(min=0))  # (stands for a loop of its own writing `out`)
        return out

    probe.call("aten", aten, (x, b), {})
    probe.call("own", own, (x, b), {})
    assert probe.library_made == {"aten"} and probe.work == {"aten", "own"}


def _maps(*paths: str) -> str:
    return "\n".join(f"7f0000000000-7f0000001000 r-xp 00000000 08:01 1 {p}" for p in paths)


def test_mapped_libraries_tell_ours_from_foreign(tmp_path):
    work_dir = str(tmp_path / "scratch")
    root = f"{work_dir}/cache/builds"  # the box's copy of the entries of its job's keys
    ours_scratch = f"{work_dir}/builds/{'a' * 24}/ext.so"
    ours_shared = f"{root}/shared/{'b' * 24}/ext.so"
    theirs_shared = f"{root}/shared/{'c' * 24}/ext.so"
    system = "/usr/lib/x86_64-linux-gnu/libc.so.6"
    keys = {"a" * 24, "b" * 24}
    libs = proof.mapped_libraries(work_dir, root, keys, _maps(system, ours_scratch, ours_shared))
    assert libs.ours == {ours_scratch, ours_shared} and not libs.foreign
    planted = f"{work_dir}/builds/{'e' * 24}/ext.so"  # put where builds go, under a key no build had
    libs = proof.mapped_libraries(work_dir, root, keys,
                                  _maps(theirs_shared, "/tmp/x.so", "/memfd:jit (deleted)",
                                        f"{work_dir}/elsewhere/lib.so", f"{work_dir}/builds/notakey/ext.so", planted))
    assert libs.foreign == {theirs_shared, "/tmp/x.so", "/memfd:jit (deleted)", f"{work_dir}/elsewhere/lib.so",
                            f"{work_dir}/builds/notakey/ext.so", planted}
    assert re.search("did not build", proof.library_verdict(libs, {"ext.f": 1}).error)
    assert "no library" in proof.library_verdict(proof.Libraries(), {"ext.f": 1}).error
    assert proof.mapped_libraries(work_dir, root, set(), None).unreadable
    built = proof.Libraries(ours={ours_scratch})
    assert proof.library_verdict(built, {"ext.f": 1, "op.ns::f": 2}) is None
    # counts forged under another name than the library's
    assert "kw_forged.f" in proof.library_verdict(built, {"ext.f": 1, "kw_forged.f": 1}).error


def test_spot_check_noise_is_undone_where_the_candidate_kept_it(monkeypatch):
    """A result the candidate keeps across calls (a lazily computed weight) holds the kernel's
    values again once the spot-checked call's outputs were taken."""
    monkeypatch.setattr(work, "_urandom", lambda n: b"\x00")
    spot = work.SpotCheck()
    x = torch.randn(4, 5)
    kept = spot.call("k", torch.relu, (x,), {})
    assert spot.perturbed == ["k"] and not torch.equal(kept, torch.relu(x))
    spot.restore()
    assert torch.equal(kept, torch.relu(x)) and spot.replaced == []
