"""What the installed toolchain really offers, for grounding: load_inline's parameters, header
search paths, and which `torch.*` / `triton.*` attributes exist.

Everything here is read from the installed packages and compilers (never from a list of what an API
"usually" looks like), cached for the life of the process, and fails soft: a question that cannot be
answered here returns "unknown", and grounding then reports instead of rewriting.
"""

from __future__ import annotations

import difflib
import functools
import importlib
import importlib.util
import inspect
import json
import logging
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

log = logging.getLogger(__name__)

# load_inline's parameters in torch 2.4-2.13, used only when the installed function has been wrapped
# into (*args, **kwargs) (the evaluator's worker does that) and its own signature is unreadable.
_FALLBACK_PARAMETERS = ("name", "cpp_sources", "cuda_sources", "functions", "extra_cflags", "extra_cuda_cflags",
                        "extra_ldflags", "extra_include_paths", "build_directory", "verbose", "with_cuda",
                        "is_python_module", "with_pytorch_error_handling", "keep_intermediates", "use_pch")
_TRITON_NAMES_FILE = Path(__file__).with_name("triton_names.json")


@functools.lru_cache(maxsize=None)
def load_inline_parameters() -> tuple[str, ...]:
    """The installed torch's load_inline parameters, in positional order."""
    try:
        from torch.utils import cpp_extension

        params = list(inspect.signature(cpp_extension.load_inline).parameters.values())
    except Exception as e:  # torch missing or broken: grounding still runs its Python-side rules
        log.debug("cannot read load_inline's signature: %s", e)
        return _FALLBACK_PARAMETERS
    if any(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in params):
        return _FALLBACK_PARAMETERS
    return tuple(p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY))


def positional_parameters() -> tuple[str, ...]:
    try:
        from torch.utils import cpp_extension

        params = inspect.signature(cpp_extension.load_inline).parameters.values()
        names = tuple(p.name for p in params if p.kind == p.POSITIONAL_OR_KEYWORD)
        return names or _FALLBACK_PARAMETERS
    except Exception:
        return _FALLBACK_PARAMETERS


def torch_version() -> str:
    try:
        import torch

        return str(torch.__version__)
    except Exception:
        return "unknown"


def torch_is_cuda_build() -> bool:
    try:
        import torch

        return getattr(torch.version, "cuda", None) is not None
    except Exception:
        return False


# --- headers -----------------------------------------------------------------------------------


@functools.lru_cache(maxsize=None)
def torch_include_dirs(cuda: bool) -> tuple[str, ...]:
    """torch's own include dirs. `include_paths` took `cuda=` before torch 2.6 and `device_type=`
    after; in a CPU build asking for CUDA raises (no CUDA_HOME), so fall back to the CPU list."""
    try:
        from torch.utils import cpp_extension

        params = inspect.signature(cpp_extension.include_paths).parameters
        for want_cuda in ((True, False) if cuda else (False,)):
            try:
                if "device_type" in params:
                    return tuple(cpp_extension.include_paths(device_type="cuda" if want_cuda else "cpu"))
                return tuple(cpp_extension.include_paths(cuda=want_cuda))
            except Exception as e:
                log.debug("include_paths(cuda=%s) failed: %s", want_cuda, e)
    except Exception as e:
        log.debug("no torch include paths: %s", e)
    return ()


@functools.lru_cache(maxsize=None)
def cuda_home() -> Optional[str]:
    """The CUDA toolkit: CUDA_HOME/CUDA_PATH, else the directory above the real nvcc (which may be
    a wrapper script: then the first candidate that holds include/cuda.h)."""
    env = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    if env and os.path.isdir(env):
        return env
    nvcc = shutil.which("nvcc")
    guesses = []
    if nvcc:
        guesses.append(os.path.dirname(os.path.dirname(os.path.realpath(nvcc))))
        try:  # a shell wrapper (`exec /usr/local/cuda-13.0/bin/nvcc "$@"`) names the real one
            text = Path(nvcc).read_text(errors="replace")[:4000]
            guesses += [os.path.dirname(os.path.dirname(w)) for w in text.split() if w.endswith("/bin/nvcc")]
        except OSError:
            pass
    guesses.append("/usr/local/cuda")
    return next((g for g in guesses if os.path.exists(os.path.join(g, "include", "cuda.h"))), None)


@functools.lru_cache(maxsize=None)
def cuda_include_dirs() -> tuple[str, ...]:
    home = cuda_home()
    if not home:
        return ()
    dirs = [os.path.join(home, "include"), os.path.join(home, "include", "cccl")]
    targets = os.path.join(home, "targets")
    if os.path.isdir(targets):
        dirs += [os.path.join(targets, t, "include") for t in sorted(os.listdir(targets))]
    return tuple(d for d in dirs if os.path.isdir(d))


@functools.lru_cache(maxsize=None)
def system_include_dirs() -> tuple[str, ...]:
    """The C++ compiler's own search list (`c++ -E -x c++ - -v`), read once per process."""
    cxx = os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++")
    if not cxx:
        return ()
    try:
        proc = subprocess.run([cxx, "-E", "-x", "c++", "-", "-v"], input="", capture_output=True, text=True,
                              timeout=30)
    except (OSError, subprocess.SubprocessError) as e:
        log.debug("cannot ask %s for its include dirs: %s", cxx, e)
        return ()
    dirs, inside = [], False
    for line in proc.stderr.splitlines():
        if line.startswith("#include <...> search starts here"):
            inside = True
        elif line.startswith("End of search list"):
            break
        elif inside and line.startswith(" "):
            dirs.append(line.strip().split(" (")[0])  # macOS appends " (framework directory)"
    return tuple(dirs)


