"""Work proven where it is timed, by code this evaluation built (evaluate/proof.py, work.SpotCheck,
work.LibraryOps), and compile-only verdicts from what the judge finds built (evaluate/built.py).

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
import shutil

import pytest
import torch

from kernelwright.evaluate import built, evaluate, proof, work
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


# the honest PyTorch rewrite, with one build beside it (the builds below are what is judged)
TORCH_ONLY = (CANDIDATES / "cpu" / "torch_only.py").read_text()
TINY_CUDA = TORCH_ONLY + """
from torch.utils.cpp_extension import load_inline

ext = load_inline(name="kw_fixture_tiny_objects", cpp_sources="int tiny_host() { return 1; }",
                  cuda_sources="__global__ void tiny_kernel(float* x) { x[0] = 1.f; }", no_implicit_headers=True)
"""


@pytest.mark.build
@pytest.mark.nvcc
@pytest.mark.skipif(torch.version.cuda is not None or not shutil.which("nvcc"), reason="objects only: a CPU torch, nvcc")
def test_trusted_objects_only_build_decides_and_is_not_built_twice(bias_relu, proof_cfg):
    """Compile-only with a CPU torch: the trusted builder compiles the literal call to objects; the
    judge reads that outcome, and the candidate's runner does not compile it again."""
    r = evaluate(bias_relu, TINY_CUDA, proof_cfg(compile_only=True))
    assert r.verdict == Verdict.COMPILED, (r.verdict, r.error, r.output_tail)
    assert r.builds[0]["cache_scope"] == "shared (objects)" and r.build_products == []
    assert r.stages[0].name == "shared_build" and r.stages[0].detail.startswith("0 cached, 1 built")


COMPUTED_BUILD = TORCH_ONLY + """
from torch.utils.cpp_extension import load_inline

try:  # arguments computed at run time: not the trusted builder's to build
    load_inline(name=f"kw_fixture_computed_{len('ab')}", cpp_sources="int computed() { return 1; }{BREAK}",
                no_implicit_headers=True, is_python_module=False)
except Exception:
    pass
"""


@pytest.mark.build
@pytest.mark.parametrize("broken,expected", [(False, Verdict.COMPILED), (True, Verdict.COMPILE_ERROR)])
def test_computed_build_is_judged_from_the_scratch(bias_relu, proof_cfg, broken, expected):
    """A build the trusted builder cannot take: the judge reads its folder in the scratch itself, a
    library there is checked and hashed, and sources left without one are a failed build."""
    source = COMPUTED_BUILD.replace("{BREAK}", " int broken( {" if broken else "")
    r = evaluate(bias_relu, source, proof_cfg(compile_only=True))
    assert r.verdict == expected, (r.verdict, r.error, r.output_tail)
    names = [os.path.basename(p.path) for p in r.build_products if p.elf == "shared object"]
    assert names == ([] if broken else ["kw_fixture_computed_2.so"])


def test_real_triton_kernel_is_compiled(bias_relu, proof_cfg):
    """The control for the two above: a triton.jit function, with Triton loaded in the runner."""
    pytest.importorskip("triton")
    r = evaluate(bias_relu, (CANDIDATES / "gpu" / "correct_triton.py").read_text(), proof_cfg(compile_only=True))
    assert r.verdict == Verdict.COMPILED, (r.verdict, r.error, r.output_tail)


def test_forged_compile_only_verdict_is_not_compiled(bias_relu, proof_cfg):
    """A library planted where builds go, a forged build record and a rebound verdict function: the
    judge decides from what it finds itself, and this candidate's source builds nothing."""
    source = (HOSTILE / "compile_forged_verdict.py").read_text()
    r = evaluate(bias_relu, source, proof_cfg(compile_only=True, static_checks=False))
    assert r.verdict == Verdict.NO_CUSTOM_KERNEL and r.build_products == [], (r.verdict, r.error, r.output_tail)
    assert any(b.get("name") == "kw_fixture_forged" for b in r.builds)  # the forged record did reach the runner's


def test_proof_fixtures_share_one_build():
    """The proof fixtures that build carry the same C++ source and load_inline call: one build."""
    blocks = {re.search(r'CPP_SOURCE = r""".*?"""\n\next = load_inline\(.*?\)\n', path.read_text(), re.S).group(0)
              for path in HOSTILE.glob("proof_*.py") if "ext = load_inline" in path.read_text()}
    assert len(blocks) == 1


# --- the parts --------------------------------------------------------------------------------

