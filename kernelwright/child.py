"""Run one job in a fresh interpreter: JSON in on stdin, one JSON line back on stdout; and, in such
a child, load the task's module (`load_task_module`, the one way every child runs a task's source:
the judge's reference, analysis, scaffold planning, optimize's probe).

Used for everything that executes task code outside the evaluator (analysis, scaffold planning):
the caller is long-lived and must neither initialise CUDA nor run user code itself. The child
gets its own session so that anything it starts is killed with it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import types
from pathlib import Path
from typing import Any, Optional


class ChildTimeout(Exception):
    pass


def load_task_module(source: str, filename: str, name: str, *, file: Optional[str] = None,
                     keep: bool = False) -> types.ModuleType:
    """Execute a task's source as a fresh module named `name`, its code objects carrying `filename`
    (tracebacks and the judge's own-code checks read it). The module sits in `sys.modules` while its
    body runs, because dataclasses and pickling look classes up there; `keep` leaves it there
    afterwards (torch.compile's tracing looks the module up by name), else nobody can import it.
    `file` sets `__file__` where the source was also written out (inspect.getsource works then).
    Whatever the source raises propagates: each caller says in its own words which stage failed."""
    module = types.ModuleType(name)
    if file is not None:
        module.__file__ = file
    code = compile(source, filename, "exec")
    sys.modules[name] = module
    try:
        exec(code, module.__dict__)  # noqa: S102 - the task's own source, in a child made for it
    except BaseException:
        sys.modules.pop(name, None)
        raise
    if not keep:
        sys.modules.pop(name, None)
    return module


def run_json_child(module: str, payload: str, timeout: float,
                   env_extra: dict[str, str] | None = None) -> tuple[dict[str, Any] | None, int, str]:
    """(the last JSON line the child printed or None, its exit code, its last stderr line)."""
    env = dict(os.environ, PYTHONUNBUFFERED="1", **(env_extra or {}))
    pkg_root = str(Path(__file__).resolve().parents[1])  # importable from a source checkout too
    env["PYTHONPATH"] = os.pathsep.join(p for p in (pkg_root, env.get("PYTHONPATH", "")) if p)
    proc = subprocess.Popen([sys.executable, "-m", module], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=env, start_new_session=True)
    try:
        out, err = proc.communicate(payload.encode(), timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_group(proc.pid)
        proc.communicate()
        raise ChildTimeout(f"no result within {timeout:.0f} s") from None
    finally:
        kill_group(proc.pid)  # anything the task started must not outlive the job
    tail = err.decode(errors="replace").strip().splitlines()
    return last_json_line(out), proc.returncode, (tail[-1][:300] if tail else "")


def one_line(e: BaseException) -> str:
    """An exception raised by task code, as one line for a stage error, with what it was raised
    from or during: wrappers such as fx's ShapeProp (`ShapeProp error for: node=%conv`) say where,
    only the exception under them says what went wrong."""
    parts: list[str] = []
    seen: set[int] = set()
    cur: BaseException | None = e
    while cur is not None and id(cur) not in seen and len(parts) < 6:
        seen.add(id(cur))
        text = str(cur).strip().splitlines()
        parts.append(f"{type(cur).__name__}: {text[0]}" if text else type(cur).__name__)
        cur = cur.__cause__ or (None if cur.__suppress_context__ else cur.__context__)
    # the wrappers' words short (ShapeProp's carry the node's whole meta), the last cause whole
    return "; caused by ".join([p[:160] for p in parts[:-1]] + [parts[-1][:300]])


def kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def last_json_line(out: bytes) -> dict[str, Any] | None:
    for line in reversed(out.decode(errors="replace").splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                return json.loads(line)
            except ValueError:
                return None
    return None


def child_main(handle: Any) -> int:
    """The child's side: point fd 1 at stderr (task prints cannot corrupt the reply), read the
    job from stdin, reply with ``handle(text)`` (a JSON-able dict) on the original stdout."""
    import logging

    reply_fd = os.dup(1)
    os.dup2(2, 1)
    logging.basicConfig(level=os.environ.get("KERNELWRIGHT_LOG", "WARNING"), stream=sys.stderr,
                        format="%(levelname)s %(name)s: %(message)s")
    try:
        reply = handle(sys.stdin.read())
    except Exception as e:  # a bug of ours: still one line for the caller
        logging.getLogger(__name__).exception("child job failed")
        reply = {"ok": False, "stage": "internal", "error": f"{type(e).__name__}: {str(e)[:300]}"}
    with os.fdopen(reply_fd, "w") as out:
        out.write(json.dumps(reply) + "\n")
    return 0
