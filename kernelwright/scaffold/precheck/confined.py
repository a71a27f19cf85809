"""Where the pre-check keeps its files, and how it runs model-written code: confined."""

from __future__ import annotations

import os
import subprocess
import tempfile
from pathlib import Path


def cache_dir() -> Path:
    d = Path(os.environ.get("KERNELWRIGHT_PRECHECK_CACHE") or Path(tempfile.gettempdir()) / f"kw-precheck-{os.getuid()}")
    d.mkdir(parents=True, exist_ok=True)
    return d


def confined_run(argv: list[str], scratch: str, visible: list[str], timeout: float,
                 stdin: str = "") -> tuple[int, str]:
    """(exit status, stdout) of `argv` run under the evaluator's confinement (no network, the file
    system read-only but `scratch`, limits), as far as this machine offers it: the pre-check runs
    model-written code. -1 if it ran past `timeout`."""
    from kernelwright import confine

    limits = confine.Limits(memory_bytes=2 << 30, cpu_seconds=int(timeout) + 5)
    held = confine.box(argv, scratch, visible, limits, env_scrubbed=True, required=False, keep_scratch=True)
    env = {"PATH": "/usr/bin:/bin", "HOME": scratch, "TMPDIR": scratch, "LC_ALL": "C"}
    proc = subprocess.Popen(held.argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            cwd=scratch, env=env, text=True, start_new_session=True)
    try:
        out, _ = proc.communicate(stdin, timeout=timeout)
        return proc.returncode, out
    except subprocess.TimeoutExpired:
        confine.kill_tree(proc.pid, held.cgroup)
        proc.wait()
        return -1, ""
    finally:
        held.release()
