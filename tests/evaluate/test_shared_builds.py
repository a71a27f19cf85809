"""The trusted builder and the build cache's shared scope (evaluate/buildspec.py, builder.py).

Candidates whose load_inline arguments are literals share one build, made by a sandboxed process
that runs no candidate code, one box per key; what a candidate's own process builds dies with its
box; a hostile flag cannot put a library under any key but its own, nor change another key's
build; a failed build is compiled once.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from kernelwright.evaluate import buildcache, buildpch, evaluate
from kernelwright.evaluate.evaluator import pch_folder, sandbox_env
from kernelwright.evaluate.buildspec import literal_builds
from kernelwright.records import Verdict
from kernelwright.tasks import load_task

from tests.conftest import CANDIDATES, TASKS

CPU = CANDIDATES / "cpu"


@pytest.fixture(scope="module")
def bias_relu():
    return load_task(str(TASKS / "bias_relu.py"))


def stage(result, name):
    return next((s for s in result.stages if s.name == name), None)


# -- reading literal calls (no build) ------------------------------------------------------------

def test_literal_arguments_are_read_through_module_constants():
    code = '''
import torch.utils.cpp_extension as ce
HEAD = "#include <torch/extension.h>\\n"
SRC = HEAD + "int f() { return 1; }"
FLAGS = ["-O3"] + ["-fopenmp"]
ext = ce.load_inline("kw_a", cpp_sources=SRC, functions=["f"], extra_cflags=FLAGS, verbose=False)
'''
    specs = literal_builds(code)
    assert specs.complete and len(specs.builds) == 1
    assert specs.builds[0].arguments == {"name": "kw_a", "cpp_sources": "#include <torch/extension.h>\nint f() { return 1; }",
                                         "functions": ["f"], "extra_cflags": ["-O3", "-fopenmp"], "verbose": False}


@pytest.mark.parametrize("call", [
    'load_inline(name=f"kw_{n}", cpp_sources="x")',        # an f-string
    'load_inline(name="kw", cpp_sources=make())',           # a function's result
    'load_inline(name="kw", cpp_sources=SRC, **opts)',      # **kwargs
    'load_inline("kw", "x", functions=["f"])',              # a second positional argument
    'load_inline(name="kw", cpp_sources=TWICE)',            # a name bound twice
])
def test_a_call_that_is_not_literal_is_left_to_the_worker(call):
    code = f'SRC = "x"\nTWICE = "a"\nTWICE = "b"\nn = 1\nopts = {{}}\nfrom torch.utils.cpp_extension import load_inline\next = {call}\n'
    specs = literal_builds(code)
    assert specs.calls == 1 and not specs.builds and not specs.complete


def test_the_parent_and_the_worker_compute_one_key():
    """The worker keys by the arguments it passes (instrument._keyed_build, through signature.bind);
    the parent keys by what it read. A tuple and a list are one JSON array."""
    a = buildcache.build_key({"name": "kw", "functions": ("f",), "verbose": True}, "", "2.0")
    b = buildcache.build_key({"functions": ["f"], "name": "kw", "build_directory": "/x"}, "", "2.0")
    assert a == b
    assert a != buildcache.build_key({"functions": ["f"], "name": "kw"}, "9.0", "2.0")


# -- the builder, for real -----------------------------------------------------------------------

@pytest.mark.build
def test_two_candidates_with_one_extension_build_it_once(bias_relu, fast_cfg, tmp_path):
    cfg = fast_cfg(cache_dir=str(tmp_path / "cache"))
    first_text = (CPU / "correct_cpp.py").read_text()
    second_text = first_text + "\n# the same extension, another candidate (another code hash)\n"
    first = evaluate(bias_relu, first_text, cfg)
    second = evaluate(bias_relu, second_text, cfg)
    assert first.verdict == second.verdict == Verdict.CORRECT and first.custom_kernel and second.custom_kernel
    assert first.candidate_hash != second.candidate_hash
    assert stage(first, "shared_build").detail.startswith("0 cached, 1 built")
    assert stage(second, "shared_build").detail.startswith("1 cached, 0 built")
    # neither worker compiled: both loaded the trusted build from the shared scope
    for r in (first, second):
        assert [b.get("cache_scope") for b in r.builds] == ["shared"], r.builds
    shared = Path(cfg.cache_dir) / "builds" / buildcache.SHARED
    assert len(list(shared.glob(f"*/{buildcache.INDEX}"))) == 1
    # the machine's precompiled torch header for its flags, made by the first build that needed it
    [spec] = literal_builds(first_text).builds
    header = buildpch.header_for(pch_folder(), spec.arguments, buildcache.torch_version(), sandbox_env(cfg), wait=True)
    assert header is not None and Path(header + ".gch").stat().st_size > 1 << 20


@pytest.mark.parametrize("arguments, served", [
    ({"cpp_sources": "x", "functions": ["f"], "with_cuda": False}, True),
    ({"cpp_sources": ["x"], "extra_cflags": ["-O3", "-fopenmp", "-march=native", "-DKW_A=1", "-std=c++17", "-g"]}, True),
    ({"cpp_sources": "x", "cuda_sources": "y"}, False),  # main.cpp then holds CUDA's declarations
    ({"cpp_sources": "x", "extra_include_paths": ["/x"]}, False),  # another <torch/extension.h> may be there
    ({"cpp_sources": "x", "no_implicit_headers": True}, False),  # the header would add names to the unit
    # the header is compiled on the host: nothing that names a file, a program, a plugin or a shell word
    *(({"cpp_sources": "x", "extra_cflags": [flag]}, False) for flag in (
        "-fplugin=/x/p.so", "-B/x", "-include/x/h.h", "@/x/args", "-Wl,-rpath,/x", "-Wa,-x", "-specs=/x",
        "-DX=`id`", "-DX=$(id)", "-O3 -fopenmp", "-o/x", "-wrapper", "-iquote/x")),
])
def test_only_plain_builds_get_the_precompiled_header(arguments, served):
    assert (buildpch.plain_flags({"name": "kw", **arguments}) is not None) is served


@pytest.mark.build
def test_a_hostile_flag_cannot_plant_a_library_under_another_key(bias_relu, fast_cfg, tmp_path):
    """The flag's shell command runs in the builder's sandbox at build time and writes a library
    into a folder named like another build's key; the parent promotes only the key it computed."""
    planted = "0123456789abcdef01234567"
    flag = (f"-DKW_PLANTED=`mkdir -p ../{planted} && cp /etc/hostname ../{planted}/kw_fixture_bias_relu.so`")
    text = (CPU / "correct_cpp.py").read_text().replace('functions=["bias_relu", "bias_add"]', f'functions=["bias_relu", "bias_add"], extra_cflags=["{flag}"]')
    assert flag in text
    cfg = fast_cfg(cache_dir=str(tmp_path / "cache"), static_checks=False)
    result = evaluate(bias_relu, text, cfg)
    assert result.verdict == Verdict.CORRECT, (result.error, result.output_tail)
    shared = Path(cfg.cache_dir) / "builds" / buildcache.SHARED
    assert not (shared / planted).exists()
    [entry] = [json.loads(p.read_text()) for p in shared.glob(f"*/{buildcache.INDEX}")]
    assert entry["artifact"] == "kw_fixture_bias_relu.so"


