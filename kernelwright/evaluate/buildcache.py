"""The shared build cache: extensions built once, loaded by later evaluations of the same candidate.

A worker never writes the cache (it is read-only inside the sandbox). It builds in its own
scratch folder, `<scratch>/builds/<key>/`, where `key` hashes what is built (sources, flags,
arch, torch version). After the worker's tree is dead, the trusted parent promotes each built
library into the cache under the *candidate's* scope and records the library's sha256 beside it:

    <cache>/builds/<scope>/<key>/<name>.so     scope: the candidate's code hash
    <cache>/builds/<scope>/<key>.json          {"artifact": "<name>.so", "sha256": ...}

Why a scope per candidate: what a candidate leaves in its scratch is its own to choose, so a
library promoted from it can only ever be loaded by evaluations of that same candidate (the
pool's prebuild and its evaluation, a re-evaluation). A candidate cannot plant a library under
another candidate's key. Why the sha256: builds are keyed by their output too, so an entry changed
after promotion (by anything) is refused and rebuilt, never loaded.

One scope is shared by every candidate: `shared/`, written only from builds the *trusted builder*
made (builder.py): a sandboxed process that runs no candidate code, only `load_inline`'s compile
and link of arguments the parent read from the candidate's source without running it
(buildspec.py), and never loads what it built. The parent promotes from the builder's scratch only
the keys it computed itself from those arguments. What lands under a key is therefore what
compiling exactly those arguments produces, whoever asked: a second candidate with the same
sources and flags loads it instead of building again, and nothing a candidate does at run time
can reach it. (A hostile flag runs its commands inside the builder's sandbox, at build time; it can
only change the output for its own key, which is the output of those same flags for anyone.)
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import shutil
import stat
import tempfile
from pathlib import Path
from typing import Optional

from kernelwright.evaluate.taxonomy import is_disk_full

log = logging.getLogger(__name__)

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")  # a Python extension module's name
_KEY = re.compile(r"^[0-9a-f]{24}$")
MAX_ARTIFACT_BYTES = 1 << 30
SUFFIX = ".so"
FAILED = "FAILED"  # in a trusted build's folder: the build failed; the file holds the error text
MAX_FAILURE_BYTES = 64 << 10


SHARED = "shared"  # the scope of the trusted builder's builds, for every candidate


def scope_of(code_hash: str) -> str:
    return code_hash[:24]


def torch_version() -> Optional[str]:
    """torch's version as its package metadata says, read without importing torch. The parent and
    the worker both key builds with it: a build of torch reports `torch.__version__` differently
    from its metadata on some machines (the H200's image), and one source keeps the keys equal."""
    import importlib.metadata

    try:
        return importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        return None


def build_key(arguments: dict, arch: str, torch_version: str) -> str:
    """What names a build: load_inline's arguments as passed (not the build folder or verbosity),
    the CUDA arch list and the torch version. One function for the worker and the parent."""
    material = {k: v for k, v in arguments.items() if k not in ("build_directory", "verbose")}
    material["arch"] = arch
    material["torch"] = torch_version
    return hashlib.sha256(json.dumps(material, sort_keys=True, default=str).encode()).hexdigest()[:24]


def sha256_file(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def lookup(root: str, scope: str, key: str, name: str) -> tuple[Optional[str], str]:
    """(the folder holding `<name>.so` if a verified entry exists, what happened: hit, miss, rejected)."""
    index = os.path.join(root, scope, f"{key}.json")
    try:
        with open(index) as f:
            entry = json.load(f)
    except (OSError, ValueError):
        return None, "miss"
    folder = os.path.join(root, scope, key)
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
            tmp = home / f".{key}.failed.tmp"
            tmp.write_text(text)
            os.replace(tmp, home / f"{key}.failed")
            done.append(key)
        except OSError as e:
            log.warning("could not record the failed build %s: %s", key, e)
    return done


def promote(scratch: str, root: str, scope: str, only: Optional[set[str]] = None) -> list[str]:
    """Copy the libraries a (dead) worker built in `scratch` into the cache under `scope`;
    returns the keys promoted. Only plain files with plain names are taken: symlinks and odd
    names a candidate may have planted in its scratch are ignored. `only`: the keys to take
    (the shared scope takes only the keys the parent computed itself)."""
    builds = Path(scratch) / "builds"
    if not builds.is_dir() or builds.is_symlink():
        return []
    done = []
    for entry in sorted(os.listdir(builds)):
        folder = builds / entry
        if not _KEY.match(entry) or folder.is_symlink() or not folder.is_dir():
            continue
        if only is not None and entry not in only:
            continue
        libs = [p for p in folder.iterdir() if p.name.endswith(SUFFIX) and _NAME.match(p.name[:-len(SUFFIX)])
                and _regular(p)]
        if len(libs) != 1:
            continue  # no link happened (a failed build), or something not torch's layout
        if _install(libs[0], Path(root) / scope, entry):
            done.append(entry)
    return done


def _install(lib: Path, home: Path, key: str) -> bool:
    name = lib.name[:-len(SUFFIX)]
    if lookup(str(home.parent), home.name, key, name)[1] == "hit":
        return False  # already there and intact
    home.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{key}-", dir=home))
    try:
        fd = os.open(lib, os.O_RDONLY | os.O_NOFOLLOW)
        with os.fdopen(fd, "rb") as src, open(staging / lib.name, "wb") as dst:
            shutil.copyfileobj(src, dst)
        digest = sha256_file(str(staging / lib.name))
        target = home / key
        if target.exists():
            shutil.rmtree(target)  # a stale or refused entry: replaced as a whole
        os.rename(staging, target)
        index = home / f"{key}.json"
        tmp = home / f".{key}.json.tmp"
        tmp.write_text(json.dumps({"artifact": lib.name, "sha256": digest}))
        os.replace(tmp, index)  # the index last: an entry is visible only once complete
        return True
    except OSError as e:
        log.warning("could not promote build %s: %s", key, e)
        return False
    finally:
        shutil.rmtree(staging, ignore_errors=True)
