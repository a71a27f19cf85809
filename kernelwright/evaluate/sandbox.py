"""Run one evaluation job in a child process that cannot harm the caller.

Isolation contract (what the evaluator relies on):
- the child is a fresh interpreter (`python -m kernelwright.evaluate.judge`, which starts the
  candidate's process itself and never imports the candidate) held by the operating system
  (confine.py): no network, only what it needs of the filesystem, read-only, writable only in a
  private tmpfs over its scratch folder (made here, one per process, whose host folder holds the
  copy of the cache entries its job may load, and receives the trusted builder's product through
  a descriptor), its own PID namespace, cgroup and limits, death with its parent; each
  SandboxOutcome carries the record of what held it;
- a hard wall-clock limit: on expiry the whole tree gets SIGKILL (an infinite loop in Python,
  in C++ or in a GPU kernel all end the same way); after a normal finish it is killed too, so
  nothing the candidate started (compilers in their own process groups, `setsid` daemons)
  outlives the evaluation;
- the child's stdout/stderr are drained continuously and capped (head and tail kept), so a
  candidate printing gigabytes neither blocks the child nor fills the caller's memory;
- results come back on a dedicated pipe, one JSON message per line, each carrying a nonce the
  parent handed over on stdin before any candidate code ran. Lines without it are ignored and
  counted, so a candidate writing to the result pipe cannot forge a verdict by accident.

What it does not defend against: a candidate that attacks the kernel or the GPU driver (the judge
holds the pipe and the candidate runs in another process, so reading the nonce is not enough to
forge a verdict; docs/evaluator.md). The confinement keeps such a candidate from harming anything outside its scratch.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import secrets
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Optional

from kernelwright import confine, devmem
from kernelwright.evaluate import buildcache
from kernelwright.records import Confinement, EvalJob, JudgeResult, SandboxJob

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
    scratch: str = ""  # the worker's private, writable folder (its builds are there); the caller removes it
    confinement: Optional[Confinement] = None
    oom_kills: int = 0  # processes the kernel killed at the evaluation's memory limit (its cgroup's count)
    # the largest device memory the evaluation's processes held together, as the driver counted it
    # (devmem.py's sampler, outside the sandbox); None: not on a GPU, or no reader of the driver here
    device_memory_bytes: Optional[int] = None

    @property
    def final(self) -> Optional[JudgeResult]:
        """The judge's closing message; None when it sent none (it died, or was killed first), or
        sent one that is not a result record (then the judge is not ours to believe)."""
        for msg in reversed(self.messages):
            if msg.get("type") == "result":
                try:
                    return JudgeResult.model_validate(msg)
                except ValueError:  # pydantic's ValidationError
                    return None
        return None

    @property
    def last_stage(self) -> Optional[str]:
        for msg in reversed(self.messages):
            if msg.get("type") == "stage_start":
                return msg.get("name")
        return None

    @property
    def death_signal(self) -> Optional[str]:
        number = None
        if self.returncode is not None and self.returncode < 0:
            number = -self.returncode
        elif (self.confinement is not None and self.confinement.mechanism == "bwrap"
              and self.returncode is not None and 128 < self.returncode < 128 + 65):
            number = self.returncode - 128  # bwrap exits 128+N when its command died of signal N
        if number is None:
            return None
        try:
            return signal.Signals(number).name
        except ValueError:
            return f"signal {number}"


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


@dataclass(frozen=True)
class Confine:
    """How to hold a worker (the part of its start that depends on the evaluation's settings)."""

    limits: confine.Limits
    visible: tuple[str, ...]  # read-only paths the worker needs (Python, the package)
    env_scrubbed: bool
    required: bool  # refuse to start when a required protection is missing
    # the jobs it will get are timed: the judge starts the reference's runner ahead too
    timed: bool = False
    # the judge starts its runners as fresh interpreters instead of forking them (GPU jobs: a child
    # forked from a process torch has touched CUDA in cannot use CUDA)
    spawn_runners: bool = False
    # the device's lock files (device.py): the judge inherits a descriptor of each, since the
    # machine-wide lock folder is not in the box (no candidate can take or hold a device's lock)
    locks: tuple[str, ...] = ()


# Under the worker's scratch on the host: the build-cache entries its job may load, copied in
# before the job is handed over and seen read-only in the box (the box's own scratch is a private
# tmpfs over the same path). Beside it, `builds/`: written only by the trusted builder, through a
# descriptor of the host folder (builder.py), and promoted from there by the parent.
INBOX = "cache"


@dataclass
class Spawned:
    """A worker process started before its job: it imports torch, then waits on stdin."""

    proc: subprocess.Popen
    read_fd: int
    env: dict[str, str]
    started: float
    scratch: str
    held: Confine
    box: confine.Box


def spawn(env: dict[str, str], held: Confine) -> Spawned:
    """Start a worker that waits for its job (handed over by `run_spawned`), in a fresh scratch
    folder that is the only place it may write. Raises confine.ConfinementUnavailable."""
    scratch = tempfile.mkdtemp(prefix="kw-eval-")
    inbox = os.path.join(scratch, INBOX)
    os.makedirs(inbox)
    read_fd, write_fd = os.pipe()
    passed = [write_fd, os.open(scratch, os.O_RDONLY | os.O_DIRECTORY)]
    cmd = [sys.executable, "-m", "kernelwright.evaluate.judge", str(write_fd), "--outbox", str(passed[1])]
    if held.timed:
        cmd.append("--timed")
    if held.spawn_runners:
        cmd.append("--spawn-runners")
    try:
        for path in held.locks:
            passed.append(os.open(path, os.O_RDONLY))  # flock needs no write access
            cmd += ["--lock", f"{passed[-1]}={path}"]
        # the judge keeps JUDGE_CAPS to start the candidate's runner in namespaces of its own, then
        # drops them before it reads its job (evaluate/isolation.py)
        box = confine.box(cmd, scratch, [*held.visible, inbox], held.limits, held.env_scrubbed, held.required,
                          caps=confine.JUDGE_CAPS)
    except BaseException:
        os.close(read_fd)
        for fd in passed:
            os.close(fd)
        confine.remove_tree(scratch)
        raise
    os.makedirs(os.path.join(scratch, "tmp"))  # inside a box, the tmpfs has its own
    own = {"HOME": scratch, "TMPDIR": os.path.join(scratch, "tmp"),
           # extension builds by `load` and Triton's cache: this process's own, never a shared folder
           "TORCH_EXTENSIONS_DIR": os.path.join(scratch, "torch_extensions"),
           "TRITON_CACHE_DIR": os.path.join(scratch, "triton")}
    proc = subprocess.Popen(
        box.argv,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        pass_fds=tuple(passed),
        start_new_session=True,  # own session and process group, apart from the caller's
        env={**env, **own},
        cwd=scratch,
    )
    for fd in passed:
        os.close(fd)
    return Spawned(proc=proc, read_fd=read_fd, env=env, started=time.monotonic(), scratch=scratch, held=held,
                   box=box)


def _end(sp: Spawned) -> int:
    """Kill the worker's whole tree (namespace, cgroup) and wait until it is gone; returns how many
    of its processes the kernel had killed at the memory limit (read before the cgroup goes)."""
    confine.kill_tree(sp.proc.pid, sp.box.cgroup)
    sp.proc.wait()
    oom_kills = sp.box.cgroup.oom_kills() if sp.box.cgroup is not None else 0
    sp.box.release()
    return oom_kills


def discard(sp: Spawned) -> None:
    """End a worker that will never get a job."""
    _end(sp)
    confine.remove_tree(sp.scratch)
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


def run_job(job: SandboxJob, *, timeout: float, env: dict[str, str], held: Confine) -> SandboxOutcome:
    """Run `job` in a fresh worker process; never raises for anything the candidate does."""
    return run_spawned(spawn(env, held), job, timeout=timeout)


def run_spawned(sp: Spawned, job: SandboxJob, *, timeout: float) -> SandboxOutcome:
    """Hand `job` to a worker from `spawn` and wait for it; the time limit starts now."""
    # The nonce is drawn now, after the worker started: no earlier process state can hold it.
    nonce = secrets.token_hex(16)
    proc, read_fd = sp.proc, sp.read_fd
    update: dict[str, Any] = {"workdir": sp.scratch}
    if isinstance(job, EvalJob):
        # only the entries this job may load, before the worker gets the job: it never sees the cache
        update["builds_root"] = buildcache.provide(job.builds_root, job.cache_keys, os.path.join(sp.scratch, INBOX))
    job = job.model_copy(update=update)
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
        proc.stdin.write(job.model_copy(update={"nonce": nonce}).model_dump_json().encode())
        proc.stdin.close()
    except (BrokenPipeError, OSError):
        pass  # the child died at once; its exit status tells the story
    timed_out = False
    # a build job runs on the CPU; compile-only and prebuild jobs say device cpu (records.EvalJob)
    on_gpu = isinstance(job, EvalJob) and job.device.startswith("cuda") and not job.compile_only
    sampler = devmem.sampler() if on_gpu else None
    watching = (sampler.watch(job.device, proc.pid, sp.box.cgroup) if sampler is not None
                else contextlib.nullcontext())
    with watching as watch:
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            log.info("evaluation exceeded %.0f s: killing the worker's tree %d", timeout, proc.pid)
    # Always kill the tree: stragglers the candidate started must not outlive the evaluation.
    oom_kills = _end(sp)
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
        scratch=sp.scratch,
        confinement=sp.box.record,
        oom_kills=oom_kills,
        device_memory_bytes=watch.peak_bytes if watch is not None and watch.samples else None,
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
    """True if a fresh process can still run a kernel on `device` and read the result back, or if
    the driver answers that the device is full: a full GPU (other processes' memory, a context it
    has no room for) is busy, not gone."""
    try:
        proc = subprocess.run(
            [sys.executable, "-c", PROBE, device],
            capture_output=True, timeout=timeout, start_new_session=True,
        )
    except subprocess.TimeoutExpired:
        return False
    if proc.returncode == 0 and b"ok" in proc.stdout:
        return True
    from kernelwright.evaluate.candidate_load import says_out_of_memory

    return says_out_of_memory(proc.stderr[-4000:].decode("utf-8", "replace"))
