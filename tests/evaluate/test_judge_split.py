"""The judge and its runners (evaluate/judge.py, runner.py, remote.py, link.py, arena.py), part by part.

No sandbox and no build: a real runner process serves a real model through a real arena; the
link's limits are exercised on a real socket pair. The hostile end-to-end cases are in
test_forged_verdicts.py (and every CPU evaluator test runs through the judge).
"""

from __future__ import annotations

import socket
import struct

import pytest
import torch

from kernelwright.evaluate import link
from kernelwright.evaluate.arena import Arena
from kernelwright.evaluate.judge import Judge
from kernelwright.evaluate.link import Import, Reply
from kernelwright.evaluate.remote import RemoteRunner, RunnerGone, Served, _snapshot, init_request
from tests.conftest import TASKS


def test_a_reply_over_the_cap_is_refused_unread():
    judge_end, runner_end = socket.socketpair()
    with judge_end, runner_end:
        runner_end.sendall(struct.pack("!I", link.MAX_REPLY_BYTES + 1) + b"x" * 64)
        with pytest.raises(link.BadReply):
            link.recv(judge_end, link.MAX_REPLY_BYTES)


def test_a_reply_is_a_reply_or_nothing():
    with pytest.raises(link.BadReply):
        link.decode_reply(b'{"ok": true, "verdict_override": "correct"}')  # unknown field
    with pytest.raises(link.BadReply):
        link.decode_reply(b"\n{\"type\": \"result\"}\n")


@pytest.mark.parametrize("claimed,at_import,later", [
    ("correct", "runtime_error", "runtime_error"), ("faster", "runtime_error", "runtime_error"),
    ("wrong_output", "runtime_error", "runtime_error"), ("compile_error", "compile_error", "runtime_error"),
    # what withholds the verdict or blames the task is never the runner's to say
    ("infrastructure_error", "runtime_error", "runtime_error"), ("reference_error", "runtime_error", "runtime_error"),
    ("reference_out_of_memory", "runtime_error", "runtime_error"), ("cheat", "cheat", "cheat"),
    ("compiled", "runtime_error", "runtime_error")])
def test_a_runner_claims_only_losing_verdicts(claimed, at_import, later, tmp_path):
    from kernelwright.evaluate.evaluator import EvalRun, make_job
    from kernelwright.tasks import load_task

    job = make_job(load_task(str(TASKS / "bias_relu.py")), "", "h" * 64,
                   EvalRun.of(time=False, cache_dir=str(tmp_path)))
    judge = Judge(job, None, None)  # type: ignore[arg-type]
    reply = Reply(ok=False, kind="error", verdict=claimed, error="said so")
    assert judge._claim(reply, importing=True).verdict == at_import
    assert judge._claim(reply).verdict == later
    # nor in compile-only: the judge decides what was built itself (built.py)
    compile_only = Judge(job.model_copy(update={"compile_only": True}), None, None)  # type: ignore[arg-type]
    assert compile_only._claim(Reply(ok=False, kind="error", verdict="compiled"), importing=True).verdict == \
        "runtime_error"


def test_the_arena_is_shared_memory_and_places_calls_apart():
    arena = Arena.create(4096)
    try:
        other = Arena(arena.fd, arena.nbytes)  # a second mapping of the same memfd, as a runner's
        refs = [arena.place(torch.float32, (4, 8)) for _ in range(4)]
        assert len({r.offset for r in refs}) == 4
        arena.view(refs[1]).copy_(torch.arange(32.0).reshape(4, 8))
        assert torch.equal(other.view(refs[1]), torch.arange(32.0).reshape(4, 8))
        with pytest.raises(ValueError):
            arena.view(refs[0].model_copy(update={"offset": arena.nbytes - 8}))
    finally:
        arena.close()


def test_a_snapshot_is_an_exact_copy():
    for shape in [(0,), (1,), (5, 3), (64, 257)]:
        v = torch.randn(shape)
        snap = _snapshot(v)
        assert torch.equal(snap, v) and (v.numel() == 0 or snap.data_ptr() != v.data_ptr())


@pytest.fixture(scope="module")
def reference_runner(tmp_path_factory):
    """A real runner holding bias_relu's reference, as the judge starts it (unconfined here)."""
    source = (TASKS / "bias_relu.py").read_text()
    runner = RemoteRunner.spawn("the reference's runner")
    workdir = tmp_path_factory.mktemp("runner")
    assert runner.load(Import(role="reference", source=source, workdir=str(workdir), device="cpu")).ok
    assert runner.request(init_request(7, [256])).ok
    yield runner
    runner.kill()


def _bias_relu(seed: int):
    from kernelwright.evaluate.work import load_reference

    module, _ = load_reference((TASKS / "bias_relu.py").read_text())
    torch.manual_seed(seed)
    return module.Model(256)


def test_a_runner_serves_calls_through_its_arena(reference_runner):
    model = _bias_relu(7)  # the same seed: the same bias
    served = Served(reference_runner, like=[torch.empty(64, 256)])
    for _ in range(3):
        x = torch.randn(64, 256)
        staged = served.stage([x])
        assert torch.isnan(staged.out_views[0]).all()  # pre-filled: nothing unwritten passes
        out = served.run(staged)
        assert torch.equal(out[0], model(x).detach())
        assert torch.equal(served.inputs_after(staged)[0], x)


def test_a_null_call_pays_the_copies_and_runs_nothing(reference_runner):
    """The timing protocol's null call: the inputs are written into the arena and the outputs copied
    out as in a real call, but no forward runs, so the pre-filled output buffers come back unwritten."""
    served = Served(reference_runner, like=[torch.empty(64, 256)])
    x = torch.randn(64, 256)
    staged = served.stage([x])
    out = served.run_null(staged)
    assert torch.isnan(out[0]).all()
    assert torch.equal(served.inputs_after(staged)[0], x)
    assert not torch.isnan(served.run(staged)[0]).any()  # the runner still serves real calls


