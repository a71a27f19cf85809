"""OS-level containment (confine.py) against hostile candidates, through the real evaluator.

Each fixture in tests/fixtures/candidates/cpu/hostile/ attacks from inside a real worker process:
files of the study (task file, candidate file, cells.jsonl), a secret in the real home, the build
cache (poisoned, or a library planted for promotion), a local TCP service, secrets in the
environment, processes that outlive the evaluation (daemons, compilers), a shell command smuggled
through the compiler flags, the scratch filled or made 5,000 folders deep, the device's lock
held. After each: its expected verdict, no process of it left, no file outside its scratch
changed, no scratch folder left on the host, no secret or task source in any field of the record.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import replace
from pathlib import Path

import pytest

from kernelwright import confine
from kernelwright.errors import ConfinementError
from kernelwright.evaluate import buildcache
from kernelwright.evaluate.buildspec import literal_builds
from kernelwright.evaluate.evaluator import allowed_env, evaluate
from kernelwright.records import Verdict
from kernelwright.tasks import load_task
from tests.conftest import CANDIDATES, TASKS

HOSTILE = CANDIDATES / "cpu" / "hostile"
SECRET = "sk-kw-test-" + uuid.uuid4().hex
# argv markers of the processes the fixtures leave behind (sleep's argument)
MARKERS = ("424241.5", "424244.5", "424245.5")
MECHANISMS = [m for m in ("bwrap", "unshare") if getattr(confine.offer(), m)]

pytestmark = pytest.mark.skipif(not MECHANISMS, reason="neither bubblewrap nor unshare works here")


# -- what the test watches ------------------------------------------------------------------------

def _tree_digest(root: Path) -> dict[str, str]:
    out = {}
    for folder, _dirs, files in os.walk(root):
        for name in files:
            p = Path(folder) / name
            out[str(p.relative_to(root))] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def _processes_with(marker: str) -> list[int]:
    """Running processes whose command line or environment holds `marker`."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid() or not confine.alive(int(entry)):
            continue
        for part in ("cmdline", "environ"):
            try:
                if marker.encode() in Path(f"/proc/{entry}/{part}").read_bytes():
                    found.append(int(entry))
                    break
            except OSError:
                pass
    return found


class Listener:
    """A local TCP service; counts the connections it accepted."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.sock.settimeout(0.2)
        self.accepted = 0
        self._stop = False
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.accepted += 1
            conn.close()

    def close(self) -> None:
        self._stop = True
        self._thread.join()
        self.sock.close()


@pytest.fixture
def study(request):
    """A study's files where the hostile fixtures look for them (/var/tmp/kw-victims-*). The
    unconfined test's attack lands on every such folder: it holds the lock alone (test runs in
    other processes wait), the confined tests share it."""
    with open("/var/tmp/kw-victims.lock", "a") as lock:
        unconfined = "unconfined" in request.node.name
        fcntl.flock(lock, fcntl.LOCK_EX if unconfined else fcntl.LOCK_SH)
        folder = Path(tempfile.mkdtemp(prefix="kw-victims-", dir="/var/tmp"))
        shutil.copy(TASKS / "bias_relu.py", folder / "task.py")
        (folder / "candidate.py").write_text("# the candidate file as the study stored it\n")
        (folder / "cells.jsonl").write_text('{"cell": 1}\n')
        yield folder
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def home_secret():
    """A secret file in the evaluating user's real home, as a careless user keeps one."""
    path = Path.home() / f".kw-test-secret-{uuid.uuid4().hex}"
    path.write_text(SECRET)
    yield path
    path.unlink()