def include_dirs(cuda: bool, extra: tuple[str, ...] = ()) -> tuple[str, ...]:
    dirs = list(extra) + list(torch_include_dirs(cuda))
    if cuda:
        dirs += cuda_include_dirs()
    return tuple(dict.fromkeys(dirs + list(system_include_dirs())))


def find_header(header: str, dirs: tuple[str, ...]) -> Optional[str]:
    if os.path.isabs(header):
        return header if os.path.isfile(header) else None
    return next((os.path.join(d, header) for d in dirs if os.path.isfile(os.path.join(d, header))), None)


def similar_header(header: str, dirs: tuple[str, ...]) -> Optional[str]:
    """The closest existing header in the same folder (`torch/nn/functional/relu.h` -> `.../activation.h`)."""
    folder, base = os.path.split(header)
    names: list[str] = []
    for d in dirs:
        path = os.path.join(d, folder)
        if os.path.isdir(path):
            names += [n for n in os.listdir(path) if os.path.isfile(os.path.join(path, n))]
    close = difflib.get_close_matches(base, sorted(set(names)), n=1, cutoff=0.6)
    return f"{folder}/{close[0]}" if close and folder else (close[0] if close else None)


def folder_headers(header: str, dirs: tuple[str, ...]) -> list[str]:
    """The headers that do exist in the folder a missing header was looked for in."""
    folder = os.path.dirname(header)
    if not folder:
        return []
    names: set[str] = set()
    for d in dirs:
        path = os.path.join(d, folder)
        if os.path.isdir(path):
            names |= {n for n in os.listdir(path) if n.endswith((".h", ".hpp", ".cuh"))}
    return sorted(names)


# --- Python attributes --------------------------------------------------------------------------


@dataclass(frozen=True)
class MissingAttr:
    """`owner.attr` does not exist (the first missing link of a dotted name)."""

    owner: str
    attr: str
    close: tuple[str, ...]
    source: str  # where the fact comes from: "torch 2.13.0" or "bundled Triton name list"

    @property
    def qualname(self) -> str:
        return f"{self.owner}.{self.attr}"


@functools.lru_cache(maxsize=None)
def triton_names() -> dict[str, Any]:
    try:
        return json.loads(_TRITON_NAMES_FILE.read_text())
    except (OSError, ValueError) as e:
        log.warning("cannot read %s: %s", _TRITON_NAMES_FILE, e)
        return {}


def _triton_installed() -> bool:
    try:
        return importlib.util.find_spec("triton") is not None
    except (ImportError, ValueError):
        return False


def _close(name: str, options: list[str]) -> tuple[str, ...]:
    return tuple(difflib.get_close_matches(name, [o for o in options if not o.startswith("_")], n=3, cutoff=0.7))


def _missing_in_list(parts: list[str]) -> Optional[MissingAttr]:
    """Check `triton.*` / `triton.language.*` against the bundled list (triton is not installed)."""
    data = triton_names()
    for depth in range(1, len(parts)):
        owner = ".".join(parts[:depth])
        if owner in data.get("open", []):
            return None  # a namespace whose members vary by version: not verifiable here
        members = data.get("members", {}).get(owner)
        if members is None:
            return None
        if parts[depth] not in members:
            return MissingAttr(owner, parts[depth], _close(parts[depth], members),
                               f"bundled Triton {data.get('version', '')} name list".replace("  ", " "))
    return None


def _is_private_cuda_binding(parts: list[str]) -> bool:
    # torch._C's CUDA bindings exist only in a CUDA build; a CPU build cannot judge them.
    return len(parts) > 2 and parts[1] == "_C" and not torch_is_cuda_build()


@functools.lru_cache(maxsize=4096)
def missing_attribute(qualname: str) -> Optional[MissingAttr]:
    """The first link of `qualname` (rooted at torch or triton) that does not exist, or None when the
    whole chain exists or cannot be judged here."""
    parts = qualname.split(".")
    if parts[0] not in ("torch", "triton") or len(parts) < 2:
        return None
    if parts[0] == "triton" and not _triton_installed():
        return _missing_in_list(parts)
    if _is_private_cuda_binding(parts):
        return None
    try:
        obj: Any = importlib.import_module(parts[0])
    except Exception as e:
        log.debug("cannot import %s: %s", parts[0], e)
        return None
    for i in range(1, len(parts)):
        name = parts[i]
        try:
            if hasattr(obj, name):
                obj = getattr(obj, name)
                continue
        except Exception:  # a property that raises: it exists
            return None
        dotted = ".".join(parts[: i + 1])
        if inspect.ismodule(obj):
            try:
                if importlib.util.find_spec(dotted) is not None:
                    return None  # a submodule not imported yet: it exists; stop judging below it
            except (ImportError, ValueError, AttributeError):
                pass
        owner = ".".join(parts[:i])
        source = "triton" if parts[0] == "triton" else f"torch {torch_version()}"
        try:
            options = dir(obj)
        except Exception:
            options = []
        return MissingAttr(owner, name, _close(name, options), source)
    return None


@functools.lru_cache(maxsize=1024)
def aten_has(name: str) -> bool:
    """An ATen operator of this name exists, so C++ code can call `torch::<name>(...)`."""
    try:
        import torch

        return hasattr(torch.ops.aten, name)
    except Exception:
        return False