@pytest.mark.build
def test_a_hostile_flag_cannot_rewrite_another_keys_build(bias_relu, fast_cfg, tmp_path):
    """The flag's command outlives its compile and truncates the library of the candidate's other
    build, whose key an honest candidate shares: each key is built in a box of its own."""
    hostile = (CPU / "hostile" / "cflags_poison_other_key.py").read_text()
    honest = (CPU / "correct_cpp.py").read_text()
    assert literal_builds(honest).builds[0] in literal_builds(hostile).builds  # the same key
    cfg = fast_cfg(cache_dir=str(tmp_path / "cache"), static_checks=False, time=False)
    first = evaluate(bias_relu, hostile, cfg)
    assert stage(first, "shared_build").detail.startswith("0 cached, 2 built"), stage(first, "shared_build")
    assert first.verdict == Verdict.CORRECT, (first.error, first.output_tail)
    second = evaluate(bias_relu, honest, cfg)
    assert stage(second, "shared_build").detail.startswith("1 cached, 0 built")
    assert second.verdict == Verdict.CORRECT, (second.error, second.output_tail)
    assert [b.get("cache_scope") for b in second.builds] == ["shared"]
    shared = Path(cfg.cache_dir) / "builds" / buildcache.SHARED
    assert all(lib.stat().st_size > 100 for lib in shared.glob("*/kw_fixture_bias_relu.so"))


@pytest.mark.build
def test_a_failed_build_compiles_once_and_gives_the_workers_verdict(bias_relu, fast_cfg, tmp_path):
    cfg = fast_cfg(cache_dir=str(tmp_path / "cache"))
    text = (CPU / "cpp_syntax_error.py").read_text()
    first = evaluate(bias_relu, text, cfg)
    again = evaluate(bias_relu, text + "\n# again\n", cfg)
    for r in (first, again):
        assert r.verdict == Verdict.COMPILE_ERROR and r.error and "error" in r.error.lower(), r.error
        assert [b.get("cache_scope") for b in r.builds] == ["shared (failed)"]
    assert first.error == again.error
    assert stage(first, "shared_build").detail.startswith("0 cached, 0 built, 1 failed")
    assert stage(again, "shared_build").detail.startswith("1 cached")
    assert not any(name.startswith(".") for name in os.listdir(Path(cfg.cache_dir) / "builds" / buildcache.SHARED))
