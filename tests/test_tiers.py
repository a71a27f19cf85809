"""The tier watch's reading of a command line (tests/_tiers.py): what costs a tier and what does not."""

from __future__ import annotations

import pytest

from tests._tiers import _tier_of


def test_a_build_is_a_build_and_a_preprocessor_query_is_not():
    assert _tier_of("/usr/lib/gcc/x86_64-linux-gnu/12/cc1plus\0-quiet\0-I/x\0main.cpp\0-o\0/tmp/cc.s") == "build"
    assert _tier_of("/usr/local/cuda/bin/nvcc\0-E\0k.cu") == "build"  # nvcc runs a whole toolchain
    assert _tier_of("/usr/local/cuda/bin/nvcc\0--version") is None  # doctor's version query builds nothing
    # grounding asks the compiler for its include search list once per process: milliseconds
    assert _tier_of("/usr/lib/gcc/x86_64-linux-gnu/12/cc1plus\0-E\0-quiet\0-v\0-") is None
    assert _tier_of("/usr/bin/python3\0-m\0llama_cpp.server\0--model\0m.gguf") == "slow"
    assert _tier_of("/usr/bin/python3\0-c\0print(1)") is None


def test_the_costliest_files_run_first_each_in_its_own_order(tmp_path):
    """Files are handed out in the order collection leaves them (.ci/run: --no-loadscope-reorder):
    a file of two builds goes before one of five fast tests, each file's tests in their own order."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    (tmp_path / "test_many_fast.py").write_text("".join(f"def test_f{i}():\n    pass\n" for i in range(5)))
    (tmp_path / "test_two_builds.py").write_text(
        "import pytest\n\n@pytest.mark.build\ndef test_b():\n    pass\n\ndef test_a():\n    pass\n\n"
        "@pytest.mark.build\ndef test_c():\n    pass\n")
    root = Path(__file__).resolve().parents[1]
    out = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "tests._tiers",
                          "-m", "build or not build", "-p", "no:cacheprovider",
                          "-W", "ignore::pytest.PytestUnknownMarkWarning", str(tmp_path)],
                         cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(root)}, capture_output=True, text=True)
    ids = [line.split("::", 1)[1] for line in out.stdout.splitlines() if "::" in line]
    assert ids == ["test_b", "test_a", "test_c"] + [f"test_f{i}" for i in range(5)], out.stdout + out.stderr


@pytest.mark.build  # its programs are named like a build tool: the session's own watch sees them as this test's
def test_the_watch_names_what_its_test_started_and_not_what_ran_before(tmp_path):
    """A program named like a build tool, started during the test, is the test's; one started before
    the test began and still running (a session's server) is not."""
    import subprocess
    import time

    from tests._tiers import Watch, _uptime

    ninja = tmp_path / "ninja"  # `sleep` under a build tool's name: what the watch reads is the name
    ninja.symlink_to("/bin/sleep")
    earlier = subprocess.Popen([str(ninja), "30"])
    time.sleep(1.5)  # started more than the watch's 1 s grace before the test
    watch = Watch(interval=3600)  # scanned by hand below
    try:
        watch.since = _uptime()
        watch._scan("old")
        assert watch.seen == {}
        during = subprocess.Popen([str(ninja), "30"])
        try:
            watch._scan("new")
            assert watch.seen == {"new": {"build": "ninja"}}
        finally:
            during.kill()
            during.wait()
    finally:
        earlier.kill()
        earlier.wait()
