"""Run one evaluation job in a child process that cannot harm the caller.

Isolation contract (what the evaluator relies on):
- the child is a fresh interpreter (`python -m kernelwright.evaluate.worker`) in its own process
  group and session, so one `killpg` ends it and everything it forked without `setsid`;
- a hard wall-clock limit: on expiry the whole group gets SIGKILL (an infinite loop in Python,
  in C++ or in a GPU kernel all end the same way);
- the child's stdout/stderr are drained continuously and capped (head and tail kept), so a
  candidate printing gigabytes neither blocks the child nor fills the caller's memory;
- results come back on a dedicated pipe, one JSON message per line, each carrying a nonce the
  parent handed over on stdin before any candidate code ran. Lines without it are ignored and
  counted, so a candidate writing to the result pipe cannot forge a verdict by accident.

What it does not defend against: a deliberately malicious candidate that reads the nonce out of
the worker's memory, escapes with `setsid` and a double fork, or attacks the kernel. For that,
run the whole evaluator inside a container or VM; this layer is about LLM-generated code.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Optional

from kernelwright.childproc import kill_group

log = logging.getLogger(__name__)

HEAD_BYTES = 16_000
TAIL_BYTES = 16_000


@dataclass
class SandboxOutcome:
    messages: list[dict[str, Any]]  # authenticated messages from the worker, in order
    returncode: Optional[int]
    timed_out: bool
    wall_s: float
    output: str  # the child's stdout+stderr, capped: head ... tail
    output_bytes: int  # how much the child really printed
    forged_lines: int = 0  # lines on the result pipe without the nonce

    @property
    def final(self) -> Optional[dict[str, Any]]:
        for msg in reversed(self.messages):
            if msg.get("type") == "result":
                return msg
        return None

    @property
    def last_stage(self) -> Optional[str]:
        for msg in reversed(self.messages):
            if msg.get("type") == "stage_start":
                return msg.get("name")
        return None

    @property
    def death_signal(self) -> Optional[str]:
        if self.returncode is not None and self.returncode < 0:
            try:
                return signal.Signals(-self.returncode).name
            except ValueError:
                return f"signal {-self.returncode}"
        return None


@dataclass
class _CappedSink:
    """Keeps the first and last bytes of a stream and counts the rest."""

    head: bytearray = field(default_factory=bytearray)
    tail: bytearray = field(default_factory=bytearray)
    total: int = 0

    def feed(self, chunk: bytes) -> None:
        self.total += len(chunk)
        room = HEAD_BYTES - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        if chunk:
            self.tail += chunk
            if len(self.tail) > TAIL_BYTES:
                del self.tail[: len(self.tail) - TAIL_BYTES]

    def text(self) -> str:
        skipped = self.total - len(self.head) - len(self.tail)
        middle = f"\n[... {skipped} bytes not kept ...]\n" if skipped > 0 else ""
        return (bytes(self.head).decode("utf-8", "replace") + middle
                + bytes(self.tail).decode("utf-8", "replace"))


def _drain(stream, sink: _CappedSink) -> None:
    try:
        while True:
            chunk = stream.read1(65536) if hasattr(stream, "read1") else stream.read(65536)
            if not chunk:
                break
            sink.feed(chunk)
    except (OSError, ValueError):
        pass


def _read_messages(fd: int, nonce: str, out: list[dict[str, Any]], forged: list[int]) -> None:
    buf = b""
    with os.fdopen(fd, "rb", buffering=0) as pipe:
        while True:
            try:
                chunk = pipe.read(65536)
            except OSError:
                break
            if not chunk:
                break
            buf += chunk
            *lines, buf = buf.split(b"\n")
            for line in lines:
                _accept(line, nonce, out, forged)
    _accept(buf, nonce, out, forged)


def _accept(line: bytes, nonce: str, out: list[dict[str, Any]], forged: list[int]) -> None:
    line = line.strip()
    if not line:
        return
    try:
        msg = json.loads(line)
    except ValueError:
        forged[0] += 1
        return
    if not isinstance(msg, dict) or msg.pop("nonce", None) != nonce:
        forged[0] += 1
        return
    out.append(msg)


@dataclass
class Spawned:
    """A worker process started before its job: it imports torch, then waits on stdin."""

    proc: subprocess.Popen
    read_fd: int
    env: dict[str, str]
    started: float


def spawn(env: dict[str, str], cwd: str) -> Spawned:
    """Start a worker that waits for its job (handed over by `run_spawned`)."""
    read_fd, write_fd = os.pipe()
    cmd = [sys.executable, "-m", "kernelwright.evaluate.worker", str(write_fd)]
    proc = subprocess.Popen(
        cmd,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        pass_fds=(write_fd,),
        start_new_session=True,  # own session and process group: killpg reaches all of it
        env=env,
        cwd=cwd,
    )
    os.close(write_fd)
    return Spawned(proc=proc, read_fd=read_fd, env=env, started=time.monotonic())


def discard(sp: Spawned) -> None:
    """End a worker that will never get a job."""
    kill_group(sp.proc.pid)
    sp.proc.wait()
    for stream in (sp.proc.stdin, sp.proc.stdout):
        try:
            if stream is not None:
                stream.close()
        except OSError:
            pass
    try:
        os.close(sp.read_fd)
    except OSError:
        pass


def run_job(job: dict[str, Any], *, timeout: float, env: dict[str, str], cwd: str) -> SandboxOutcome:
    """Run `job` in a fresh worker process; never raises for anything the candidate does."""
    return run_spawned(spawn(env, cwd), job, timeout=timeout)


def run_spawned(sp: Spawned, job: dict[str, Any], *, timeout: float) -> SandboxOutcome:
    """Hand `job` to a worker from `spawn` and wait for it; the time limit starts now."""
    # The nonce is drawn now, after the worker started: no earlier process state can hold it.
    nonce = secrets.token_hex(16)
    proc, read_fd = sp.proc, sp.read_fd
    start = time.monotonic()
    messages: list[dict[str, Any]] = []
    forged = [0]
    sink = _CappedSink()
    readers = [
        threading.Thread(target=_read_messages, args=(read_fd, nonce, messages, forged), daemon=True),
        threading.Thread(target=_drain, args=(proc.stdout, sink), daemon=True),
    ]
    for t in readers:
        t.start()
    try:
        assert proc.stdin is not None
        proc.stdin.write(json.dumps({**job, "nonce": nonce}).encode())
        proc.stdin.close()
    except (BrokenPipeError, OSError):
        pass  # the child died at once; its exit status tells the story
    timed_out = False
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        log.info("evaluation exceeded %.0f s: killing process group %d", timeout, proc.pid)
    # Always kill the group: stragglers the candidate forked must not outlive the evaluation.
    kill_group(proc.pid)
    proc.wait()
    wall = time.monotonic() - start
    for t in readers:
        # A grandchild that escaped the group may hold a pipe open; don't wait on it forever.
        t.join(timeout=5)
    return SandboxOutcome(
        messages=list(messages),
        returncode=proc.returncode,
        timed_out=timed_out,
        wall_s=wall,
        output=sink.text(),
        output_bytes=sink.total,
        forged_lines=forged[0],
    )


PROBE = (
    "import sys, torch\n"
    "d = torch.device(sys.argv[1])\n"
    "x = torch.arange(1024, device=d, dtype=torch.float32)\n"
    "torch.cuda.synchronize(d)\n"
    "assert float(x.sum().item()) == 523776.0\n"
    "print('ok')\n"
)


def probe_gpu(device: str, timeout: float = 90.0) -> bool:
    """True if a fresh process can still run a kernel on `device` and read the result back."""
    try:
        proc = subprocess.run(
            [sys.executable, "-c", PROBE, device],
            capture_output=True, timeout=timeout, start_new_session=True,
        )
    except subprocess.TimeoutExpired:
        return False
    return proc.returncode == 0 and b"ok" in proc.stdout
