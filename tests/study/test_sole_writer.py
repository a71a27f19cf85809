"""One folder, one writer: a second `study run` on a folder another process is writing stops at
once with one line naming the holder (exit 2), writes nothing, and the folder is free again when
the holder ends, even killed."""

from __future__ import annotations

import subprocess
import sys
import time

from kernelwright.study.log import WRITER_LOCK

HOLD = """
import sys, time
from pathlib import Path
from kernelwright.study.log import sole_writer
with sole_writer(Path(sys.argv[1])):
    print("holding", flush=True)
    time.sleep(120)
"""


def _study(out):
    cmd = [sys.executable, "-m", "kernelwright.cli.main", "study", "run", "-r", "zero_shot", "-t", "builtin:1:1",
           "-m", "replay:/nonexistent.jsonl", "--out", str(out)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300)


def test_a_second_writer_stops_and_names_the_first(tmp_path):
    out = tmp_path / "study"
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(out)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "holding"
        p = _study(out)
        assert p.returncode == 2, p.stderr[-1500:]
        last = p.stderr.strip().splitlines()[-1]
        assert f"is being written by kernelwright pid {holder.pid}" in last, last
        assert sorted(f.name for f in out.iterdir()) == [WRITER_LOCK]  # nothing else written
    finally:
        holder.kill()
        holder.wait()
    # killed, the holder's flock is gone: the next run gets past the lock (and fails on its bad model)
    time.sleep(0.2)
    p = _study(out)
    assert "is being written by" not in p.stderr, p.stderr[-1500:]
