"""`kernelwright doctor`: what this machine can do, in a few lines, and what to install for the rest.

Each check runs the thing it reports on (the compiler's --version, a CUDA query, the sandbox's
mechanisms tried for real, the model file's recorded sha256), so a line says what works, not what
is installed somewhere. Nothing here changes the machine.
"""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from dataclasses import dataclass
from typing import Callable, Optional


@dataclass(frozen=True)
class Check:
    name: str
    ok: Optional[bool]  # None: optional and absent (not a problem for CPU work)
    detail: str
    fix: str = ""  # what to do when it is missing


def _version_lines(cmd: list[str]) -> Optional[list[str]]:
    """What `cmd` (a --version call) printed, or None when it does not run."""
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    text = (proc.stdout or proc.stderr).strip().splitlines()
    return text if proc.returncode == 0 and text else None


def _python() -> Check:
    ok = sys.version_info >= (3, 10)
    return Check("python", ok, sys.version.split()[0], "" if ok else "Python 3.10 or newer is needed")


def _torch() -> Check:
    try:
        import torch
    except ImportError:
        return Check("torch", False, "not installed", "bash scripts/setup.sh (or pip install torch)")
    build = f"CUDA {torch.version.cuda} build" if torch.version.cuda else "CPU build"
    return Check("torch", True, f"{torch.__version__} ({build})")


def _compiler() -> Check:
    from torch.utils import cpp_extension

    cxx = getattr(cpp_extension, "get_cxx_compiler", lambda: "c++")()
    lines = _version_lines([cxx, "--version"])
    if lines is None:
        return Check("c++ compiler", False, f"{cxx} does not run", "apt-get install g++ (C++ kernels and every build)")
    return Check("c++ compiler", True, f"{cxx}: {lines[0]}")


def _nvcc() -> Check:
    lines = _version_lines(["nvcc", "--version"]) if shutil.which("nvcc") else None
    if lines is None:
        return Check("nvcc", None, "not found", "the CUDA toolkit, for CUDA kernels (`eval --compile-only` too)")
    return Check("nvcc", True, lines[-1])  # its last line names the release and build


def _gpus() -> Check:
    import torch

    if not torch.cuda.is_available():
        why = "a CPU build of torch" if not torch.version.cuda else "no GPU visible"
        return Check("GPUs", None, f"none ({why})", "an NVIDIA GPU and TORCH_SPEC=torch==<CUDA build> for setup.sh")
    names = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    return Check("GPUs", True, ", ".join(f"cuda:{i} {n}" for i, n in enumerate(names)))


def _triton() -> Check:
    if importlib.util.find_spec("triton") is None:
        return Check("triton", None, "not installed", "comes with the CUDA build of torch (Triton kernels need a GPU)")
    import triton

    return Check("triton", True, triton.__version__)


def _model() -> Check:
    from kernelwright.llm import local_model

    name = local_model.DEFAULT_MODEL
    path = local_model.cached_path(name)
    runtime = importlib.util.find_spec("llama_cpp") is not None
    if path is None:
        return Check("embedded model", None, f"{name}: not pulled yet", "kernelwright model pull (about 1.1 GB)")
    if not runtime:
        return Check("embedded model", False, f"{name} at {path}, but llama-cpp-python is missing",
                     "bash scripts/setup.sh local")
    return Check("embedded model", True, f"{name} at {path} ({path.stat().st_size >> 20} MB), llama.cpp runtime")


def _sandbox() -> Check:
    from kernelwright import confine

    found = confine.offer()
    mechanism = "bubblewrap" if found.bwrap else "unshare" if found.unshare else None
    limits = f"cgroup {found.cgroup}" if found.cgroup else "rlimits (no cgroup)"
    if mechanism is None:
        return Check("sandbox", False, "no namespaces here: candidates cannot be confined",
                     "apt-get install bubblewrap (or run as root with util-linux unshare); --unconfined marks results untrusted")
    return Check("sandbox", True, f"{mechanism}, {limits}")


CHECKS: list[Callable[[], Check]] = [_python, _torch, _compiler, _nvcc, _gpus, _triton, _model, _sandbox]


def run_checks() -> list[Check]:
    out = []
    for check in CHECKS:
        try:
            out.append(check())
        except Exception as e:  # noqa: BLE001 - a check that breaks is a finding, not a crash
            out.append(Check(check.__name__.strip("_"), False, f"the check failed: {type(e).__name__}: {e}"))
    return out


def can_do(checks: list[Check]) -> list[str]:
    """What the machine can run, in words."""
    ok = {c.name for c in checks if c.ok}
    said = []
    if {"torch", "c++ compiler", "sandbox"} <= ok:
        said.append("evaluate C++ kernels on the CPU")
    if {"GPUs", "sandbox"} <= ok:
        said.append("evaluate CUDA" + (" and Triton" if "triton" in ok else "") + " kernels on a GPU")
    elif "nvcc" in ok:
        said.append("build CUDA sources without a GPU (eval --compile-only)")
    if "embedded model" in ok:
        said.append("generate with the embedded model")
    return said
