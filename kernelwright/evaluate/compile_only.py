"""Compile CUDA candidates for real on a machine with nvcc but no GPU (`eval --compile-only`).

With a CUDA build of torch the normal `load_inline` builds and links, and nothing here is needed but
`torch_has_cuda()`. A CPU build of torch ships the CUDA *headers* but not the CUDA libraries, so a link
cannot succeed; `objects_only_load_inline` is a drop-in replacement for `load_inline` that writes the
sources exactly as torch would, compiles each one to an object file with the flags torch's own build
would use, and stops before the link. What it proves: the candidate's C++ and CUDA compile against the
real torch and CUDA headers. What it cannot: that the extension links and runs.

Flags come from torch itself wherever torch exposes them (include paths, nvcc flags, ABI defines,
arch flags, the -std it uses); every private helper is reached through `_torch_helper`, so a torch
that lacks one still compiles with the documented fallback. The tests compare our commands with the
ninja file torch itself writes for the same build. One addition: a CPU wheel lacks a header that
torch's CUDA build generates, supplied by `cmake_macros_shim`.
"""

from __future__ import annotations

import glob
import hashlib
import inspect
import logging
import os
import re
import shlex
import shutil
import signal
import subprocess
import sysconfig
import tempfile
import time
import types
import warnings
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional, Union

import torch
import torch.utils.cpp_extension as cpp_extension

from kernelwright.evaluate.taxonomy import first_relevant_lines

log = logging.getLogger(__name__)

DEFAULT_ARCH = "9.0"  # the H200 the project evaluates on
COMPILE_TIMEOUT_S = 600.0  # one compile; nvcc over torch's headers takes ~35 s on 2 cores
_CMAKE_MACROS = "c10/cuda/impl/cuda_cmake_macros.h"

Sources = Union[str, list[str], None]


class BuildFailed(RuntimeError):
    """A compile step failed. str() is the first relevant lines; `.log` is the full compiler output."""

    def __init__(self, message: str, log: str, timed_out: bool = False) -> None:
        super().__init__(message)
        self.log = log
        self.timed_out = timed_out


def torch_has_cuda() -> bool:
    """A CUDA build of torch links CUDA extensions itself; only a CPU build needs the objects-only path."""
    return getattr(torch.version, "cuda", None) is not None


def gpu_arch_list() -> str:
    """The arch list to build for: the visible GPUs', else TORCH_CUDA_ARCH_LIST, else DEFAULT_ARCH."""
    try:
        caps = sorted({torch.cuda.get_device_capability(i) for i in range(torch.cuda.device_count())})
    except Exception as e:  # a broken driver must not stop a compile-only run
        log.debug("cannot query CUDA devices: %s", e)
        caps = []
    if caps:
        return ";".join(f"{major}.{minor}" for major, minor in caps)
    return os.environ.get("TORCH_CUDA_ARCH_LIST") or DEFAULT_ARCH


# --- what torch would do -----------------------------------------------------------------------


def _torch_helper(name: str) -> Optional[Callable[..., Any]]:
    """A private helper of torch.utils.cpp_extension, or None where this torch has none."""
    helper = getattr(cpp_extension, name, None)
    return helper if callable(helper) else None


def _shell_split(flags: list[str]) -> list[str]:
    """torch writes each flag into a ninja file run through a shell; splitting here reproduces that
    (e.g. `-O3 --use_fast_math` in one string is two flags, and `\\"_gcc\\"` loses its escapes)."""
    return [part for flag in flags for part in shlex.split(flag.strip())]


def _cuda_home() -> Optional[str]:
    """torch's CUDA_HOME is None in a CPU build, so find the toolkit as torch would: env, then nvcc.
    nvcc may be a wrapper script (/usr/local/bin/nvcc here), so take a home that holds cuda.h."""
    home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    return home or toolkit_home()


