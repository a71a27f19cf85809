"""Compile-only builds: real g++ and nvcc runs against torch's headers, stopping before the link.

nvcc over torch's headers takes 10-60 s on a 2-core machine, so the CUDA cases share one build
directory: main.cpp (the same C++ declaration and binding each time) is compiled once and reused,
exactly as a repeated evaluation of the same sources would reuse it.
"""

from __future__ import annotations

import inspect
import shlex
import shutil
import sysconfig
import time
from pathlib import Path

import pytest
import torch
import torch.utils.cpp_extension as cpp_extension

from kernelwright.evaluate import compile_only
from kernelwright.evaluate.compile_only import BuildFailed, gpu_arch_list, objects_only_load_inline, torch_has_cuda
from kernelwright.evaluate.taxonomy import explain
from kernelwright.records import Verdict

needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not on PATH")
needs_cxx = pytest.mark.skipif(shutil.which("c++") is None and shutil.which("g++") is None, reason="no C++ compiler")

DECL = "torch::Tensor bias_relu(torch::Tensor x, torch::Tensor b);"
KERNEL = """
__global__ void bias_relu_kernel(const float* x, const float* b, float* y, int64_t n, int64_t f) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) { float v = x[i] + b[i % f]; y[i] = DEVICE_RELU; }
}
torch::Tensor bias_relu(torch::Tensor x, torch::Tensor b) {
    auto y = torch::empty_like(x);
    int64_t n = x.numel();
    bias_relu_kernel<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), b.data_ptr<float>(), y.data_ptr<float>(), n, b.numel());
    return y;
}
"""


def kernel(device_relu: str = "v > 0.f ? v : 0.f", header: str = "") -> str:
    return header + KERNEL.replace("DEVICE_RELU", device_relu)


