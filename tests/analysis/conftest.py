"""Fixtures for the analysis tests."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _private_cache(tmp_path_factory, monkeypatch):
    # Measured CPU peaks are cached under KERNELWRIGHT_CACHE; tests must not write to ~/.cache.
    monkeypatch.setenv("KERNELWRIGHT_CACHE", str(tmp_path_factory.getbasetemp() / "kw-analysis-cache"))
