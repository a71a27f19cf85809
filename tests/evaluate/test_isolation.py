"""The three processes of an evaluation kept apart (evaluate/isolation.py, leftovers.py, runner.py).

The candidate's runner runs in PID and mount namespaces of its own with a fresh /proc, so it can
neither signal, re-prioritise, pin nor observe the judge or the reference's runner; the judge
ignores interrupts; leftover work (threads, processes) is found by the judge from /proc, never
asked of the runner; the runner's request loop is bound before the candidate is imported.

The hostile fixtures (tests/fixtures/candidates/cpu/hostile/iso_*.py) are evaluated with static
rules off, since the point is the runtime defence. Those aimed at another process compute the right
answer only once their attack reached one (so a defence that failed would read `correct`); the
leftover ones compute right and leave work running. All share correct_cpp.py's extension (one
build per session).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import uuid

import pytest

from kernelwright.evaluate import evaluate, link
from kernelwright.evaluate.leftovers import Leftovers, _ns_pids
from kernelwright.evaluate.remote import RemoteRunner
from kernelwright.records import Verdict
from kernelwright.tasks import load_task
from tests.conftest import CANDIDATES, TASKS
from tests.evaluate.test_confinement import MECHANISMS, _processes_with

# (fixture, verdicts it may earn, words the error must hold)
HOSTILE = [
    ("iso_sigstop_reference.py", {Verdict.WRONG_OUTPUT, Verdict.CHEAT}, ""),
    ("iso_pin_judge.py", {Verdict.WRONG_OUTPUT}, "differs from the reference"),
    ("iso_read_schedstat.py", {Verdict.WRONG_OUTPUT}, "differs from the reference"),
    ("iso_sigint_judge.py", {Verdict.WRONG_OUTPUT}, "differs from the reference"),
    ("iso_rebind_runner.py", {Verdict.WRONG_OUTPUT}, "differs from the reference"),
    ("iso_clone_parent.py", {Verdict.CHEAT}, "child process"),
    ("iso_thread_after_forward.py", {Verdict.CHEAT}, "between calls"),
]


@pytest.fixture
def hostile(fast_cfg, monkeypatch):
    """Evaluates a fixture with static rules off through the real evaluator (the session's build
    cache: one build of the shared extension), and checks that no process of it outlived it."""
    task = load_task(str(TASKS / "bias_relu.py"))

    def run(name: str, mechanism: str):
        monkeypatch.setenv("KERNELWRIGHT_CONFINE", mechanism)
        mark = uuid.uuid4().hex
        cfg = fast_cfg(static_checks=False, extra_env={"KW_CONFINE_TEST": mark})
        result = evaluate(task, (CANDIDATES / "cpu" / name).read_text(), cfg)
        assert _processes_with(mark) == [], "a process of the evaluation outlived it"
        return result

    return run


@pytest.mark.build
@pytest.mark.skipif(not MECHANISMS, reason="neither bubblewrap nor unshare works here")
@pytest.mark.parametrize("name,verdicts,words", HOSTILE, ids=[h[0] for h in HOSTILE])
def test_the_candidate_cannot_reach_the_other_processes(hostile, name, verdicts, words):
    result = hostile("hostile/" + name, MECHANISMS[0])  # timed: the reference's runner is there to attack
    assert result.verdict in verdicts, (result.verdict, result.error, result.output_tail)
    assert words in (result.error or ""), result.error
    assert not result.correct and result.speedup is None
    if result.verdict == Verdict.WRONG_OUTPUT:  # it got as far as its calls, in its own namespace
        assert result.confinement.runner_isolated and result.confinement.trusted


@pytest.mark.build
@pytest.mark.skipif(not MECHANISMS, reason="neither bubblewrap nor unshare works here")
def test_an_honest_candidate_stays_correct(hostile):
    for mechanism in MECHANISMS:
        result = hostile("correct_cpp.py", mechanism)
        assert result.verdict == Verdict.CORRECT, (mechanism, result.error, result.output_tail)
        assert result.speedup is not None and result.confinement.trusted and result.confinement.runner_isolated


def test_an_isolated_runner_sees_only_its_own_namespace(tmp_path):
    """A candidate's import that looks around from the runner: it is PID 2, /proc lists its
    namespace only, and its parent (the namespace's init) is not the judge."""
    from kernelwright.evaluate.runner import start

    runner = RemoteRunner(*start(isolate=True), "the candidate's process", watched=True)
    try:
        probe = ("import os\n"
                 "raise RuntimeError(repr((os.getpid(), os.getppid(), "
                 "sorted(int(p) for p in os.listdir('/proc') if p.isdigit()))))\n")
        reply = runner.load(link.Import(source=probe, workdir=str(tmp_path), device="cpu"))
        assert not reply.ok and "(2, 1, [1, 2])" in (reply.error or ""), reply.error
        runner.leftovers.others()
        assert runner.leftovers.isolated
        assert len(_ns_pids(runner.leftovers.runner)) == len(_ns_pids(os.getpid())) + 1
    finally:
        runner.kill()


def test_the_judge_ignores_interrupts(tmp_path):
    """SIGINT and SIGTERM, from anywhere, once it has started its runners (before, no candidate
    code exists): the judge goes on waiting for its job."""
    from kernelwright.evaluate.evaluator import _PKG_ROOT

    read_fd, write_fd = os.pipe()
    judge = subprocess.Popen([sys.executable, "-m", "kernelwright.evaluate.judge", str(write_fd)],
                             stdin=subprocess.PIPE, pass_fds=(write_fd,), cwd=tmp_path,
                             env={**os.environ, "PYTHONPATH": _PKG_ROOT})
    os.close(write_fd)
    try:
        from kernelwright.confine import descendants

        deadline = time.monotonic() + 120
        while len(descendants(judge.pid)) < 3 and time.monotonic() < deadline:  # its runner started
            time.sleep(0.2)
        assert judge.poll() is None
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            judge.send_signal(sig)
        time.sleep(1)
        assert judge.poll() is None
    finally:
        judge.kill()
        judge.wait()
        os.close(read_fd)


def test_leftovers_are_read_from_proc():
    """A tree whose root sleeps, with a child that spins: the child is a leftover process and its
    CPU between a mark and a check is leftover work."""
    root = subprocess.Popen(["sh", "-c", "sh -c 'while :; do :; done' & wait"])
    try:
        deadline = time.monotonic() + 10
        watch = Leftovers(root.pid)
        while not watch.others() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert watch.isolated is False and watch.runner == root.pid and len(watch.others()) == 1
        watch.mark()
        time.sleep(0.2)
        reasons = watch.check()
        assert any("child process" in r for r in reasons) and any("between calls" in r for r in reasons), reasons
    finally:
        for pid in Leftovers(root.pid).others():
            os.kill(pid, signal.SIGKILL)
        root.kill()
        root.wait()


def test_an_idle_tree_is_not_leftover_work():
    root = subprocess.Popen(["sleep", "30"])
    try:
        watch = Leftovers(root.pid)
        watch.mark()
        time.sleep(0.2)
        assert watch.check() == []
    finally:
        root.kill()
        root.wait()


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="one core: nothing to narrow")
def test_free_threads_ignore_a_later_affinity():
    """The judge's thread count comes from the cores it had when timing.py was imported, not from
    an affinity someone narrowed since."""
    import torch

    from kernelwright.measure import timing

    before, threads = os.sched_getaffinity(0), torch.get_num_threads()
    torch.set_num_threads(len(before))
    try:
        os.sched_setaffinity(0, {min(before)})
        assert timing.free_cpu_threads(timing.MachineLoad(0.0, 0)) == len(before)
    finally:
        os.sched_setaffinity(0, before)
        torch.set_num_threads(threads)


def test_the_isolation_fixtures_share_one_extension():
    """Each fixture is a whole candidate program, so each repeats correct_cpp.py's extension, and
    must repeat it exactly: one build serves all of them and the honest control."""
    def block(text: str) -> str:
        return text[text.index('CPP_SOURCE = r"""'):text.index("functions=[")]

    control = block((CANDIDATES / "cpu" / "correct_cpp.py").read_text())
    for name, _, _ in HOSTILE:
        assert block((CANDIDATES / "cpu" / "hostile" / name).read_text()) == control, name
