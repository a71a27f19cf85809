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
def build_cache(tmp_path_factory) -> Path:
    """One build cache per test session: each distinct extension source builds once."""
    return tmp_path_factory.mktemp("kw-cache")


@pytest.fixture(scope="session")
def fast_cfg(build_cache):
    """An EvalConfig factory with a smaller timing budget; the protocol is otherwise the real one."""
    from kernelwright.evaluate import EvalConfig

    def make(**overrides):
        base = dict(device="cpu", trials=3, warmup=3, iters=20, input_sets=4, timeout=300.0,
                    cache_dir=str(build_cache))
        base.update(overrides)
        return EvalConfig(**base)

    return make