def toolkit_home() -> Optional[str]:
    """A CUDA toolkit folder that really holds include/cuda.h. torch guesses its CUDA_HOME from
    nvcc's location, which is wrong for a wrapper script (/usr/local/bin/nvcc -> /usr/local),
    and then cannot find cudart to link against."""
    nvcc = shutil.which("nvcc")
    guesses = [getattr(cpp_extension, "CUDA_HOME", None)]
    guesses += [os.path.dirname(os.path.dirname(os.path.realpath(nvcc)))] if nvcc else []
    return next((h for h in guesses + ["/usr/local/cuda"] if h and os.path.exists(f"{h}/include/cuda.h")), None)


def _nvcc() -> str:
    home = _cuda_home()
    fallback = f"{home}/bin/nvcc" if home and os.path.exists(f"{home}/bin/nvcc") else shutil.which("nvcc") or "nvcc"
    return os.environ.get("PYTORCH_NVCC", fallback)  # torch honours this override (e.g. ccache nvcc)


def _cxx() -> str:
    get = _torch_helper("get_cxx_compiler")
    return get() if get else os.environ.get("CXX", "c++")


def cxx_standard() -> str:
    """The -std torch compiles extensions with (c++17 in older releases, c++20 in newer ones), read
    from torch's own ninja writer rather than guessed from the version number."""
    writer = _torch_helper("_write_ninja_file_to_build_library")
    try:
        found = re.findall(r"-std=(c\+\+\d+)", inspect.getsource(writer)) if writer else []
    except (OSError, TypeError):
        found = []
    return f"-std={found[0]}" if found else "-std=c++17"


def abi_flags() -> list[str]:
    """pybind11 and libstdc++ ABI defines, as torch computes them (older torch passes both)."""
    flags: list[str] = []
    pybind = _torch_helper("_get_pybind11_abi_build_flags")
    if pybind:
        with warnings.catch_warnings():  # deprecated (returns []) since torch 2.9
            warnings.simplefilter("ignore")
            flags += pybind()
    glibcxx = _torch_helper("_get_glibcxx_abi_build_flags")
    if glibcxx:
        flags += glibcxx()
    elif not getattr(torch._C, "_GLIBCXX_USE_CXX11_ABI", True):
        # Newer torch passes no define because it always uses the new ABI (gcc's default); should a
        # build ever report the old one, saying so is what keeps the objects compatible.
        flags.append("-D_GLIBCXX_USE_CXX11_ABI=0")
    return _shell_split(flags)


def include_paths(with_cuda: bool) -> list[str]:
    """torch's include paths, the CUDA toolkit's, and Python's.

    torch's `include_paths` changed signature (`cuda=True` before 2.6, `device_type="cuda"` after);
    in a CPU build it cannot name the toolkit (its CUDA_HOME is None), so we add that ourselves.
    """
    params = inspect.signature(cpp_extension.include_paths).parameters

    def torch_paths(cuda: bool) -> list[str]:
        if "device_type" in params:
            return list(cpp_extension.include_paths(device_type="cuda" if cuda else "cpu"))
        return list(cpp_extension.include_paths(cuda=cuda))

    try:
        paths = torch_paths(with_cuda)
    except OSError:  # "CUDA_HOME environment variable is not set"
        paths = torch_paths(False)
        home = _cuda_home()
        if home and os.path.join(home, "include") != "/usr/include":  # gcc rejects /usr/include
            paths.append(os.path.join(home, "include"))
    python_include = sysconfig.get_path("include", scheme="posix_prefix")
    return paths + wheel_cuda_includes(with_cuda) + ([python_include] if python_include else [])


def wheel_cuda_includes(with_cuda: bool) -> list[str]:
    """Headers of the CUDA libraries (cuBLAS, cuSPARSE, cuSOLVER...) from NVIDIA's pip wheels.

    ATen/cuda/CUDAContext.h includes cublas_v2.h and cusparse.h; a bare nvcc toolkit may lack
    them, while the `nvidia-*` wheels (which a CUDA build of torch depends on, and which
    scripts/setup.sh installs for the tests) ship them under site-packages/nvidia/*/include."""
    if not with_cuda:
        return []
    found: list[str] = []
    for site in sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]:
        for inc in sorted(glob.glob(os.path.join(site, "nvidia", "*", "include"))):
            if inc not in found:
                found.append(inc)
    return found