@pytest.fixture
def watched(study, fast_cfg, monkeypatch, tmp_path, home_secret):
    """Runs a hostile fixture and checks what must hold after any of them."""
    monkeypatch.setenv("KW_TEST_API_KEY", SECRET)
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    scratches = tmp_path / "scratches"  # where this test's evaluations make their scratch folders
    scratches.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratches))
    cache = tmp_path / "cache"
    planted = cache / "builds" / ("a" * 24)
    planted.mkdir(parents=True)
    (planted / f"{'b' * 24}.json").write_text(json.dumps({"artifact": "other.so", "sha256": "0" * 64}))
    (planted / ("b" * 24)).mkdir()
    (planted / ("b" * 24) / "other.so").write_bytes(b"another candidate's library")
    listener = Listener()
    task = load_task(str(study / "task.py"))

    def run(name: str, mechanism: str, **overrides):
        monkeypatch.setenv("KERNELWRIGHT_CONFINE", mechanism)
        mark = uuid.uuid4().hex
        before_study, before_cache = _tree_digest(study), _tree_digest(cache)
        cfg = fast_cfg(static_checks=False, cache_dir=str(cache), extra_env={"KW_CONFINE_TEST": mark}, **overrides)
        result = evaluate(task, (HOSTILE / name).read_text(), cfg)
        assert _processes_with(mark) == [], "a process of the evaluation outlived it"
        # the markers this candidate's text holds: another test's fixture may be running on the
        # other xdist worker right now, with its own
        for marker in (m for m in MARKERS if m in (HOSTILE / name).read_text()):
            assert _processes_with(marker) == [], f"a process the candidate started ({marker}) outlived it"
        assert _tree_digest(study) == before_study, "a file of the study changed"
        after = _tree_digest(cache)
        # the only change the cache may see: the trusted builder's builds under the keys the parent
        # computed from the candidate's literal load_inline arguments (nothing else)
        keys = {buildcache.build_key(b.arguments, os.environ.get("TORCH_CUDA_ARCH_LIST", ""),
                                     buildcache.torch_version())
                for b in literal_builds((HOSTILE / name).read_text()).builds}
        own = tuple(f"builds/{buildcache.SHARED}/{k}" for k in keys) or ("\0",)
        assert {k: v for k, v in after.items() if not k.startswith(own)} == before_cache
        assert listener.accepted == 0, "the candidate reached a local TCP service"
        assert SECRET not in result.model_dump_json(), "a secret reached the record"
        assert result.confinement is not None and result.confinement.trusted
        assert result.confinement.mechanism == mechanism
        assert "learned per-feature bias" not in result.model_dump_json(), "the task's source reached the record"
        assert os.listdir(scratches) == [], "a scratch folder was left on the host"
        return result

    yield run
    listener.close()


# -- Python hostiles: cheap, run under every mechanism this machine offers ----------------------------

PYTHON_CASES = [
    ("write_victims.py", Verdict.RUNTIME_ERROR, "no file of the study is visible"),
    ("poison_cache.py", Verdict.RUNTIME_ERROR, "Read-only file system"),
    ("connect_tcp.py", Verdict.RUNTIME_ERROR, "no local service reachable"),
    ("env_secret.py", Verdict.RUNTIME_ERROR, "exfiltrated"),
    ("double_fork_daemon.py", Verdict.CHEAT, "child process"),
    # the box holds only what the evaluation needs: each of these does its harm where it can and is
    # otherwise honest PyTorch, so `no_custom_kernel` with nothing on the host (checked for every
    # case) is right
    ("read_outside.py", Verdict.NO_CUSTOM_KERNEL, None),
    ("plant_library.py", Verdict.NO_CUSTOM_KERNEL, None),
    ("deep_tree.py", Verdict.NO_CUSTOM_KERNEL, None),
    ("hold_device_lock.py", Verdict.NO_CUSTOM_KERNEL, None),
]


@pytest.mark.parametrize("mechanism", MECHANISMS)
@pytest.mark.parametrize("name,expected,why", PYTHON_CASES, ids=[c[0] for c in PYTHON_CASES])
def test_python_hostile_is_contained(watched, mechanism, name, expected, why):
    result = watched(name, mechanism)
    assert result.verdict == expected, (result.error, result.output_tail)
    assert why is None or why in (result.error or ""), result.error
    if name == "read_outside.py":
        assert "read outside the box: nothing" in (result.output_tail or ""), result.output_tail
    if name == "hold_device_lock.py":
        assert "the lock folder was absent" in (result.output_tail or ""), result.output_tail
        assert result.speedup is not None and result.device_lock_wait_s is not None  # the judge held the real lock


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_the_scratch_has_a_quota(watched, mechanism):
    """1.5 GB written into a 64 MB scratch (and /tmp, /dev/shm) stops at the quota; the inode
    limit holds where the mechanism sets one (the unshare path: bubblewrap sets sizes only)."""
    result = watched("fill_scratch.py", mechanism, scratch_mb=64)
    assert result.verdict == Verdict.NO_CUSTOM_KERNEL, (result.error, result.output_tail)
    tail = result.output_tail or ""
    stops = [int(mb) for mb in re.findall(r"stopped at (\d+) MB: No space left on device", tail)]
    assert len(stops) == 3 and all(mb <= 64 for mb in stops), tail
    assert result.confinement.scratch_limit_mb == 64
    if mechanism == "unshare":
        made = int(re.search(r"making files stopped at (\d+)", tail).group(1))
        assert made < confine.SCRATCH_INODES, tail


