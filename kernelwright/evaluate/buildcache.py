"""The build cache: extensions the trusted builder made, loaded by later evaluations.

Only the trusted builder's products are ever cached (builder.py): a sandboxed process that runs no
candidate code, only `load_inline`'s compile and link of arguments the parent read from the
candidate's source without running it (buildspec.py), one key per box, so one key's build cannot
touch another's. It writes its one library per key through a descriptor of a host folder the box
does not otherwise see; the parent promotes only the key it computed itself, and records the
library's sha256 with it:

    <cache>/builds/shared/<key>/<name>.so
    <cache>/builds/shared/<key>/entry.json     {"artifact": "<name>.so", "sha256": ...}
    <cache>/builds/shared/<key>.failed         the error text of a failed build of <key>

An entry appears at once (a staged folder renamed into place) and only once: a key already
present is never replaced, so whatever a later build of the same key produces cannot change what
the first one published. `key` hashes everything that decides the product (the arguments, the
arch, torch's version, the compiler the environment names). What a candidate's own process builds
stays in its box's scratch and dies with it. A worker never sees the cache: the parent copies the
entries of its job's keys into the worker's scratch (`provide`), where the worker verifies each
against its sha256 before loading it (`lookup`).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import re
import shutil
import stat
import tempfile
from pathlib import Path
from typing import Mapping, Optional

from kernelwright.analysis.roofline import PEAKS_FILE
from kernelwright.evaluate.taxonomy import is_disk_full

log = logging.getLogger(__name__)

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")  # a Python extension module's name
_KEY = re.compile(r"^[0-9a-f]{24}$")
MAX_ARTIFACT_BYTES = 1 << 30
SUFFIX = ".so"
FAILED = "FAILED"  # in a trusted build's folder: the build failed; the file holds the error text
OBJECTS = "OBJECTS"  # in a trusted build's folder: compiled to objects, not linked (compile-only)
MAX_FAILURE_BYTES = 64 << 10


SHARED = "shared"  # the scope of the trusted builder's builds, for every candidate
INDEX = "entry.json"
# the compilers torch's build uses, as the environment names them: a different compiler makes a
# different library from the same arguments
_TOOLCHAIN_ENV = ("CC", "CXX", "NVCC", "CUDA_HOME", "CUDA_PATH")


def torch_version() -> Optional[str]:
    """torch's version as its package metadata says, read without importing torch. The parent and
    the worker both key builds with it: a build of torch reports `torch.__version__` differently
    from its metadata on some machines (the H200's image), and one source keeps the keys equal."""
    import importlib.metadata

    try:
        return importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        return None


def build_key(arguments: dict, arch: str, torch_version: str, env: Optional[Mapping[str, str]] = None) -> str:
    """What names a build: load_inline's arguments as passed (not the build folder or verbosity),
    the CUDA arch list, the torch version and the compilers of `env`, the environment the build
    runs in (the parent passes the worker's: compile-only adds CUDA_HOME to it; the worker's own
    is os.environ). One function for the worker and the parent."""
    env = os.environ if env is None else env
    material = {k: v for k, v in arguments.items() if k not in ("build_directory", "verbose")}
    material["arch"] = arch
    material["torch"] = torch_version
    material["toolchain"] = {k: env[k] for k in _TOOLCHAIN_ENV if env.get(k)}
    return hashlib.sha256(json.dumps(material, sort_keys=True, default=str).encode()).hexdigest()[:24]


def sha256_file(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def lookup(root: str, scope: str, key: str, name: str) -> tuple[Optional[str], str]:
    """(the folder holding `<name>.so` if a verified entry exists, what happened: hit, miss, rejected)."""
    folder = os.path.join(root, scope, key)
    try:
        with open(os.path.join(folder, INDEX)) as f:
            entry = json.load(f)
    except (OSError, ValueError):
        return None, "miss"
    if not isinstance(entry, dict):
        return None, "rejected"
    artifact = os.path.join(folder, f"{name}{SUFFIX}")
    try:
        ok = entry.get("artifact") == f"{name}{SUFFIX}" and sha256_file(artifact) == entry.get("sha256")
    except OSError:
        ok = False
    if not ok:
        log.warning("build cache entry %s/%s does not match its recorded sha256: refused", scope, key)
        return None, "rejected"
    return folder, "hit"


def _regular(path: Path) -> bool:
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISREG(st.st_mode) and st.st_size <= MAX_ARTIFACT_BYTES


def failure(root: str, key: str) -> Optional[str]:
    """The error text of a failed trusted build of `key` (shared scope only), or None."""
    try:
        with open(os.path.join(root, SHARED, f"{key}.failed"), errors="replace") as f:
            return f.read(MAX_FAILURE_BYTES)
    except OSError:
        return None


def record_failures(scratch: str, root: str, keys: set[str]) -> list[str]:
    """For each of `keys` the trusted builder could not build, keep its error text in the shared
    scope (a later identical candidate fails the same way without compiling again)."""
    done = []
    for key in sorted(keys):
        marker = Path(scratch) / "builds" / key / FAILED
        if not _KEY.match(key) or not _regular(marker) or marker.parent.is_symlink():
            continue
        try:
            fd = os.open(marker, os.O_RDONLY | os.O_NOFOLLOW)
            with os.fdopen(fd, "rb") as f:
                text = f.read(MAX_FAILURE_BYTES).decode("utf-8", "replace")
            if is_disk_full(text):
                continue  # the machine's fault, not the arguments': the worker meets it itself
            home = Path(root) / SHARED
            home.mkdir(parents=True, exist_ok=True)
            if _publish_file(home, f"{key}.failed", text.encode()):
                done.append(key)
        except OSError as e:
            log.warning("could not record the failed build %s: %s", key, e)
    return done


def compiled_objects(scratch: str, keys: set[str]) -> list[str]:
    """The keys of `keys` the trusted builder compiled to objects only (a compile-only build with a
    CPU torch): nothing to cache, but the build succeeded. Only a plain marker file counts."""
    builds = Path(scratch) / "builds"
    return [key for key in sorted(keys) if _KEY.match(key) and not (builds / key).is_symlink()
            and _regular(builds / key / OBJECTS)]


def promote(scratch: str, root: str, only: set[str]) -> list[str]:
    """Copy into the shared scope the libraries the trusted builder wrote under `scratch/builds`
    for the keys in `only` (those the parent computed itself); returns the keys promoted. Only a
    plain file with a plain name is taken: nothing else in the folder is read."""
    builds = Path(scratch) / "builds"
    if not builds.is_dir() or builds.is_symlink():
        return []
    done = []
    for entry in sorted(only):
        folder = builds / entry
        if not _KEY.match(entry) or folder.is_symlink() or not folder.is_dir():
            continue
        libs = [p for p in folder.iterdir() if p.name.endswith(SUFFIX) and _NAME.match(p.name[:-len(SUFFIX)])
                and _regular(p)]
        if len(libs) != 1:
            continue  # no link happened (a failed build), or something not torch's layout
        if _install(libs[0], Path(root) / SHARED, entry):
            done.append(entry)
    return done


def _install(lib: Path, home: Path, key: str) -> bool:
    """Publish `lib` as the entry of `key`, once: a key already present and intact keeps what it
    has; one that no longer matches its own sha256 (changed on the host) is replaced as a whole."""
    if (home / key).exists() and _intact(home, key):
        return False
    home.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{key}-", dir=home))
    try:
        fd = os.open(lib, os.O_RDONLY | os.O_NOFOLLOW)
        with os.fdopen(fd, "rb") as src, open(staging / lib.name, "wb") as dst:
            shutil.copyfileobj(src, dst)
        digest = sha256_file(str(staging / lib.name))
        (staging / INDEX).write_text(json.dumps({"artifact": lib.name, "sha256": digest}))
        if (home / key).exists():  # refused as changed: moved aside at once, then removed
            aside = Path(tempfile.mkdtemp(prefix=f".{key}-refused-", dir=home))
            with contextlib.suppress(OSError):
                os.rename(home / key, aside / key)
            shutil.rmtree(aside, ignore_errors=True)
        try:
            os.rename(staging, home / key)  # atomic; fails where another promotion got there first
        except OSError:
            return False
        return True
    except OSError as e:
        log.warning("could not promote build %s: %s", key, e)
        return False
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _intact(home: Path, key: str) -> bool:
    try:
        name = str(json.loads((home / key / INDEX).read_text())["artifact"])[: -len(SUFFIX)]
    except (OSError, ValueError, KeyError, TypeError):
        return False
    return lookup(str(home.parent), home.name, key, name)[1] == "hit"


def _publish_file(home: Path, name: str, data: bytes) -> bool:
    """Write `home/name` once: complete or absent, never replaced."""
    fd, tmp = tempfile.mkstemp(prefix=f".{name}-", dir=home)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.link(tmp, home / name)  # fails where it exists
        return True
    except FileExistsError:
        return False
    finally:
        os.unlink(tmp)


def provide(root: str, keys: list[str], inbox: str) -> str:
    """Copy the verified shared entries and recorded failures of `keys` from the cache at `root`
    into `inbox/builds` (a worker's scratch, read-only in its box), with the machine's measured
    device peaks beside; returns the builds root the worker is told to read."""
    dest = Path(inbox) / "builds" / SHARED
    try:
        dest.mkdir(parents=True, exist_ok=True)
    except OSError as e:  # a full disk, say: the worker then builds what it needs itself
        log.warning("could not give the worker its cache entries: %s", e)
        return str(Path(inbox) / "builds")
    for key in keys:
        if not _KEY.match(key):
            continue
        failed = Path(root) / SHARED / f"{key}.failed"
        if _regular(failed):
            with contextlib.suppress(OSError):
                shutil.copyfile(failed, dest / failed.name)
        try:
            entry = json.loads((Path(root) / SHARED / key / INDEX).read_text())
            name = str(entry["artifact"])[: -len(SUFFIX)]
        except (OSError, ValueError, KeyError, TypeError):
            continue
        folder, _ = lookup(root, SHARED, key, name) if _NAME.match(name) else (None, "")
        if folder is None:
            continue
        try:
            (dest / key).mkdir()
            shutil.copyfile(os.path.join(folder, f"{name}{SUFFIX}"), dest / key / f"{name}{SUFFIX}")
            shutil.copyfile(os.path.join(folder, INDEX), dest / key / INDEX)
        except OSError as e:  # a partial copy fails the worker's sha256 check: it builds instead
            log.warning("could not give the worker the cache entry %s: %s", key, e)
    peaks = Path(root).parent / PEAKS_FILE
    if _regular(peaks):
        with contextlib.suppress(OSError):
            shutil.copyfile(peaks, Path(inbox) / PEAKS_FILE)
    return str(Path(inbox) / "builds")
