"""Compile-only's verdict, decided by the judge from what it observes itself.

The candidate's runner imports the candidate and its builds run there; what that process says about
them (its build records, its objects' types, any verdict it computes) is its own word, and it can
rebind anything in itself, from Python or from native code. So `eval --compile-only` is decided here,
in the judge, from evidence outside the candidate's reach:
- the trusted builder's outcome of each literal build (records.TrustedBuild): it compiled exactly the
  arguments the parent read from the source, in a box of its own, and the parent observed the result
  outside any box and put it in the job; a failure decides even where the candidate caught the error;
- for a build call the trusted builder could not take (arguments computed at run time, `load` of
  files), the build folders of the scratch (`builds/<key>/`, torch's `torch_extensions/`), read by
  this process: a folder whose sources have no product is a build that failed; a product is an ELF
  relocatable or shared object for this machine whose header and section table are consistent with
  its size, recorded with its sha256 (`BuildProduct`). The scratch is the candidate's to write, so
  this is weaker evidence, and read only where the source holds such a call;
- Triton, which compiles at a kernel's first launch (compile-only launches nothing): a function of the
  candidate's source decorated with Triton's `jit` (read with ast, never run), with Triton's own native
  library mapped in the candidate's process (its /proc maps, read by this process).
"""

from __future__ import annotations

import ast
import hashlib
import importlib.util
import itertools
import os
import struct
from dataclasses import dataclass, field
from typing import Optional

from kernelwright.evaluate.candidate_load import Finish
from kernelwright.records import BuildProduct, EvalJob, TrustedBuild

_KINDS = {1: "object", 3: "shared object"}  # ELF e_type: ET_REL, ET_DYN
_SUFFIX_KIND = {".o": "object", ".so": "shared object"}
MAX_ENTRIES = 4096  # files looked at in the scratch's build folders: the candidate may fill them
MAX_DEPTH = 4  # builds/<key>/..., torch_extensions/<name>/...
_SOURCES = ("main.cpp", "cuda.cu")  # load_inline's files, in torch's layout and compile_only.py's


@dataclass
class Seen:
    """What the judge found in the scratch's build folders."""

    products: list[BuildProduct] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)  # folders whose sources have no product


def verdict(job: EvalJob, maps: Optional[str]) -> tuple[Finish, list[BuildProduct]]:
    """The verdict of a compile-only job whose import ended (the candidate's runner answered), and
    the products that were checked; `maps`: the candidate's process's /proc maps, read by the judge."""
    seen = scan(job.workdir) if untrusted_calls(job) else Seen()
    failed = [t for t in job.trusted_builds if not t.ok]
    if failed:
        return _trusted_failure(failed[0]), seen.products
    if seen.failed:
        return Finish("compile_error", "a build in this evaluation's scratch left no product (it failed, and the "
                      f"import went on): {', '.join(seen.failed[:3])}"), seen.products
    if any(t.ok for t in job.trusted_builds) or seen.products:
        return Finish("compiled"), seen.products
    if triton_jit_functions(job.candidate_source) and triton_mapped(maps):
        return Finish("compiled"), seen.products
    return Finish("no_custom_kernel", "compile-only: the candidate built nothing and defines no Triton kernel "
                  "(a function decorated with triton.jit, with Triton loaded)"), seen.products


def untrusted_calls(job: EvalJob) -> int:
    """Build calls in the candidate's source that the trusted builder did not decide: only for those
    is the scratch read (a library planted there by a candidate whose every build is literal, or
    which has none, is no build of its own). `load` builds from files the candidate wrote."""
    from kernelwright.evaluate import buildspec

    try:
        tree = ast.parse(job.candidate_source)
    except (SyntaxError, ValueError, RecursionError):
        return 0
    loads = sum(1 for n in ast.walk(tree) if isinstance(n, ast.Call) and _callee(n.func) == "load")
    specs = buildspec.literal_builds(job.candidate_source)
    decided = {t.name for t in job.trusted_builds}
    return specs.calls - len(specs.builds) + sum(b.name not in decided for b in specs.builds) + loads


def _callee(func: ast.expr) -> Optional[str]:
    return func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None


def _trusted_failure(build: TrustedBuild) -> Finish:
    from kernelwright.evaluate import taxonomy

    text = build.error or "the build failed"
    error_type, _, _ = text.partition(": ")
    found = taxonomy.classify_build_failure(error_type if error_type.isidentifier() else "RuntimeError", text)
    return Finish(found.value, f"the build '{build.name}' failed in the trusted builder, and the import went on "
                  f"(its error caught, or the call never made): {text}")


def scan(workdir: str) -> Seen:
    """The scratch's build folders as they are now, read without following a link."""
    seen = Seen()
    budget = [MAX_ENTRIES]
    for root in ("builds", "torch_extensions"):
        _folder(os.path.join(workdir, root), 0, seen, budget)
    return seen