def _elf(e_type: int) -> bytes:
    """A minimal ELF file of this machine's kind (the interpreter's header, one section entry)."""
    import struct
    import sys

    with open(sys.executable, "rb") as f:
        head = bytearray(f.read(64))
    struct.pack_into("<H", head, 16, e_type)
    struct.pack_into("<Q", head, 40, 64)  # e_shoff: right after the header
    struct.pack_into("<HH", head, 58, 64, 1)  # e_shentsize, e_shnum
    return bytes(head) + bytes(64)


# two load_inline calls whose arguments are computed: not the trusted builder's to build
COMPUTED = "from torch.utils.cpp_extension import load_inline\n" + \
    "for n in 'ab':\n    load_inline(name=n, cpp_sources=n)\n" * 2


def _job(tmp_path, trusted=(), source=COMPUTED):
    from kernelwright.records import EvalJob, TimingSpec

    return EvalJob(task_source="", candidate_source=source, device="cpu", trials=1, seed=0, input_sets=1,
                   timing=TimingSpec(warmup=1, iters=1, flush_cache=False), builds_root="", workdir=str(tmp_path),
                   compile_only=True, trusted_builds=list(trusted))


def test_compile_only_verdict_is_what_the_judge_finds(tmp_path):
    """built.verdict reads the scratch's build folders itself: only a well-formed ELF product of each
    source counts; sources left without one are a failed build; a link or a bare magic is nothing."""
    from kernelwright.records import TrustedBuild

    key = tmp_path / "builds" / ("a" * 24)
    key.mkdir(parents=True)
    (key / "main.cpp").write_text("int f() { return 0; }")
    (key / "main.o").write_bytes(_elf(1))
    decided, products = built.verdict(_job(tmp_path), None)
    assert decided.verdict == "compiled" and [os.path.basename(p.path) for p in products] == ["main.o"]
    assert products[0].elf == "object" and len(products[0].sha256) == 64
    # no build call the trusted builder could not take: what lies in the scratch was planted there
    decided, products = built.verdict(_job(tmp_path, source="import torch\n"), None)
    assert decided.verdict == "no_custom_kernel" and products == []
    for forged in (b"\x7fELF" + bytes(60), _elf(2)):  # a magic alone; an executable, not an object
        (key / "main.o").write_bytes(forged)
        assert built.verdict(_job(tmp_path), None)[0].verdict == "compile_error"
    (key / "main.o").unlink()
    outside = tmp_path / "elsewhere.o"
    outside.write_bytes(_elf(1))
    (key / "main.o").symlink_to(outside)  # never followed
    assert built.verdict(_job(tmp_path), None)[0].verdict == "compile_error"
    (key / "main.o").unlink()
    (key / "main.cpp").unlink()
    (key / "kw.so").write_bytes(_elf(1))  # an object named as a library
    assert built.verdict(_job(tmp_path), None)[0].verdict == "no_custom_kernel"
    (key / "kw.so").write_bytes(_elf(3))
    (key / "build.ninja").write_text("")
    (key / "main.cpp").write_text("")
    assert built.verdict(_job(tmp_path), None)[0].verdict == "compiled"
    failed = TrustedBuild(key="b" * 24, name="broken", ok=False, error="RuntimeError: main.cpp:1:16: error: "
                          "expected ')' before '{' token")
    decided, _ = built.verdict(_job(tmp_path, [failed]), None)
    assert decided.verdict == "compile_error" and "caught" in decided.error and "broken" in decided.error
    (key / "kw.so").unlink()
    ok = TrustedBuild(key="b" * 24, name="fine", ok=True, objects_only=True)
    assert built.verdict(_job(tmp_path, [ok]), None)[0].verdict == "compile_error"  # the scratch's failure stands
    (key / "main.cpp").unlink()
    assert built.verdict(_job(tmp_path, [ok]), None)[0].verdict == "compiled"


def test_triton_kernels_are_known_from_the_source_and_the_maps(tmp_path):
    fake = (HOSTILE / "compile_fake_triton.py").read_text()
    assert built.triton_jit_functions(fake) == []
    real = "import triton\nimport triton.language as tl\n@triton.autotune(configs=[], key=[])\n@triton.jit\n" \
           "def k(x):\n    pass\nfrom triton import jit as j\n@j(do_not_specialize=[0])\ndef m(x):\n    pass\n"
    assert built.triton_jit_functions(real) == ["k", "m"]
    assert built.triton_jit_functions("class triton:\n    jit = None\n@triton.jit\ndef k(): pass\n") == []
    line = "7f0000000000-7f0000001000 r-xp 00000000 00:00 1 {}\n"
    assert not built.triton_mapped(line.format(tmp_path / "triton" / "_C" / "libtriton.so"))
    assert not built.triton_mapped(None)
    triton = pytest.importorskip("triton")
    native = os.path.join(os.path.realpath(os.path.dirname(triton.__file__)), "_C", "libtriton.so")
    assert built.triton_mapped(line.format(native))


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