@pytest.fixture(scope="module")
def cuda_build(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("cuda-build")


def build_cuda(build: Path, cuda_sources: str) -> object:
    return objects_only_load_inline("bias_relu_ext", cpp_sources=DECL, cuda_sources=cuda_sources,
                                    functions=["bias_relu"], build_directory=str(build))


def failure(fn, *args, **kwargs) -> tuple[BuildFailed, Verdict, str | None]:
    with pytest.raises(BuildFailed) as info:
        fn(*args, **kwargs)
    e = info.value
    verdict, pattern = explain(type(e).__name__, str(e), e.log)
    return e, verdict, pattern


@pytest.mark.build
@pytest.mark.nvcc
@needs_nvcc
def test_correct_cuda_kernel_compiles_to_objects(cuda_build: Path) -> None:
    started = time.monotonic()
    module = build_cuda(cuda_build, kernel())
    print(f"c++ and nvcc in parallel: {time.monotonic() - started:.1f} s")
    assert (cuda_build / "main.o").stat().st_size > 0 and (cuda_build / "cuda.cuda.o").stat().st_size > 0
    main = (cuda_build / "main.cpp").read_text()
    assert main.startswith("#include <torch/extension.h>\n")
    assert 'm.def("bias_relu", torch::wrap_pybind_function(bias_relu), "bias_relu");' in main
    assert (cuda_build / "cuda.cu").read_text().startswith(
        "#include <torch/types.h>\n#include <cuda.h>\n#include <cuda_runtime.h>\n")
    with pytest.raises(RuntimeError, match="compiled, not linked"):
        module.bias_relu  # noqa: B018
    assert not hasattr(module, "__file__")  # introspection sees an ordinary missing attribute
    # Same sources and flags again: both objects are up to date, nothing recompiles.
    objects = {name: (cuda_build / name).stat().st_mtime_ns for name in ("main.o", "cuda.cuda.o")}
    build_cuda(cuda_build, kernel())
    assert {name: (cuda_build / name).stat().st_mtime_ns for name in objects} == objects


@pytest.mark.build
@pytest.mark.nvcc
@needs_nvcc
def test_undefined_device_function_is_hallucinated(cuda_build: Path) -> None:
    e, verdict, pattern = failure(build_cuda, cuda_build, kernel(device_relu="relu(v)"))
    assert (verdict, pattern) == (Verdict.HALLUCINATED_API, "undefined_function")
    assert 'identifier "relu" is undefined' in str(e) and "relu(v)" in str(e)
    assert "### nvcc cuda.cu" in e.log


@pytest.mark.build
@pytest.mark.nvcc
@needs_nvcc
def test_missing_header_is_hallucinated(cuda_build: Path) -> None:
    e, verdict, pattern = failure(build_cuda, cuda_build, kernel(header='#include "bias_relu_kernels.cuh"\n'))
    assert (verdict, pattern) == (Verdict.HALLUCINATED_API, "missing_header")
    assert "bias_relu_kernels.cuh" in str(e)


@pytest.mark.build
@pytest.mark.nvcc
@needs_nvcc
def test_cuda_syntax_error_is_compile_error(cuda_build: Path) -> None:
    broken = kernel().replace("auto y = torch::empty_like(x);", "auto y =")
    e, verdict, pattern = failure(build_cuda, cuda_build, broken)
    assert verdict is Verdict.COMPILE_ERROR
    assert "cuda.cu(" in str(e)


@pytest.mark.build
@needs_cxx
def test_binding_of_undefined_function_is_hallucinated(tmp_path: Path) -> None:
    e, verdict, pattern = failure(objects_only_load_inline, "unbound", cpp_sources="int helper() { return 1; }",
                                  functions=["bias_relu"], build_directory=str(tmp_path))
    assert (verdict, pattern) == (Verdict.HALLUCINATED_API, "pybind_unbound_function")
    assert "wrap_pybind_function(bias_relu)" in str(e)


@pytest.mark.build
@needs_cxx
def test_cpu_only_cpp_source_compiles_with_gxx(tmp_path: Path) -> None:
    source = "torch::Tensor add_one(torch::Tensor x) { return x + 1; }"
    module = objects_only_load_inline("cpu_only", cpp_sources=[source], functions={"add_one": "x + 1"},
                                      build_directory=str(tmp_path))
    assert (tmp_path / "main.o").exists() and not (tmp_path / "cuda.cu").exists()
    assert 'm.def("add_one", torch::wrap_pybind_function(add_one), "x + 1");' in (tmp_path / "main.cpp").read_text()
    assert module.__objects__ == [str(tmp_path / "main.o")]


def test_sources_keyword_raises_what_torch_raises() -> None:
    with pytest.raises(TypeError) as real:
        cpp_extension.load_inline(name="m", sources="x", functions=["f"])  # type: ignore[call-arg]
    with pytest.raises(TypeError) as ours:
        objects_only_load_inline(name="m", sources="x", functions=["f"])  # type: ignore[call-arg]
    assert str(ours.value) == str(real.value) == "load_inline() got an unexpected keyword argument 'sources'"
    assert explain("TypeError", str(ours.value)) == (Verdict.HALLUCINATED_API, "unexpected_keyword")
    with pytest.raises(TypeError) as real_missing:
        cpp_extension.load_inline()  # type: ignore[call-arg]
    with pytest.raises(TypeError) as ours_missing:
        objects_only_load_inline()  # type: ignore[call-arg]
    assert str(ours_missing.value) == str(real_missing.value)


@pytest.mark.build
@needs_cxx
@pytest.mark.skipif("no_implicit_headers" not in inspect.signature(cpp_extension.load_inline).parameters,
                    reason="this torch's load_inline has no no_implicit_headers")
def test_keywords_of_newer_torch_are_accepted(tmp_path: Path) -> None:
    objects_only_load_inline("plain", cpp_sources="int f() { return 1; }", no_implicit_headers=True,
                             build_directory=str(tmp_path))
    assert (tmp_path / "main.cpp").read_text() == "int f() { return 1; }"


@pytest.mark.build
@needs_cxx
def test_a_compile_past_the_timeout_is_killed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(compile_only, "COMPILE_TIMEOUT_S", 0.5)
    started = time.monotonic()
    with pytest.raises(BuildFailed) as info:
        objects_only_load_inline("slow", cpp_sources="int f();", build_directory=str(tmp_path))
    assert info.value.timed_out and time.monotonic() - started < 10


def test_nvcc_command_mirrors_torch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", "8.0;9.0+PTX")
    monkeypatch.delenv("CC", raising=False)
    steps = compile_only._plan("ext", str(tmp_path), ["main.cpp", "cuda.cu"], True, ["-O3 -g"],
                               ["-O3 --use_fast_math"], ["inc"])
    cxx, nvcc = (step.command for step in steps)
    for flags in (cxx, nvcc):
        defines = {"-DTORCH_EXTENSION_NAME=ext", "-DTORCH_API_INCLUDE_EXTENSION_H"}
        assert defines | {f"-I{Path('inc').resolve()}"} <= set(flags)
        assert set(cpp_extension.include_paths()) | {sysconfig.get_path("include", scheme="posix_prefix")} <= set(flags)
    assert {"-fPIC", "-O3", "-g"} <= set(cxx) and any(f.startswith("-std=c++") for f in cxx)
    assert set(cpp_extension.COMMON_NVCC_FLAGS) <= set(nvcc)
    assert {"-gencode=arch=compute_80,code=sm_80", "-gencode=arch=compute_90,code=sm_90",
            "-gencode=arch=compute_90,code=compute_90", "--use_fast_math"} <= set(nvcc)
    assert nvcc[nvcc.index("--compiler-options") + 1] == "-fPIC"
    user_arch = compile_only._plan("ext", str(tmp_path), ["cuda.cu"], True, [], ["-arch=sm_90"], [])[0].command
    assert not any(f.startswith("-gencode") for f in user_arch)  # the user's arch wins, as in torch


@pytest.mark.skipif(not hasattr(cpp_extension, "_write_ninja_file_to_build_library"), reason="torch's writer moved")
def test_flags_match_torchs_own_ninja_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Have torch write the ninja file for a CUDA build (it cannot run it here) and compare flags."""
    writer = cpp_extension._write_ninja_file_to_build_library
    monkeypatch.setattr(cpp_extension, "CUDA_HOME", compile_only._cuda_home())  # None in a CPU torch
    monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", "9.0")
    monkeypatch.delenv("CC", raising=False)
    extra = dict(extra_cflags=["-O3"], extra_cuda_cflags=["--use_fast_math -lineinfo"], extra_include_paths=["inc"])
    args = dict(path=str(tmp_path / "build.ninja"), name="ext", sources=[str(tmp_path / "main.cpp"),
                str(tmp_path / "cuda.cu")], extra_ldflags=[], with_cuda=True, is_standalone=False,
                extra_sycl_cflags=[], with_sycl=False, **extra)
    writer(**{k: v for k, v in args.items() if k in inspect.signature(writer).parameters})
    ninja = dict(line.split(" = ", 1) for line in (tmp_path / "build.ninja").read_text().splitlines()
                 if line.startswith(("cflags = ", "cuda_cflags = ")))

    steps = compile_only._plan("ext", str(tmp_path), ["main.cpp", "cuda.cu"], True, **extra)
    shim = ("-isystem", str(tmp_path / "compile_only_shim"))
    for step, key in zip(steps, ("cflags", "cuda_cflags")):
        flags = step.command[1:-4]  # drop the compiler and "-c src -o obj"
        # our additions: a stand-in for a header the CPU wheel lacks, and the CUDA library
        # headers of NVIDIA's pip wheels (a full toolkit has them under CUDA_HOME already)
        for extra_dir in (shim[1], *compile_only.wheel_cuda_includes(True)):
            if extra_dir in flags:
                i = flags.index(extra_dir)
                del flags[i - 1 : i + 1]
        assert flags == shlex.split(ninja[key]), key


def test_arch_list_and_cuda_detection(monkeypatch: pytest.MonkeyPatch) -> None:
    assert torch_has_cuda() is (torch.version.cuda is not None)
    if torch.cuda.is_available():
        pytest.skip("a visible GPU decides the arch")
    monkeypatch.delenv("TORCH_CUDA_ARCH_LIST", raising=False)
    assert gpu_arch_list() == "9.0"
    monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", "8.6")
    assert gpu_arch_list() == "8.6"