def _gencode_flags(extra_cuda_cflags: list[str]) -> list[str]:
    """-gencode flags for the arch list, unless the user chose an arch (torch's rule)."""
    if any("arch" in f for f in extra_cuda_cflags):
        return []
    helper = _torch_helper("_get_cuda_arch_flags")
    if helper and os.environ.get("TORCH_CUDA_ARCH_LIST"):
        return list(helper())  # torch expands named arches ("Hopper") and rejects unknown ones
    arch_list = gpu_arch_list()  # unset: torch would ask the (absent) GPU and fail, so we decide
    flags = []
    for arch in re.split(r"[;\s]+", arch_list.strip()):
        m = re.fullmatch(r"(\d+)\.(\d+)([a-z]?)(\+PTX)?", arch)
        if not m:
            raise ValueError(f"Unknown CUDA arch ({arch}) in {arch_list!r}")
        num = "".join(m.group(1, 2, 3))
        flags.append(f"-gencode=arch=compute_{num},code=sm_{num}")
        if m.group(4):
            flags.append(f"-gencode=arch=compute_{num},code=compute_{num}")
    return sorted(set(flags))


@dataclass
class _Step:
    label: str  # e.g. "c++ main.cpp"
    command: list[str]
    source: str
    obj: str
    output: str = ""
    returncode: Optional[int] = None
    seconds: float = 0.0
    timed_out: bool = False

    def report(self) -> str:
        status = "timed out" if self.timed_out else f"exit {self.returncode}"
        return f"### {self.label} ({status}, {self.seconds:.1f} s)\n$ {shlex.join(self.command)}\n{self.output}"


def _run(step: _Step, timeout_s: float) -> _Step:
    """Compile one source; skip it when its object was built from the same text and command, as
    torch skips an up-to-date build (the evaluator keys build directories by their sources)."""
    stamp_path = step.obj + ".stamp"
    with open(step.source, "rb") as f:
        stamp = hashlib.sha256(f.read() + "\0".join(step.command).encode()).hexdigest()
    if os.path.exists(step.obj) and os.path.exists(stamp_path) and Path(stamp_path).read_text() == stamp:
        step.returncode, step.output = 0, "up to date\n"
        return step
    started = time.monotonic()
    # A session of its own, so a timeout ends nvcc's children (cicc, ptxas, gcc) as well.
    proc = subprocess.Popen(step.command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            errors="replace", start_new_session=True)
    try:
        step.output, _ = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        step.output, _ = proc.communicate()
        step.timed_out = True
    step.returncode = proc.returncode
    step.seconds = time.monotonic() - started
    if step.returncode == 0 and not step.timed_out:
        Path(stamp_path).write_text(stamp)
    log.info("%s: %s in %.1f s", step.label, "timed out" if step.timed_out else f"exit {proc.returncode}", step.seconds)
    return step


# --- the drop-in -------------------------------------------------------------------------------


class CompiledNotLinked(types.ModuleType):
    """What objects_only_load_inline returns: the sources compiled, but there is nothing to call."""

    def __init__(self, name: str, objects: list[str]) -> None:
        super().__init__(name)
        self.__dict__["__objects__"] = objects

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__") and attr.endswith("__"):
            raise AttributeError(attr)  # introspection (copy, pickle, inspect) must keep working
        raise RuntimeError(f"compile-only: extension {self.__name__!r} was compiled, not linked; "
                           f"{attr!r} cannot be called without a CUDA build of torch")


def _as_list(sources: Sources) -> list[str]:
    return [sources] if isinstance(sources, str) else list(sources or [])


def _binding(functions: Any, with_pytorch_error_handling: bool) -> list[str]:
    """The PYBIND11_MODULE block torch's load_inline generates for `functions=`."""
    if isinstance(functions, str):
        functions = [functions]
    if isinstance(functions, list):
        functions = {f: f for f in functions}
    elif not isinstance(functions, dict):
        raise ValueError(f"Expected 'functions' to be a list or dict, but was {type(functions)}")
    lines = ["PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {"]
    for fn, doc in functions.items():
        target = f"torch::wrap_pybind_function({fn})" if with_pytorch_error_handling else f"{fn}"
        lines.append(f'm.def("{fn}", {target}, "{doc}");')
    return lines + ["}"]


