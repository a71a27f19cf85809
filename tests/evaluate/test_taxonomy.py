"""Build failures -> verdicts: real compiler logs, real Python messages, and the distilled text."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from kernelwright.evaluate.taxonomy import PATTERNS, classify_build_failure, explain, first_relevant_lines
from kernelwright.records import Verdict

HALLU, COMPILE = Verdict.HALLUCINATED_API, Verdict.COMPILE_ERROR
BUILD_LOGS = Path(__file__).resolve().parents[1] / "fixtures" / "build_logs"

# Real nvcc / g++ output for sources from the small-model answers (capture.py there made them).
REAL_LOGS = [
    ("hf_bfloat16_cuda_relu", HALLU, "undefined_function"),  # relu() in device code
    ("hf_bfloat16_cpp_is_cuda", COMPILE, "syntax_error"),  # __global__ handed to g++
    ("llama_s2_include_cu", HALLU, "missing_header"),  # #include "bias_relu.cu"
    ("llama_s2_unbound_function", HALLU, "pybind_unbound_function"),  # functions=['bias_relu'], no C++ decl
    ("llama_avx512_greedy_nn_header", HALLU, "missing_header"),  # <torch/nn/functional/relu.h>
    ("llama_avx512_s1_swapped", HALLU, "undefined_function"),  # g++: __global__; nvcc: relu()
    ("cuda_context_toolkit_gap", COMPILE, "toolchain_header_missing"),  # cusparse.h absent here
    ("cuda_syntax_error", COMPILE, "syntax_error"),
    ("cuda_tensor_no_member", HALLU, "no_such_member"),  # x.data_float()
    ("cpp_torch_cuda_not_a_member", HALLU, "not_a_member"),  # torch::cuda::synchronize_all()
    ("torch_ninja_unbound_function", HALLU, "pybind_unbound_function"),  # torch's own load_inline
]


@pytest.mark.parametrize("case,verdict,pattern", REAL_LOGS)
def test_real_compiler_logs(case: str, verdict: Verdict, pattern: str) -> None:
    log = (BUILD_LOGS / f"{case}.log").read_text()
    assert explain("BuildFailed", "compile-only: building extension failed", log) == (verdict, pattern)
    # The distilled message alone (what a record keeps) must give the same verdict.
    assert explain("BuildFailed", first_relevant_lines(log)) == (verdict, pattern)


# Python-side messages, copied from real calls on torch 2.13 (the live tests below re-check two).
PYTHON_MESSAGES = [
    ("TypeError", "load_inline() got an unexpected keyword argument 'sources'", HALLU, "unexpected_keyword"),
    ("AttributeError", "module 'torch.cuda' has no attribute 'jit'", HALLU, "module_has_no_attribute"),
    ("ModuleNotFoundError", "No module named 'torch.cuda.jit'", HALLU, "no_such_module"),
    ("ImportError", "cannot import name 'load_cuda' from 'torch.utils.cpp_extension' "
     "(/x/torch/utils/cpp_extension.py)", HALLU, "cannot_import_name"),
    ("AttributeError", "'Tensor' object has no attribute 'cuda_relu'", HALLU, "tensor_has_no_attribute"),
    ("ModuleNotFoundError", "No module named 'triton'", COMPILE, "missing_dependency"),
    ("TypeError", "load_inline() missing 1 required positional argument: 'name'", COMPILE, "bad_call_arguments"),
    ("TypeError", "sequence item 3: expected str instance, int found", COMPILE, None),
    ("ImportError", "/tmp/b/bias_relu.so: undefined symbol: _Z9bias_reluN2at6TensorE", COMPILE, "link_error"),
    ("NameError", "name 'self' is not defined", COMPILE, None),
]


@pytest.mark.parametrize("exc_type,message,verdict,pattern", PYTHON_MESSAGES)
def test_python_messages(exc_type: str, message: str, verdict: Verdict, pattern: str) -> None:
    assert explain(exc_type, message) == (verdict, pattern)
    assert classify_build_failure(exc_type, message) is verdict


def test_live_python_failures() -> None:
    """The messages above, produced by real calls (load_inline rejects `sources=` before building)."""
    from torch.utils.cpp_extension import load_inline

    with pytest.raises(TypeError) as kw:
        load_inline(name="x", sources="int f();", functions=["f"])  # type: ignore[call-arg]
    with pytest.raises(AttributeError) as attr:
        torch.cuda.jit.script  # noqa: B018  (server_n2.txt's decorator)
    assert explain("TypeError", str(kw.value)) == (HALLU, "unexpected_keyword")
    assert explain("AttributeError", str(attr.value)) == (HALLU, "module_has_no_attribute")


# One line each in the real formats, with gcc's ASCII quotes (LANG=C) as well as its UTF-8 ones.
COMPILER_LINES = [
    ("main.cpp:5:10: error: 'relu' was not declared in this scope\n    5 |   return relu(x);", HALLU, "undeclared_function"),
    ("main.cpp:5:3: error: 'idx' was not declared in this scope\n    5 |   y[idx] = 0;", COMPILE, "undeclared_name"),
    ("cuda.cu(8): error: identifier \"threadIdx\" is undefined\n      int i = threadIdx.x;", COMPILE, "undeclared_name"),
    ("cuda.cu(8): error: identifier \"relu\" is undefined\n      y[i] = relu<float>(v);", HALLU, "undefined_function"),
    ("cuda.cu(1): catastrophic error: cannot open source file \"kernels.cuh\"", HALLU, "missing_header"),
    ("main.cpp:3:7: error: \u2018class at::Tensor\u2019 has no member named \u2018cuda_ptr\u2019", HALLU, "no_such_member"),
    ("main.cpp:3:7: error: 'Tensorr' in namespace 'torch' does not name a type", HALLU, "not_a_type_in_namespace"),
    ("main.cpp:1:22: error: 'cudax' has not been declared", HALLU, "undeclared_qualifier"),
    ("cuda.cu(9): error: no instance of overloaded function \"fmaxf\" matches the argument list", COMPILE, "type_error"),
    ("main.cpp:9:5: error: no matching function for call to 'f(int)'", COMPILE, "type_error"),
    ("/usr/bin/ld: main.o: undefined reference to `bias_relu(at::Tensor)'", COMPILE, "link_error"),
    ("nvcc fatal   : Unsupported gpu architecture 'compute_100a'", COMPILE, "compiler_flags"),
    ("main.cpp:4:1: error: 'foo' was not declared in this scope\n"
     "    4 | m.def(\"foo\", torch::wrap_pybind_function(foo), \"foo\");", HALLU, "pybind_unbound_function"),
]


@pytest.mark.parametrize("text,verdict,pattern", COMPILER_LINES)
def test_compiler_lines(text: str, verdict: Verdict, pattern: str) -> None:
    assert explain("RuntimeError", "Error building extension 'x'", text) == (verdict, pattern)


def test_first_error_of_each_compile_step_decides() -> None:
    """A follow-on error in the same unit does not decide; the first error of another unit may."""
    cascade = ("### c++ main.cpp (exit 1, 1.0 s)\nmain.cpp:2:1: error: expected ';' before 'int'\n"
               "main.cpp:3:9: error: 'relu' was not declared in this scope\n    3 | return relu(x);\n")
    assert explain("BuildFailed", "failed", cascade) == (COMPILE, "syntax_error")
    other_unit = cascade + ("### nvcc cuda.cu (exit 2, 9.0 s)\n"
                            "cuda.cu(8): error: identifier \"relu\" is undefined\n  relu(v);\n")
    assert explain("BuildFailed", "failed", other_unit) == (HALLU, "undefined_function")


def test_pattern_names_are_unique() -> None:
    names = [p.name for p in PATTERNS]
    assert len(names) == len(set(names))


def test_first_relevant_lines_drops_noise() -> None:
    text = (BUILD_LOGS / "torch_ninja_unbound_function.log").read_text()
    out = first_relevant_lines(text)
    assert "error: \u2018bias_add_relu\u2019 was not declared in this scope" in out
    assert 'torch::wrap_pybind_function(bias_add_relu)' in out  # the offending line, without gcc's gutter
    assert out.splitlines()[1].startswith("main.cpp:4:52:")  # file:line kept, build directory dropped
    for noise in ("[1/2]", "FAILED:", "ninja:", "-isystem", "^~~"):
        assert noise not in out
    assert len(out.splitlines()) <= 12


def test_first_relevant_lines_dedups_caps_and_falls_back() -> None:
    err = "cuda.cu(3): error: expected a \";\""
    assert first_relevant_lines(f"{err}\n{err}\n{err}") == err
    many = "\n".join(f"main.cpp:{i}:1: error: e{i}" for i in range(40))
    assert len(first_relevant_lines(many, max_lines=5).splitlines()) == 5
    traceback = ('Traceback (most recent call last):\n  File "candidate.py", line 3, in <module>\n'
                 "    import tilelang\nModuleNotFoundError: No module named 'tilelang'")
    assert first_relevant_lines(traceback) == "ModuleNotFoundError: No module named 'tilelang'"
    assert first_relevant_lines("[1/1] c++ x.cpp\nsomething odd happened\n") == "something odd happened"


def test_a_triton_compilation_error_keeps_its_cause_and_the_offending_line() -> None:
    """Triton's CompilationError: a location, an excerpt of the kernel with a caret under the
    column, and last the repr of what its code generator raised. The cause and the line it points
    at are what a repair turn needs; a long excerpt once left only the location line."""
    excerpt = "\n".join(f"    kw_v{i} = tl.load(x_ptr + offs + {i}, mask=mask, other=0.0)  # padding the excerpt"
                        for i in range(8))
    text = ("CompilationError: at 24:22:\n" + excerpt + "\n    kw_acc = tl.add(kw_acc, tl.dot(kw_a, kw_b))\n"
            "                      ^\nAttributeError(\"module 'triton.language' has no attribute 'add'\")")
    out = first_relevant_lines(text)
    assert out.splitlines()[0] == "CompilationError: at 24:22:"
    assert "    kw_acc = tl.add(kw_acc, tl.dot(kw_a, kw_b))" in out.splitlines()
    assert out.splitlines()[-1] == "AttributeError(\"module 'triton.language' has no attribute 'add'\")"


def test_the_verdict_groups_partition_what_can_happen() -> None:
    """Each verdict says which group it is in (records.Verdict's properties, the one place for them):
    decided before any build, a failed build, stopped by a kill or memory, or reached after the
    candidate built; exactly one for every verdict, so no verdict falls between two checks."""
    from kernelwright.records import Verdict

    for v in Verdict:
        groups = [v.decided_before_build, v.build_failed, v in (Verdict.TIMEOUT, Verdict.CRASH, Verdict.OUT_OF_MEMORY),
                  v.built]
        assert groups.count(True) == 1, (v, groups)
        assert v.outputs_match <= v.built and (not v.compiles) <= v.is_failure_to_build
    assert {v for v in Verdict if v.outputs_match} == {Verdict.CORRECT, Verdict.NO_CUSTOM_KERNEL}
    assert {v for v in Verdict if v.may_have_hung_the_device} == {Verdict.TIMEOUT, Verdict.CRASH}