def test_a_net_ratio_needs_a_forward_that_stands_out_from_the_protocol():
    from kernelwright.measure.timing import net_ratio

    assert net_ratio(3.0, 2.0, 1.0) == 2.0  # 2 ms of forward against 1 ms
    assert net_ratio(3.0, 1.01, 1.0) is None  # 0.01 ms of forward beside 1 ms of protocol: noise
    assert net_ratio(3.0, 2.0, None) is None and net_ratio(None, 2.0, 1.0) is None
    assert net_ratio(3.5, 2.0, 1.0, base_protocol_ms=1.5) == 2.0  # each side net of its own loop's


def test_an_output_that_does_not_fit_comes_back_as_a_placeholder(reference_runner):
    from kernelwright.measure.compare import compare, tolerance_for

    ref = torch.empty(64, 128)  # buffers shaped for another output than the runner's
    out, reply = reference_runner.run(reference_runner.stage([torch.randn(64, 256)], [ref]))
    assert not reply.ok and reply.kind == "spec" and out[0].device.type == "meta"
    result = compare([ref], out, tolerance_for([ref], None, None), 0)
    assert result.kind == "shape" and "(64, 256)" in result.message


def test_a_dead_runner_is_named_with_its_signal():
    runner = RemoteRunner.spawn("the candidate's process")
    runner.proc.kill()
    with pytest.raises(RunnerGone) as e:
        runner.request(link.Checks())
    assert "SIGKILL" in e.value.how
    runner.kill()


def test_the_candidates_runner_holds_only_its_socket(tmp_path):
    """Started as the sandbox starts the judge: the candidate's runner (PID 2 of its own namespace,
    below a stand-in and the namespace's init, isolation.py) holds stdio and one socket, not the
    result pipe; the stand-in and the init hold nothing. (That it cannot open the judge's descriptors
    or memory either is test_forged_verdicts.py's forge_reach_judge, inside a real sandbox.)"""
    import os
    import subprocess
    import sys
    import time

    from kernelwright.confine import descendants
    from kernelwright.evaluate.evaluator import _PKG_ROOT
    from kernelwright.evaluate.leftovers import _ns_pids

    read_fd, write_fd = os.pipe()
    judge = subprocess.Popen([sys.executable, "-m", "kernelwright.evaluate.judge", str(write_fd)],
                             stdin=subprocess.PIPE, pass_fds=(write_fd,), cwd=tmp_path,
                             env={**os.environ, "PYTHONPATH": _PKG_ROOT})
    os.close(write_fd)

    def held(pid: int) -> list[str]:
        return sorted(os.readlink(f"/proc/{pid}/fd/{n}").split(":")[0]
                      for n in os.listdir(f"/proc/{pid}/fd") if int(n) > 2)

    try:
        deadline = time.monotonic() + 120
        tree: list[int] = []
        while time.monotonic() < deadline and len(tree) < 3:
            tree = descendants(judge.pid)
            time.sleep(0.2)
        assert len(tree) == 3, "the judge started no isolated runner"
        time.sleep(1)  # each closes what it must not hold right after it starts
        assert judge.poll() is None
        runner = [p for p in tree if _ns_pids(p)[-1] == 2]
        assert len(runner) == 1 and len(_ns_pids(runner[0])) == len(_ns_pids(judge.pid)) + 1
        kinds = held(runner[0])
        assert "pipe" not in kinds and kinds.count("socket") == 1, kinds
        assert all(held(p) == [] for p in tree if p != runner[0])
    finally:
        judge.kill()
        judge.wait()
        os.close(read_fd)


def test_what_crosses_the_sandbox_is_a_typed_record(tmp_path):
    """The job the evaluator sends (EvalJob, or the builder's BuildJob) and the judge's closing
    message (JudgeResult) are records: the job reads back as itself, a build job by its kind, and a
    closing message that is not a result record is no result at all (never a verdict)."""
    from kernelwright.evaluate.config import EVAL_DEFAULTS
    from kernelwright.evaluate.evaluator import EvalRun, make_job
    from kernelwright.evaluate.sandbox import SandboxOutcome
    from kernelwright.records import BuildJob, BuildRequest, EvalJob, JudgeResult, parse_job
    from kernelwright.tasks import load_task

    task = load_task(str(TASKS / "bias_relu.py"))
    job = make_job(task, "import torch\n", "h" * 64, EvalRun.of(cache_dir=str(tmp_path)))
    assert isinstance(job, EvalJob) and job.device == "cpu" and job.timing.iters == EVAL_DEFAULTS.iters
    assert parse_job(job.model_dump_json()) == job
    build = BuildJob(arch="", builds=[BuildRequest(key="k", arguments={"name": "m", "cpp_sources": "int f();"})])
    assert parse_job(build.model_dump_json()) == build
    assert make_job(task, "x = 1\n", "h" * 64, EvalRun.of(device="cuda", compile_only=True)).device == "cpu"

    def outcome(*messages):
        return SandboxOutcome(messages=list(messages), returncode=0, timed_out=False, wall_s=0.0, output="",
                              output_bytes=0)

    good = outcome({"type": "stage", "name": "setup", "seconds": 0.1, "ok": True},
                   {"type": "result", "verdict": "correct", "error": None, "fields": {"custom_kernel": True}})
    assert good.final == JudgeResult(verdict="correct", fields={"custom_kernel": True})
    assert outcome({"type": "result", "error": "no verdict"}).final is None
    assert outcome({"type": "stage", "name": "setup", "seconds": 0.1, "ok": True}).final is None
