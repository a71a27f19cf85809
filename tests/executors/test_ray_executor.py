"""The ray executor on a real local Ray cluster (this machine, CPU resources only).

A small study (two cells, six candidates, real builds and sandboxed evaluations) runs through
the study runner with the ray executor installed; while a candidate is being built on the
cluster's only worker node, that node is removed (its raylet and workers killed) and another one
added. The job must be retried there, every candidate must get its verdict, and the study log
must hold each cell and each attempt exactly once."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

from kernelwright.evaluate import EvalRun
from kernelwright.records import Verdict
from kernelwright.study.log import ATTEMPTS, CELLS
from kernelwright.study.runner import CellJob, DeviceSlots, fixed_cell, run_jobs
from kernelwright.tasks import load_task
from tests.conftest import CANDIDATES, TASKS

pytestmark = [pytest.mark.slow, pytest.mark.build]

CPU = CANDIDATES / "cpu"
CELL_PLAN = {
    "cellA": [("torch_only.py", Verdict.NO_CUSTOM_KERNEL), ("correct_cpp.py", Verdict.CORRECT),
              ("correct_cpp.py", Verdict.CORRECT)],
    "cellB": [("wrong_cpp.py", Verdict.WRONG_OUTPUT), ("syntax_error.py", Verdict.SYNTAX_ERROR),
              ("torch_only.py", Verdict.NO_CUSTOM_KERNEL)],
}


def test_study_spec_knows_the_executors(tmp_path):
    from kernelwright.study.spec import StudySpecError, load_spec

    assert load_spec(None, {"out": str(tmp_path)}).executor == "local"
    assert load_spec(None, {"out": str(tmp_path), "executor": "ray"}).executor == "ray"
    with pytest.raises(StudySpecError, match="unknown executor"):
        load_spec(None, {"out": str(tmp_path), "executor": "slurm"})


@pytest.fixture(scope="module")
def cluster():
    ray = pytest.importorskip("ray", reason="Ray is not installed: pip install 'kernelwright[ray]' "
                                            "(scripts/setup.sh test installs it)")
    from ray.cluster_utils import Cluster

    # The head offers no CPU: every task runs on a worker node, which the test can kill.
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "object_store_memory": 80 * 2**20})
    ray.init(address=c.address, log_to_driver=False)
    try:
        yield c
    finally:
        ray.shutdown()
        c.shutdown()


def _judge_running_on(node) -> bool:
    """Whether a judge (the box that builds and evaluates candidates) runs under `node`'s
    raylet. The raylet starts the node's Ray workers and a worker starts its judges; a judge's
    command line and environment name none of the study's folders (the build cache and the task
    are not in its box), so its ancestry tells it from other sessions' judges."""
    raylet = node.all_processes["raylet"][0].process.pid
    parent: dict[int, int] = {}
    judges = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            parent[int(proc.name)] = int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
            if b"kernelwright.evaluate.judge" in (proc / "cmdline").read_bytes():
                judges.append(int(proc.name))
        except (OSError, IndexError, ValueError):
            continue
    for pid in judges:
        while pid > 1:
            if pid == raylet:
                return True
            pid = parent.get(pid, 0)
    return False


def _jobs(task, cfg) -> list[CellJob]:
    return [fixed_cell(f"cfg/ray_test/{name}", "ray_test", task, [(file, (CPU / file).read_text()) for file, _ in plan], cfg)
            for name, plan in CELL_PLAN.items()]


def test_a_study_survives_a_worker_node_dying_mid_job(cluster, tmp_path):
    from kernelwright.executors.base import opened
    from kernelwright.executors.ray import RayExecutor

    task = load_task(str(TASKS / "bias_relu.py"))
    cache = tmp_path / "cache"
    cfg = EvalRun.of(device="cpu", trials=3, warmup=3, iters=20, input_sets=4, timeout=300.0, cache_dir=str(cache))
    doomed = cluster.add_node(num_cpus=2, object_store_memory=80 * 2**20)
    cluster.wait_for_nodes()
    folder = tmp_path / "study"
    executor = RayExecutor(build_cpus=1, max_retries=3)
    outcome: dict = {}

    def study() -> None:
        with opened(executor):
            outcome["summary"] = run_jobs(_jobs(task, cfg), folder, DeviceSlots(["cpu"]), 2, executor)

    runner = threading.Thread(target=study)
    runner.start()
    deadline = time.monotonic() + 600
    while not _judge_running_on(doomed):  # a candidate is being built or evaluated on `doomed`
        assert runner.is_alive() and time.monotonic() < deadline, "no evaluation ever started on the cluster"
        time.sleep(0.2)
    rescuer = cluster.add_node(num_cpus=2, object_store_memory=80 * 2**20)
    cluster.remove_node(doomed, allow_graceful=False)
    runner.join(timeout=900)
    assert not runner.is_alive()

    summary = outcome["summary"]
    assert summary.done == 2 and summary.failed == 0 and summary.attempts == 6
    cells = [json.loads(line) for line in (folder / CELLS).read_text().splitlines()]
    attempts = [json.loads(line) for line in (folder / ATTEMPTS).read_text().splitlines()]
    assert sorted(c["key"] for c in cells) == sorted(f"cfg/ray_test/{n}" for n in CELL_PLAN)
    assert len({a["id"] for a in attempts}) == len(attempts) == 6  # nothing twice
    got = {a["id"]: a["eval"]["verdict"] for a in attempts}
    for name, plan in CELL_PLAN.items():
        for i, (_, verdict) in enumerate(plan):
            assert got[f"cfg/ray_test/{name}/t0/s{i}"] == verdict.value
    # The work that was running on the removed node was done again on the new one.
    assert executor.stats.by_node.get(rescuer.node_id, 0) >= 1
    assert set(executor.stats.by_node) <= {doomed.node_id, rescuer.node_id}
    # duplicates: correct_cpp twice in cellA, torch_only in both cells
    assert executor.stats.linked_duplicates == 2 and executor.stats.decided_before_ray == 1
