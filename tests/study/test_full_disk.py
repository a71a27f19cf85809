"""A disk that fills up during a study (kernelwright issue #19): one line and a non-zero exit, and
what was recorded before stays whole (no torn line, no half-written manifest). The disk is a real
1 MB tmpfs (tests/conftest.py `tiny_disk`), nearly filled first, so the study's own writes run out."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from pydantic import BaseModel

from kernelwright.study.log import append_record
from tests.conftest import CANDIDATES


class Note(BaseModel):
    text: str


def _fill(disk, leave: int) -> None:
    """Fill `disk` until about `leave` bytes are free."""
    st = os.statvfs(disk)
    free = st.f_bavail * st.f_frsize
    (disk / "filler").write_bytes(b"\0" * max(0, free - leave))


def test_a_record_that_does_not_fit_is_taken_back_whole(tiny_disk):
    path = tiny_disk / "records.jsonl"
    append_record(path, Note(text="kept"))
    _fill(tiny_disk, 0)
    with pytest.raises(OSError) as e:
        append_record(path, Note(text="x" * 20_000))  # more than the last page has room for
    assert e.value.filename == str(path)
    assert path.read_text().splitlines() == [Note(text="kept").model_dump_json()]  # no torn line


@pytest.mark.parametrize("leave", [2_000, 9_000])
def test_a_study_that_fills_the_disk_stops_with_one_line(tiny_disk, tmp_path, leave):
    """Wherever the disk runs out (the manifest, an attempt, a cell), the same contract."""
    runs = tmp_path / "runs"
    runs.mkdir()
    for p in range(1, 4):  # fail before any sandbox (no build, no evaluation process): quick
        (runs / f"level_1_problem_{p}_sample_0_kernel.py").write_text((CANDIDATES / "cpu" / "syntax_error.py").read_text())
    out = tiny_disk / "study"
    _fill(tiny_disk, leave)
    cmd = [sys.executable, "-m", "kernelwright.cli.main", "study", "import", str(runs), "--tasks", "builtin:1:1-3",
           "--out", str(out), "--no-timing"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if p.returncode == 0:
        pytest.skip(f"{leave} bytes were enough for this study")  # the contract is about a full disk
    assert p.returncode == 2, p.stderr[-2000:]
    lines = [ln for ln in p.stderr.strip().splitlines() if ln.strip()]
    assert lines[-1].startswith("error: the disk is full") and "Traceback" not in p.stderr, p.stderr[-2000:]
    for name in ("cells.jsonl", "attempts.jsonl"):
        if (out / name).exists():
            for line in (out / name).read_text().splitlines():
                json.loads(line)  # every line is a whole record
    if (out / "manifest.json").exists():
        json.loads((out / "manifest.json").read_text())
    assert not [f for f in out.glob("*.tmp*")] if out.exists() else True