def test_cleanup_survives_a_tree_deeper_than_recursion(tmp_path):
    top = tmp_path / "scratch"
    top.mkdir()
    here = os.getcwd()
    os.chdir(top)
    try:
        for _ in range(5000):
            os.mkdir("d")
            os.chdir("d")
    finally:
        os.chdir(here)
    confine.remove_tree(str(top))
    assert not top.exists()


# -- C++ hostiles: each builds once -------------------------------------------------------------------

CPP_CASES = [
    ("cpp_write_victims.py", Verdict.RUNTIME_ERROR, "no file of the study is visible"),
    ("cpp_connect.py", Verdict.RUNTIME_ERROR, "no local service reachable"),
    ("cpp_daemon.py", Verdict.CHEAT, "child process"),
    ("cflags_shell.py", Verdict.CORRECT, None),
]


@pytest.mark.build
@pytest.mark.parametrize("name,expected,why", CPP_CASES, ids=[c[0] for c in CPP_CASES])
def test_cpp_hostile_is_contained(watched, name, expected, why):
    result = watched(name, MECHANISMS[0])
    assert result.verdict == expected, (result.error, result.output_tail)
    assert why is None or why in (result.error or ""), result.error


@pytest.mark.build  # ninja starts (the flag's shell command hangs before the compiler)
@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_a_compiler_hanging_in_its_own_session_dies_with_the_timeout(watched, mechanism):
    # the shell command in the flags hangs before the compiler starts: no build happens
    result = watched("cflags_sleep.py", mechanism, timeout=20.0)
    # its load_inline arguments are literal: the trusted builder runs the hanging compile
    assert result.verdict == Verdict.TIMEOUT and "'shared_build'" in result.error


def test_without_a_cgroup_the_limits_are_rlimits_and_hold(watched, monkeypatch):
    # the H200's case: no delegable cgroup. RLIMIT_DATA refuses the allocation before any page is used.
    real = confine.offer()
    monkeypatch.setattr(confine, "offer", lambda: replace(real, cgroup=None))
    result = watched("memory_hog.py", MECHANISMS[0])
    held = result.confinement
    assert held.memory_via == "rlimit_data" and held.process_via == "rlimit_nproc" and held.trusted
    assert result.verdict == Verdict.OUT_OF_MEMORY and "MemoryError" in result.error


# -- without containment the same fixtures do harm: the checks above can fail -----------------------

def test_unconfined_runs_are_marked_untrusted_and_the_attack_lands(study, fast_cfg, monkeypatch):
    monkeypatch.setenv("KERNELWRIGHT_CONFINE", "none")
    task = load_task(str(study / "task.py"))
    text = (HOSTILE / "write_victims.py").read_text()
    with pytest.raises(ConfinementError, match="network"):
        evaluate(task, text, fast_cfg(static_checks=False))
    before = _tree_digest(study)
    result = evaluate(task, text, fast_cfg(static_checks=False, unconfined=True))
    assert result.confinement.trusted is False and "filesystem" in result.confinement.missing
    assert result.confinement.env_scrubbed and result.verdict == Verdict.NO_CUSTOM_KERNEL
    assert _tree_digest(study) != before  # what the confined runs prevent