def _load_inline(name: str, cpp_sources: Sources, cuda_sources: Sources = None, functions: Any = None,
                 extra_cflags: Optional[list[str]] = None, extra_cuda_cflags: Optional[list[str]] = None,
                 extra_ldflags: Optional[list[str]] = None, extra_include_paths: Optional[list[str]] = None,
                 build_directory: Optional[str] = None, verbose: bool = False, with_cuda: Optional[bool] = None,
                 is_python_module: bool = True, with_pytorch_error_handling: bool = True,
                 keep_intermediates: bool = True, use_pch: bool = False, *, sycl_sources: Sources = None,
                 extra_sycl_cflags: Optional[list[str]] = None, with_sycl: Optional[bool] = None,
                 no_implicit_headers: bool = False) -> types.ModuleType:
    """load_inline, stopping before the link: main.cpp (and cuda.cu) become main.o (and cuda.cuda.o).

    Not linked, so `extra_ldflags` and `is_python_module` have no effect, and `use_pch` is ignored
    (torch would write the header into its own install). Raises BuildFailed with the compiler output.
    """
    if sycl_sources or with_sycl:
        raise BuildFailed("compile-only: SYCL sources are not supported", "")
    cpp = _as_list(cpp_sources)
    cuda = _as_list(cuda_sources)
    if not no_implicit_headers:
        cpp.insert(0, "#include <torch/extension.h>")
        if cuda:
            cuda[:0] = ["#include <torch/types.h>", "#include <cuda.h>", "#include <cuda_runtime.h>"]
    if functions is not None:
        cpp += _binding(functions, with_pytorch_error_handling)
    with_cuda = bool(cuda) if with_cuda is None else with_cuda

    build_dir = build_directory or tempfile.mkdtemp(prefix=f"kw_compile_only_{name}_")
    os.makedirs(build_dir, exist_ok=True)
    files = {"main.cpp": "\n".join(cpp)}
    if cuda:
        files["cuda.cu"] = "\n".join(cuda)
    for fname, text in files.items():
        Path(build_dir, fname).write_text(text)

    steps = _plan(name, build_dir, list(files), with_cuda, extra_cflags or [], extra_cuda_cflags or [],
                  extra_include_paths or [])
    for step in steps if verbose else []:
        log.info("compile-only: %s", shlex.join(step.command))
    with ThreadPoolExecutor(max_workers=len(steps)) as pool:  # c++ and nvcc at once, as ninja would
        done = list(pool.map(lambda s: _run(s, COMPILE_TIMEOUT_S), steps))
    failed = [s for s in done if s.timed_out or s.returncode != 0]
    if failed:
        full = "\n".join(s.report() for s in done)
        timed_out = any(s.timed_out for s in failed)
        head = f"compile-only: building extension '{name}' failed"
        if timed_out:
            head += f" (a compile ran past {COMPILE_TIMEOUT_S:.0f} s)"
        raise BuildFailed(f"{head}:\n{first_relevant_lines(full)}", full, timed_out=timed_out)
    objects = [os.path.join(build_dir, _object_name(s)) for s in files]
    log.info("compile-only: %s compiled to %s (not linked)", name, ", ".join(map(os.path.basename, objects)))
    return CompiledNotLinked(name, objects)


# Python's own argument errors ("missing 1 required positional argument") name the function by its
# __qualname__; the real one's name keeps those messages identical in both modes.
_load_inline.__qualname__ = "load_inline"
_OURS = inspect.signature(_load_inline).parameters


def _torch_parameters() -> list[str]:
    """The installed torch's load_inline parameters in order (2.13 put sycl_sources fourth). Once
    the evaluator has wrapped load_inline its signature is (*args, **kwargs): then use ours."""
    params = inspect.signature(cpp_extension.load_inline).parameters.values()
    if any(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in params):
        return list(_OURS)
    return [p.name for p in params]


_TORCH_PARAMETERS = _torch_parameters()  # read at import: the worker imports us before it wraps torch


