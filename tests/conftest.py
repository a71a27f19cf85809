"""Shared test helpers: fixture paths and a small, fast evaluation config."""

from __future__ import annotations

from pathlib import Path

import pytest

# test tiers (build / slow / gpu are opt-in) and the watch that keeps them honest
pytest_plugins = ["tests._tiers"]

FIXTURES = Path(__file__).parent / "fixtures"
CANDIDATES = FIXTURES / "candidates"
TASKS = FIXTURES / "tasks"


@pytest.fixture(scope="session")
def build_cache(tmp_path_factory, worker_id: str) -> Path:
    """One build cache per test run: each distinct extension source builds once. Under pytest-xdist
    the workers share it (their base folders have one parent); the content-hash cache locks each
    build folder, so two workers needing one extension build it once."""
    if worker_id == "master":
        return tmp_path_factory.mktemp("kw-cache")
    shared = tmp_path_factory.getbasetemp().parent / "kw-cache"
    shared.mkdir(exist_ok=True)
    return shared


@pytest.fixture(scope="session")
def worker_id(request) -> str:
    """pytest-xdist's worker name ("gw0", ...), or "master" without it (its own fixture wins when installed)."""
    return getattr(request.config, "workerinput", {}).get("workerid", "master")


@pytest.fixture(scope="session")
def fast_cfg(build_cache):
    """An EvalRun factory with a smaller timing budget; the protocol is otherwise the real one."""
    from kernelwright.evaluate import EvalRun

    def make(**overrides):
        base = dict(device="cpu", trials=3, warmup=3, iters=20, input_sets=4, timeout=300.0,
                    cache_dir=str(build_cache))
        base.update(overrides)
        return EvalRun.of(**base)

    return make


def builds(text: str) -> bool:
    """Does evaluating this candidate compile C++/CUDA? (Its tier is `build` if so.)"""
    return "load_inline" in text or "cpp_extension" in text


def candidate_param(path: Path, *values, id: str | None = None):
    """A pytest.param for a candidate file, marked `build` when evaluating it compiles."""
    marks = [pytest.mark.build] if builds(path.read_text()) else []
    return pytest.param(path.name, *values, marks=marks, id=id or path.name)


@pytest.fixture
def tiny_disk(tmp_path):
    """A 1 MB tmpfs: a disk that fills up (needs root; skipped where mount is refused)."""
    import subprocess

    mount = tmp_path / "full"
    mount.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)], capture_output=True).returncode:
        pytest.skip("cannot mount a tmpfs here")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], capture_output=True)


SMALL = "qwen2.5-coder-0.5b"


@pytest.fixture(scope="session")
def small_model() -> Path:
    """The verified 0.5B GGUF; pulled first when KERNELWRIGHT_TEST_PULL=1, else skipped if absent."""
    import os

    from kernelwright.llm import local_model

    if os.environ.get("KERNELWRIGHT_TEST_PULL") == "1":
        return local_model.pull(SMALL)
    path = local_model.cached_path(SMALL)
    if path is None:
        pytest.skip(
            f"{SMALL} is not in {local_model.cache_dir()}: run `kernelwright model pull {SMALL}` "
            "or set KERNELWRIGHT_TEST_PULL=1"
        )
    return path