def test_the_worker_dies_with_the_evaluating_process(fast_cfg, tmp_path):
    """Kill the process that runs evaluate() while its candidate spins: the worker must go too."""
    mark = uuid.uuid4().hex
    program = (
        "import sys\n"
        "from kernelwright.evaluate import EvalRun, evaluate\n"
        "from kernelwright.tasks import load_task\n"
        f"task = load_task({str(TASKS / 'bias_relu.py')!r})\n"
        f"text = open({str(CANDIDATES / 'cpu' / 'spin_python.py')!r}).read()\n"
        f"evaluate(task, text, EvalRun.of(timeout=600, static_checks=False, cache_dir={str(tmp_path)!r},\n"
        f"         extra_env={{'KW_CONFINE_TEST': {mark!r}}}))\n"
    )
    parent = subprocess.Popen([sys.executable, "-c", program], env={**os.environ, "PYTHONPATH": str(Path.cwd())},
                              start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not _processes_with(mark):
            time.sleep(0.2)
        assert _processes_with(mark), "the worker never started"
        time.sleep(5)  # torch imported, the candidate spinning in forward
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and _processes_with(mark):
            time.sleep(0.1)
        assert _processes_with(mark) == [], "the worker outlived the evaluating process"
    finally:
        if parent.poll() is None:
            os.kill(parent.pid, signal.SIGKILL)
            parent.wait()


# -- the pieces on their own ----------------------------------------------------------------------------

def test_the_environment_is_an_allowlist():
    env = allowed_env({"PATH": "/bin", "LC_ALL": "C", "TORCH_CUDA_ARCH_LIST": "9.0", "OPENAI_API_KEY": "x",
                       "HF_TOKEN": "x", "KERNELWRIGHT_API_KEY": "x", "AWS_SECRET_ACCESS_KEY": "x", "HOME": "/root",
                       "SSH_AUTH_SOCK": "/run/x", "PYTHONPATH": "/src"})
    assert env == {"PATH": "/bin", "LC_ALL": "C", "TORCH_CUDA_ARCH_LIST": "9.0", "PYTHONPATH": "/src"}


def test_openmp_threads_sleep_between_the_judges_calls(monkeypatch):
    """The worker's environment (the judge's and its runners') makes OpenMP threads sleep after a
    parallel region, whatever the caller's setting: spinning threads of one process took the cores
    another's timed call needed. An evaluation's extra_env still decides."""
    from kernelwright.evaluate import EvalRun
    from kernelwright.evaluate.evaluator import _environment

    monkeypatch.setenv("OMP_WAIT_POLICY", "ACTIVE")
    assert _environment(EvalRun(device="cpu"), "cpu")["OMP_WAIT_POLICY"] == "PASSIVE"
    cfg = EvalRun.of(device="cpu", extra_env={"OMP_WAIT_POLICY": "ACTIVE"})
    assert _environment(cfg, "cpu")["OMP_WAIT_POLICY"] == "ACTIVE"


def test_promotion_takes_plain_libraries_once_and_lookup_refuses_a_changed_one(tmp_path):
    scratch, root = tmp_path / "scratch", tmp_path / "root"
    good = scratch / "builds" / ("1" * 24)
    good.mkdir(parents=True)
    (good / "ext.so").write_bytes(b"library")
    (good / "ext.o").write_bytes(b"object")
    linked = scratch / "builds" / ("2" * 24)
    linked.mkdir()
    (tmp_path / "host_file").write_text("not the builder's")
    (linked / "ext.so").symlink_to(tmp_path / "host_file")
    (scratch / "builds" / "not-a-key").mkdir()
    keys = {"1" * 24, "2" * 24, "not-a-key", "3" * 24}
    assert buildcache.promote(str(scratch), str(root), keys) == ["1" * 24]
    entry = root / buildcache.SHARED / ("1" * 24)
    assert buildcache.lookup(str(root), buildcache.SHARED, "1" * 24, "ext") == (str(entry), "hit")
    # written once: another build of the same key (a different product) does not replace it
    (good / "ext.so").write_bytes(b"another product")
    assert buildcache.promote(str(scratch), str(root), keys) == []
    assert (entry / "ext.so").read_bytes() == b"library"
    # changed on the host after promotion: refused, and replaced as a whole by the next build
    (entry / "ext.so").write_bytes(b"poisoned")
    assert buildcache.lookup(str(root), buildcache.SHARED, "1" * 24, "ext") == (None, "rejected")
    assert buildcache.promote(str(scratch), str(root), keys) == ["1" * 24]
    assert buildcache.lookup(str(root), buildcache.SHARED, "1" * 24, "ext")[1] == "hit"
    assert sorted(os.listdir(root / buildcache.SHARED)) == ["1" * 24]


@pytest.mark.build
def test_a_poisoned_shared_entry_is_refused_and_rebuilt_by_the_builder(fast_cfg, tmp_path):
    task = load_task(str(TASKS / "bias_relu.py"))
    text = (CANDIDATES / "cpu" / "correct_cpp.py").read_text()
    cfg = fast_cfg(cache_dir=str(tmp_path), time=False)
    first = evaluate(task, text, cfg)
    assert first.verdict == Verdict.CORRECT and first.builds[0]["cache_scope"] == "shared"
    (lib,) = (tmp_path / "builds" / buildcache.SHARED).glob("*/*.so")
    good = lib.read_bytes()
    lib.write_bytes(good + b"\0")  # changed after promotion, by anything
    second = evaluate(task, text, cfg)
    # refused by the parent's check, built again by the trusted builder, loaded by the worker
    assert next(s for s in second.stages if s.name == "shared_build").detail.startswith("0 cached, 1 built")
    assert second.verdict == Verdict.CORRECT and second.builds[0]["cache"] == "hit"
    assert buildcache.sha256_file(str(lib)) == json.loads((lib.parent / buildcache.INDEX).read_text())["sha256"]
