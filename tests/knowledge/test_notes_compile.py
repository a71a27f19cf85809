"""Every piece of code in our notes is checked: small models copy what they see.

- Python blocks parse; every `load_inline` call uses keywords the installed torch has, binds only
  declared functions and writes no PYBIND11_MODULE of its own.
- CPU programs run for real: built with `load_inline` against this torch, then their own check
  against PyTorch.
- `cpp` blocks build for real with `load_inline` (all in one extension).
- The activation device functions are compiled as host C++ and compared with PyTorch on the CPU.
- With nvcc (`nvcc` marker): all CUDA code, `cuda` blocks and the `cuda_sources` of programs,
  compiles with torch's headers and flags; the `cpp_sources` declarations compile with the bindings
  load_inline would generate; and every function the bindings need is defined in the CUDA object
  (the link, checked with `nm`, since a CPU build of torch cannot link CUDA code).

GPU programs and Triton run in test_notes_gpu.py, on a machine with a GPU.
"""

from __future__ import annotations

import inspect
import logging
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
import torch.utils.cpp_extension as cpp_extension

from kernelwright.evaluate import compile_only

from tests.knowledge import _harness as H
from tests.knowledge import _snippets as S

log = logging.getLogger(__name__)

SNIPPETS = S.snippets()
PYTHON = [s for s in SNIPPETS if s.lang == "python"]
CALLS = [c for s in PYTHON for c in S.load_inline_calls(s)]
CPU_PROGRAMS = [s for s in PYTHON if s.is_program and not s.needs_gpu]
BUILD_TIMEOUT_S = 850.0

LOAD_INLINE_PARAMS = inspect.signature(cpp_extension.load_inline).parameters


def _ids(items):
    return [getattr(i, "label", None) or i.snippet.label for i in items]


def test_every_block_has_a_known_tag():
    assert SNIPPETS, "no fenced code in the notes"
    unknown = [f"{s.label}: ```{s.lang}" for s in SNIPPETS if s.lang not in ("cpp", "cuda", "python", "text")]
    assert not unknown, "tag code blocks cpp, cuda, python or text:\n" + "\n".join(unknown)


@pytest.mark.parametrize("snippet", PYTHON, ids=_ids(PYTHON))
def test_python_block_parses(snippet):
    compile(snippet.code, snippet.label, "exec")


def test_there_are_programs_of_each_kind():
    assert CPU_PROGRAMS, "no CPU program (load_inline without cuda_sources) in the notes"
    assert any(s.is_program and s.uses_triton for s in PYTHON), "no Triton program"
    assert any(c.cuda_sources for c in CALLS), "no CUDA program"


@pytest.mark.parametrize("call", CALLS, ids=_ids(CALLS))
def test_load_inline_call_is_valid(call):
    where = call.snippet.label
    unknown = [k for k in call.keywords if k not in LOAD_INLINE_PARAMS]
    assert not unknown, f"{where}: load_inline has no keyword(s) {unknown}"
    assert call.positional == 0, f"{where}: pass load_inline's arguments by keyword (positions moved in torch 2.7)"
    assert {"name", "cpp_sources"} <= set(call.keywords), f"{where}: name= and cpp_sources= are required"
    name = call.values.get("name")
    assert isinstance(name, str) and name.isidentifier(), f"{where}: name must be a C++ identifier, got {name!r}"
    assert call.functions, f"{where}: functions= is what makes the bindings"
    cpp_text = "\n".join(src.text for src in call.cpp_sources)
    every_text = cpp_text + "\n".join(src.text for src in call.cuda_sources)
    assert "PYBIND11_MODULE" not in every_text, f"{where}: functions= already writes PYBIND11_MODULE"
    for fn in call.functions if call.cpp_sources else []:  # a fragment may name sources defined elsewhere
        assert re.search(rf"\b{re.escape(fn)}\s*\(", cpp_text), f"{where}: {fn} is not declared in cpp_sources"
    if call.cuda_sources and call.snippet.is_program:
        cuda_text = "\n".join(src.text for src in call.cuda_sources)
        assert "getCurrentCUDAStream" in cuda_text, f"{where}: launch on torch's current stream"
        assert "#include <ATen/cuda/CUDAContext.h>" in cuda_text
        assert "C10_CUDA_KERNEL_LAUNCH_CHECK()" in cuda_text and "#include <c10/cuda/CUDAException.h>" in cuda_text


