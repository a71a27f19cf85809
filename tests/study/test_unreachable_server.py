"""A model server nobody can reach stops a study: exit 2, one line, every cell left pending (none
recorded as failed), and a rerun once the server answers would run them all."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.llm.conftest import free_port

pytest.importorskip("openai", reason="openai not installed (pip install 'kernelwright[openai]')")


def test_an_unreachable_server_leaves_every_cell_pending(tmp_path):
    out = tmp_path / "study"
    url = f"http://127.0.0.1:{free_port()}/v1"  # a closed port: nothing listens there
    cmd = [sys.executable, "-m", "kernelwright.cli.main", "study", "run", "-r", "zero_shot+scaffold", "-t", "builtin:1:1-3",
           "-m", f"openai:{url}#m", "--out", str(out)]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert p.returncode == 2, p.stderr[-2000:]
    last = p.stderr.strip().splitlines()[-1]
    assert last.startswith("error: 3 cell(s) left pending: the model server cannot be reached"), last
    cells = (out / "cells.jsonl").read_text().splitlines() if (out / "cells.jsonl").exists() else []
    assert cells == []  # nothing recorded as this study's outcome
    runs = json.loads((out / "manifest.json").read_text())["runs"]
    assert runs[-1]["ended"].startswith("stopped: the model server cannot be reached")
