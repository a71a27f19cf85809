"""A precompiled `<torch/extension.h>` for the trusted builder's C++ builds.

Every C++ extension `load_inline` builds starts with `#include <torch/extension.h>` (the whole C++
frontend, pybind11 and Python's headers): parsing it is most of a build (about 17 of 27 CPU
seconds on the 2-core machine). GCC can load that parse from a precompiled header instead, if the
header was compiled with the same options. torch's own `use_pch` writes it into torch's folder,
which is read-only inside the builder's box, so the parent keeps one of its own per set of flags:

    <pch>/<key>/kw_torch_extension.h        #include <torch/extension.h>
    <pch>/<key>/kw_torch_extension.h.gch    its precompiled form

`<pch>` is one folder for the machine, `$KERNELWRIGHT_PCH_CACHE` or the default cache root's
`builds/pch` (evaluator.pch_folder), not one per build cache: evaluations with caches of their own
(a study's, each test's) share it, since a header costs about 50 CPU seconds and serves every
build with its flags. At most MAX_HEADERS sets of flags get one (a header is about 800 MB).

`key` hashes the build's `extra_cflags`, torch's version and the compilers the environment names
(buildcache.build_key). The compile command is the one torch itself writes for a build with those
flags (its ninja file), minus the extension's name, so the header matches the builds it serves.
The builder adds `-include <header>` to the build's flags (builder.py); the build's key, computed
from the candidate's own arguments, is unchanged. GCC checks a precompiled header before using it
(its compiler, options and macros) and parses the plain header where it does not match, and the
plain header is what the build's own first line includes (a second include of it is a no-op), so
the product is the same either way: byte for byte, measured.

Only a build the header can serve gets it: C++ sources with torch's implicit include, no CUDA or
SYCL sources, no extra include paths, and flags of a plain form (optimisation, `-f`/`-m` switches
without values, `-march=`, `-std=`, `-D`/`-U` names, warnings, `-g`) that are compiled on the host,
outside any box: no flag that names a file, a program or a plugin.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Optional

from kernelwright.evaluate import buildcache
from kernelwright.evaluate.taxonomy import is_disk_full

log = logging.getLogger(__name__)

HEADER = "kw_torch_extension.h"
GCH = HEADER + ".gch"
FAILED = ".failed"  # `<key>.failed`: this flag set does not precompile; not tried again
BUILD_TIMEOUT_S = 900.0
MAX_HEADERS = 4
# extra_cflags of a plain form: nothing in them names a file, a program, a plugin or a shell word
_PLAIN_FLAG = re.compile(
    r"-(?:O[0-3sgz]?|Ofast|f[a-z][a-z0-9-]*|m[a-z0-9][a-z0-9-]*|m(?:arch|tune)=[\w.-]+|std=(?:c|gnu)\+\+\w+"
    r"|[DU][A-Za-z_]\w*(?:=[\w.+-]*)?|W[a-z][a-z0-9-]*|w|g[0-3]?|pthread)")
_PLAIN_PATH = re.compile(r"[\w./+-]+")  # written into a ninja command line unquoted
# load_inline arguments a build the header serves may have (with these values when they are not free)
_FREE = {"name", "cpp_sources", "functions", "extra_cflags", "extra_ldflags", "build_directory", "verbose",
         "is_python_module", "with_pytorch_error_handling", "keep_intermediates"}
_EMPTY = {"cuda_sources", "sycl_sources", "extra_cuda_cflags", "extra_sycl_cflags", "extra_include_paths",
          "with_cuda", "with_sycl", "use_pch", "no_implicit_headers"}


def plain_flags(arguments: dict[str, Any]) -> Optional[list[str]]:
    """The build's extra_cflags when the precompiled header can serve its compile, else None."""
    if any(k not in _FREE and not (k in _EMPTY and not v) for k, v in arguments.items()):
        return None
    if not isinstance(arguments.get("cpp_sources"), (str, list)):
        return None
    flags = arguments.get("extra_cflags") or []
    if not isinstance(flags, list) or not all(isinstance(f, str) and _PLAIN_FLAG.fullmatch(f) for f in flags):
        return None
    return list(flags)