def _run_program(snippet: S.Snippet, tmp_path: Path, env_extra: dict[str, str]) -> None:
    script = tmp_path / f"{snippet.note_id}_{snippet.ordinal}.py"
    script.write_text(snippet.code)
    env = dict(os.environ, **env_extra)
    proc = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=BUILD_TIMEOUT_S)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0 and "ok" in proc.stdout.split(), f"{snippet.label} failed:\n{S.first_errors(out, 60)}"


@pytest.mark.build
@pytest.mark.parametrize("snippet", CPU_PROGRAMS, ids=_ids(CPU_PROGRAMS))
def test_cpu_program_builds_and_matches_torch(snippet, tmp_path):
    _run_program(snippet, tmp_path, {"TORCH_EXTENSIONS_DIR": str(S.extensions_dir())})


@pytest.mark.build
def test_cpp_blocks_build_with_load_inline():
    blocks = [s for s in SNIPPETS if s.lang == "cpp"]
    if not blocks:
        pytest.skip("no cpp blocks")
    parts = [S.Part(s.code, s.path, s.line, f"kwnote_{i}") for i, s in enumerate(blocks)]
    source = S.translation_unit(parts)
    name = "kw_notes_cpp_" + S.success_stamp("cpp", source).stem.split("-")[1][:12]
    build = S.extensions_dir() / name
    build.mkdir(parents=True, exist_ok=True)
    try:
        cpp_extension.load_inline(name=name, cpp_sources=[source], extra_cflags=["-O1", "-fopenmp"],
                                  extra_ldflags=["-fopenmp"], build_directory=str(build), is_python_module=False)
    except RuntimeError as e:
        pytest.fail(f"cpp blocks do not build:\n{S.first_errors(str(e), 40)}")


# --- the activation formulas, on the CPU -------------------------------------------------------


@pytest.mark.build
def test_activation_formulas_match_pytorch_on_cpu():
    block = H.activation_block()
    defined = H.activation_names_defined(block)
    checked = {k.split("/")[0] for k in H.ACTIVATIONS}
    assert defined == checked, f"check every device function of the note: new {defined - checked}, gone {checked - defined}"
    source = H.activation_cpu_source(block)
    name = "kw_notes_act_" + S.success_stamp("act", source).stem.split("-")[1][:12]
    build = S.extensions_dir() / name
    build.mkdir(parents=True, exist_ok=True)
    ext = cpp_extension.load_inline(name=name, cpp_sources=source, functions=["apply"], extra_cflags=["-O2"],
                                    build_directory=str(build))
    x = H.activation_inputs("cpu")
    for i, (label, (call, reference)) in enumerate(H.ACTIVATIONS.items()):
        torch.testing.assert_close(ext.apply(x, i), reference(x), atol=1e-5, rtol=1e-5,
                                   msg=lambda m, label=label, call=call: f"{label} = {call}: {m}")
    # The note's warning holds: the tanh GELU is not within the float32 tolerance of the exact one.
    approx = ext.apply(x, list(H.ACTIVATIONS).index("gelu_tanh_f"))
    assert not torch.allclose(approx, F.gelu(x), atol=1e-4, rtol=1e-4)


# --- CUDA, with nvcc ---------------------------------------------------------------------------


def _cuda_parts() -> list[S.Part]:
    parts: list[S.Part] = []
    for s in SNIPPETS:
        if s.lang == "cuda":
            parts.append(S.Part(s.code, s.path, s.line, f"kwnote_{len(parts)}"))
    for call in CALLS:
        for src in call.cuda_sources:
            parts.append(S.Part(src.text, call.snippet.path, src.line, f"kwcall_{CALLS.index(call)}"))
    return parts


def _bindings_source() -> str:
    """The cpp_sources of every CUDA program, as load_inline writes main.cpp, in one file."""
    parts, defs = [], []
    for i, call in enumerate(CALLS):
        if not call.cuda_sources:
            continue
        ns = f"kwcall_{i}"
        for src in call.cpp_sources:
            parts.append(S.Part(src.text, call.snippet.path, src.line, ns))
        for fn in call.functions:
            wrapped = f"torch::wrap_pybind_function({ns}::{fn})" if call.values.get(
                "with_pytorch_error_handling", True) else f"{ns}::{fn}"
            defs.append(f'    m.def("{ns}_{fn}", {wrapped}, "{fn}");')
    epilogue = "PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {\n" + "\n".join(defs) + "\n}\n"
    return S.translation_unit(parts, prelude=["#include <torch/extension.h>"], epilogue=epilogue)