def objects_only_load_inline(*args: Any, **kwargs: Any) -> types.ModuleType:
    """Drop-in for torch's load_inline that compiles to objects only (see `_load_inline`).

    Arguments bind in the installed torch's order, and a keyword torch lacks (`sources=`) raises the
    TypeError torch raises, before any other argument error, as the real call would.
    """
    for key in kwargs:
        if key not in _TORCH_PARAMETERS:
            raise TypeError(f"load_inline() got an unexpected keyword argument '{key}'")
    if len(args) > len(_TORCH_PARAMETERS):
        raise TypeError(f"load_inline() takes from 2 to {len(_TORCH_PARAMETERS)} positional arguments "
                        f"but {len(args)} were given")
    for key, value in zip(_TORCH_PARAMETERS, args):
        if key in kwargs:
            raise TypeError(f"load_inline() got multiple values for argument '{key}'")
        kwargs[key] = value
    for key in [k for k in kwargs if k not in _OURS]:  # a newer torch's option we do not know
        log.warning("compile-only: ignoring load_inline(%s=...), unknown to this compile-only build", key)
        del kwargs[key]
    return _load_inline(**kwargs)


objects_only_load_inline.__signature__ = inspect.signature(_load_inline)  # type: ignore[attr-defined]


def _object_name(source: str) -> str:
    stem, ext = os.path.splitext(source)
    return f"{stem}.cuda.o" if ext == ".cu" else f"{stem}.o"  # torch's names for the two kinds


def nvcc_common_flags() -> list[str]:
    return _shell_split(list(getattr(cpp_extension, "COMMON_NVCC_FLAGS", [])))


def cmake_macros_shim(build_dir: str) -> list[str]:
    """A CPU wheel of torch lacks c10/cuda/impl/cuda_cmake_macros.h, a header CMake writes when it
    builds torch with CUDA; without it any include of c10/cuda/CUDAGuard.h or CUDAStream.h fails.
    Its content for torch's shared-library build is one define; supply it beside the build."""
    torch_include = os.path.join(os.path.dirname(torch.__file__), "include")
    if os.path.exists(os.path.join(torch_include, _CMAKE_MACROS)):
        return []
    shim = Path(build_dir, "compile_only_shim")
    (shim / _CMAKE_MACROS).parent.mkdir(parents=True, exist_ok=True)
    (shim / _CMAKE_MACROS).write_text("#pragma once\n// compile-only stand-in for the header torch's CUDA "
                                      "build generates\n#define C10_CUDA_BUILD_SHARED_LIBS\n")
    return [str(shim)]


def _plan(name: str, build_dir: str, sources: list[str], with_cuda: bool, extra_cflags: list[str],
          extra_cuda_cflags: list[str], extra_include_paths: list[str]) -> list[_Step]:
    """The compile commands torch's ninja file would hold for these sources, minus the link."""
    system = include_paths(with_cuda) + (cmake_macros_shim(build_dir) if with_cuda else [])
    common = [f"-DTORCH_EXTENSION_NAME={name}", "-DTORCH_API_INCLUDE_EXTENSION_H", *abi_flags()]
    common += [f"-I{os.path.abspath(p.strip())}" for p in extra_include_paths]
    common += [arg for path in system for arg in ("-isystem", path)]
    std = cxx_standard()
    steps = []
    for source in sources:
        path, obj = os.path.join(build_dir, source), os.path.join(build_dir, _object_name(source))
        out = ["-c", path, "-o", obj]
        if source.endswith(".cu"):
            extra = _shell_split(extra_cuda_cflags)
            nvcc_flags = nvcc_common_flags()
            flags = common + nvcc_flags + _gencode_flags(extra) + ["--compiler-options", "-fPIC"] + extra
            if not any(f.startswith("-std=") for f in flags):
                flags.append(std)
            ccbin = ["-ccbin", os.environ["CC"]] if os.environ.get("CC") else []
            steps.append(_Step(f"nvcc {source}", [_nvcc(), *ccbin, *flags, *out], path, obj))
        else:
            flags = common + ["-fPIC", std] + _shell_split(extra_cflags)
            steps.append(_Step(f"c++ {source}", [_cxx(), *flags, *out], path, obj))
    return steps