def header_for(folder: str, arguments: dict[str, Any], torch_version: str,
               env: dict[str, str], wait: bool = False) -> Optional[str]:
    """The header to `-include` in this build, compiled first when it is not there yet; None when
    the build cannot use one, or it is being compiled by another process now (this build goes
    without it, unless `wait`), or its flags do not precompile. `env`: the builder's (its compiler)."""
    flags = plain_flags(arguments)
    if flags is None:
        return None
    key = buildcache.build_key({"pch": flags}, "", torch_version)
    root = Path(os.path.abspath(folder))
    header = root / key / HEADER
    if not _PLAIN_PATH.fullmatch(str(header)):
        return None
    if (root / key / GCH).is_file():
        return str(header)
    if (root / f"{key}{FAILED}").exists() or _count(root) >= MAX_HEADERS:
        return None
    try:
        root.mkdir(parents=True, exist_ok=True)
        with _exclusive(root / f"{key}.lock", wait) as mine:
            if not mine:
                return None  # another process is compiling it: this build parses the header itself
            if not (root / key / GCH).is_file():
                _compile(root, key, flags, env)
    except (OSError, subprocess.SubprocessError) as e:
        # only the speed-up is lost: the build parses the header, as it would without one
        log.warning("precompiled torch header for %s not made: %s", flags, e)
        return None
    return str(header) if (root / key / GCH).is_file() else None


def _count(root: Path) -> int:
    return sum(1 for p in root.glob(f"*/{GCH}")) if root.is_dir() else 0


@contextlib.contextmanager
def _exclusive(path: Path, wait: bool):
    with open(path, "a") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            yield False
            return
        yield True


def _compile(root: Path, key: str, flags: list[str], env: dict[str, str]) -> None:
    """Compile the header into a staged folder, renamed into place when complete."""
    for stale in root.glob(f".{key}.*"):  # left by a compile that was killed (this key's lock is ours)
        shutil.rmtree(stale, ignore_errors=True)
    staged = Path(tempfile.mkdtemp(dir=root, prefix=f".{key}."))
    try:
        proc = subprocess.run([sys.executable, "-m", "kernelwright.evaluate.buildpch", str(staged), *flags],
                              env=env, cwd=staged, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S)
        if proc.returncode != 0 or not (staged / GCH).is_file():
            text = proc.stdout[-4000:] + proc.stderr[-4000:]
            if not is_disk_full(text):  # a full disk may pass: tried again next time
                (root / f"{key}{FAILED}").write_text(text)
            log.warning("torch's header does not precompile with %s: %s", flags, proc.stderr[-400:])
            return
        staged.chmod(0o755)  # mkdtemp's 0700: the builder's box reads it
        os.rename(staged, root / key)
    finally:
        shutil.rmtree(staged, ignore_errors=True)


def compile_command(flags: list[str], scratch: str) -> list[str]:
    """The compiler and options torch gives a C++ extension's main.cpp with these extra_cflags,
    read from the ninja file torch writes for such a build (nothing is built or loaded)."""
    import torch.utils.cpp_extension as cpp_extension

    name = "kw_pch_probe"
    os.makedirs(scratch, exist_ok=True)
    cpp_extension._run_ninja_build = lambda *a, **k: None  # write the ninja file, build nothing
    cpp_extension._import_module_from_library = lambda *a, **k: None
    cpp_extension.load_inline(name=name, cpp_sources="", extra_cflags=flags, build_directory=scratch)
    variables = {}
    for line in Path(scratch, "build.ninja").read_text().splitlines():
        found = re.fullmatch(r"(\w+) = (.*)", line)
        if found:
            variables[found[1]] = found[2]
    words = shlex.split(" ".join(variables.get(v, "") for v in ("cxx", "cflags", "post_cflags")))
    return [w for w in words if w != f"-DTORCH_EXTENSION_NAME={name}"]


def _main(argv: list[str]) -> int:
    folder, flags = Path(argv[0]).resolve(), argv[1:]
    command = compile_command(flags, str(folder / "probe"))
    (folder / HEADER).write_text("#include <torch/extension.h>\n")
    proc = subprocess.run([*command, "-x", "c++-header", str(folder / HEADER), "-o", str(folder / GCH)])
    shutil.rmtree(folder / "probe", ignore_errors=True)
    return proc.returncode


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