def _symbols(obj: Path, flag: str) -> set[str]:
    out = subprocess.run(["nm", flag, str(obj)], capture_output=True, text=True, check=True).stdout
    return {line.split()[-1] for line in out.splitlines() if line.strip()}


@pytest.mark.build
@pytest.mark.nvcc
def test_cuda_code_compiles_and_links_with_nvcc(tmp_path):
    if not shutil.which("nvcc"):
        pytest.skip("nvcc is not on PATH")
    if not shutil.which("nm"):
        pytest.skip("nm is not on PATH")
    # torch's, the toolkit's and the CUDA library wheels' headers, plus the stand-in for the one
    # header a CPU wheel of torch lacks: the same as the evaluator's compile-only builds
    dirs = compile_only.include_paths(with_cuda=True) + compile_only.cmake_macros_shim(str(tmp_path))
    includes = [f"-I{p}" for p in dirs]
    defines = ["-DTORCH_EXTENSION_NAME=kw_notes", "-DTORCH_API_INCLUDE_EXTENSION_H", *compile_only.abi_flags()]
    cu_source = S.translation_unit(_cuda_parts(), prelude=["#include <torch/types.h>", "#include <cuda.h>",
                                                          "#include <cuda_runtime.h>"])
    cpp_source = _bindings_source()
    (tmp_path / "notes.cu").write_text(cu_source)
    (tmp_path / "bindings.cpp").write_text(cpp_source)
    cxx = getattr(cpp_extension, "get_cxx_compiler", lambda: os.environ.get("CXX", "c++"))()
    nvcc_cmd = ["nvcc", "-c", compile_only.cxx_standard(), *includes, *defines, *compile_only.nvcc_common_flags(),
                "--compiler-options", "-fPIC", "-gencode=arch=compute_90,code=sm_90",
                str(tmp_path / "notes.cu"), "-o", str(tmp_path / "notes.o")]
    cxx_cmd = [cxx, "-c", "-fPIC", compile_only.cxx_standard(), *includes, *defines, str(tmp_path / "bindings.cpp"),
               "-o", str(tmp_path / "bindings.o")]

    # the same for every run and every checkout: a fresh clone's venv holds the same torch headers
    # at another path (torch's version is part of the key), and its sources differ only in the
    # checkout's path in their #line directives, so its compile is the one already passed
    commands = " ".join(nvcc_cmd + cxx_cmd).replace(str(tmp_path), "<tmp>").replace(sys.prefix, "<venv>")
    checkout = str(Path(__file__).resolve().parents[2])
    stamp = S.success_stamp("nvcc", cu_source.replace(checkout, "<repo>"), cpp_source.replace(checkout, "<repo>"),
                            commands, S.tool_version("nvcc"), S.tool_version(cxx), torch.__version__)
    if S.stamps_enabled() and stamp.exists():
        log.info("unchanged since a passing compile (%s)", stamp)
        return

    # The two compiles run side by side: each is mostly one core parsing torch's headers.
    procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for cmd in (nvcc_cmd, cxx_cmd)]
    outputs = [p.communicate(timeout=BUILD_TIMEOUT_S)[0] for p in procs]
    assert procs[0].returncode == 0, f"CUDA code in the notes does not compile:\n{S.first_errors(outputs[0], 40)}"
    assert procs[1].returncode == 0, f"cpp_sources + bindings do not compile:\n{S.first_errors(outputs[1], 40)}"

    # The link: every note function the bindings call is defined by the CUDA object. A declaration
    # in cpp_sources that differs from its definition (float vs double, a missing const&) shows
    # up here as an undefined symbol, as it would at import time.
    needed = {sym for sym in _symbols(tmp_path / "bindings.o", "--undefined-only") if "kwcall_" in sym}
    defined = _symbols(tmp_path / "notes.o", "--defined-only")
    assert needed, "the bindings reference no note function: the check is not looking"
    missing = sorted(needed - defined)
    assert not missing, "declared in cpp_sources but not defined in cuda_sources: " + ", ".join(missing)
    stamp.parent.mkdir(parents=True, exist_ok=True)
    stamp.write_text("ok\n")