def _folder(path: str, depth: int, seen: Seen, budget: list[int]) -> None:
    try:
        with os.scandir(path) as listing:
            entries = list(itertools.islice(listing, max(budget[0], 0)))
    except OSError:
        return
    budget[0] -= len(entries)
    files = {e.name: e.path for e in entries if e.is_file(follow_symlinks=False)}
    products = [p for p in (_product(files[n], n) for n in sorted(files)) if p is not None]
    seen.products += products
    sources = [n for n in _SOURCES if n in files]
    if sources and not _complete(products, sources, "build.ninja" in files):
        seen.failed.append(os.path.basename(path))
    if depth < MAX_DEPTH:
        for e in entries:
            if e.is_dir(follow_symlinks=False):
                _folder(e.path, depth + 1, seen, budget)


def _complete(products: list[BuildProduct], sources: list[str], linked: bool) -> bool:
    """torch's own build (it writes build.ninja) ends in a shared object; compile_only.py's in one
    object per source (main.o, cuda.cuda.o)."""
    if linked:
        return any(p.elf == "shared object" for p in products)
    names = {os.path.basename(p.path) for p in products if p.elf == "object"}
    return all(f"{stem}.cuda.o" in names if ext == ".cu" else f"{stem}.o" in names
               for stem, ext in map(os.path.splitext, sources))


def _product(path: str, name: str) -> Optional[BuildProduct]:
    kind = _SUFFIX_KIND.get(os.path.splitext(name)[1])
    if kind is None:
        return None
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        with os.fdopen(fd, "rb") as f:
            if elf_kind(f.read(64), os.fstat(f.fileno()).st_size) != kind:
                return None
            f.seek(0)
            digest = hashlib.sha256()
            for chunk in iter(lambda: f.read(1 << 20), b""):
                digest.update(chunk)
    except OSError:
        return None
    return BuildProduct(path=path, sha256=digest.hexdigest(), elf=kind)


def elf_kind(header: bytes, size: int) -> Optional[str]:
    """"object" or "shared object" for an ELF header of this machine's class, byte order and
    architecture whose section table lies inside the file; None for anything else."""
    host = _host_header()
    if len(header) < 64 or header[:4] != b"\x7fELF" or host is None or header[4:6] != host[4:6]:
        return None
    order = "<" if header[5] == 1 else ">"
    wide = header[4] == 2
    e_type, machine = struct.unpack_from(order + "HH", header, 16)
    if machine != struct.unpack_from(order + "H", host, 18)[0]:
        return None
    shoff = struct.unpack_from(order + ("Q" if wide else "I"), header, 40 if wide else 32)[0]
    shentsize, shnum = struct.unpack_from(order + "HH", header, 58 if wide else 46)
    if shnum == 0 or shentsize != (64 if wide else 40) or shoff + shnum * shentsize > size:
        return None
    return _KINDS.get(e_type)


_host: list[Optional[bytes]] = []


def _host_header() -> Optional[bytes]:
    """This interpreter's own ELF header: the class, byte order and machine a build here targets."""
    if not _host:
        try:
            with open("/proc/self/exe", "rb") as f:
                _host.append(f.read(64))
        except OSError:
            _host.append(None)
    return _host[0]


def triton_jit_functions(source: str) -> list[str]:
    """Functions of `source` decorated with Triton's `jit` (`@triton.jit`, `@jit` imported from
    triton, called or not, under an autotuner or not), read without running anything."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError):
        return []
    modules, jits = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            modules |= {a.asname or a.name for a in node.names if a.name == "triton"}
        elif isinstance(node, ast.ImportFrom) and node.module == "triton":
            jits |= {a.asname or a.name for a in node.names if a.name == "jit"}

    def is_jit(d: ast.expr) -> bool:
        d = d.func if isinstance(d, ast.Call) else d
        if isinstance(d, ast.Attribute) and isinstance(d.value, ast.Name):
            return d.value.id in modules and d.attr == "jit"
        return isinstance(d, ast.Name) and d.id in jits

    return [n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and any(map(is_jit, n.decorator_list))]


def triton_mapped(maps: Optional[str]) -> bool:
    """Triton's native library, from the installed (read-only) package, is mapped executable in the
    process whose maps these are: a module that only calls itself triton maps nothing there."""
    try:
        spec = importlib.util.find_spec("triton")
    except (ImportError, ValueError):
        return False
    places = list(spec.submodule_search_locations or []) if spec is not None else []
    if maps is None or not places:
        return False
    native = [os.path.join(os.path.realpath(p), "_C") + os.sep for p in places]
    for line in maps.splitlines():
        parts = line.split(None, 5)
        if len(parts) == 6 and "x" in parts[1] and any(parts[5].startswith(n) for n in native):
            return True
    return False
