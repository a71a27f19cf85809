"""Several GPUs of one host under the ray executor (issue #21), on this GPU-less machine: Ray lends
GPUs it is told exist (it sets CUDA_VISIBLE_DEVICES per task, which is all a task sees of a GPU),
so where evaluations would run, and under which device lock, is checked for real; what runs on a
real GPU is the device tool's (docs/results/scaling.md)."""

from __future__ import annotations

import time
from types import SimpleNamespace

import pytest

from kernelwright.errors import BadInput
from kernelwright.evaluate import EvalRun


def test_which_gpus_evaluate_is_chosen_only_for_a_cluster_started_here(monkeypatch):
    pytest.importorskip("ray")
    from kernelwright.executors.ray import RayExecutor

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    with pytest.raises(BadInput, match="running cluster"):
        RayExecutor(address="10.0.0.1:6379", exclude_gpus=["0"])
    with pytest.raises(BadInput, match="slots_per_gpu"):
        RayExecutor(slots_per_gpu=0)
    with pytest.raises(BadInput, match="no GPU is left"):  # a one-GPU host whose GPU the model keeps
        RayExecutor(gpus=["0"], exclude_gpus=["0"])
    with pytest.raises(BadInput, match="cannot reach the Ray cluster at 127.0.0.1:1"):  # at once, not in minutes
        RayExecutor(address="127.0.0.1:1")


def test_a_model_with_a_gpu_of_its_own_keeps_it_out_of_a_local_cluster(tmp_path, monkeypatch):
    from kernelwright.study.runner import executor_options
    from kernelwright.study.spec import StudySpec

    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    spec = StudySpec(out=tmp_path, devices=["cuda"], executor="ray", slots=2, model_gpu="own")
    on_gpu1 = SimpleNamespace(device="cuda:1")
    assert executor_options(spec, on_gpu1) == {"address": None, "slots_per_gpu": 2, "exclude_gpus": ["1"]}
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,5")  # the driver's cuda:1 is the host's GPU 5
    assert executor_options(spec, on_gpu1)["exclude_gpus"] == ["5"]
    from kernelwright.executors.ray import host_gpus

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4, 5,-1,6")  # CUDA sees none past an invalid entry
    assert host_gpus() == ["4", "5"]
    with pytest.raises(BadInput, match="does not run on a GPU"):
        executor_options(spec, SimpleNamespace(device="cpu"))
    shared = StudySpec(out=tmp_path, devices=["cuda"], executor="ray", ray_address="auto")
    assert executor_options(shared, on_gpu1) == {"address": "auto", "slots_per_gpu": 1}
    with pytest.raises(ValueError, match="ray executor"):
        StudySpec(out=tmp_path, model_gpu="own")


@pytest.mark.slow  # a Ray instance (raylet)
def test_each_gpu_evaluates_under_its_own_lock_and_the_models_gpu_is_left_out(monkeypatch):
    """A local cluster of a three-GPU host whose GPU 0 holds the model, two evaluations a GPU:
    the evaluations land on GPUs 1 and 2 only, two at a time on each, and each sees its GPU as
    cuda:0 but locks the host's GPU (device.lock_path), so evaluations on different GPUs never wait
    for each other's timings."""
    ray = pytest.importorskip("ray")
    from kernelwright.executors.ray import RayExecutor

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    if ray.is_initialized():
        pytest.skip("another test's Ray is running in this process")
    executor = RayExecutor(gpus=["0", "1", "2"], exclude_gpus=["0"], slots_per_gpu=2)
    try:
        assert executor.layout().endswith("2 GPU(s), 2 evaluation(s) a GPU")

        @ray.remote
        def probe() -> tuple[str, str, float, float]:
            import os

            from kernelwright.device import lock_path

            start = time.monotonic()
            time.sleep(3)
            return os.environ["CUDA_VISIBLE_DEVICES"], lock_path("cuda:0").name, start, time.monotonic()

        wants = executor.eval_resources(EvalRun(device="cuda"))
        assert wants == {"num_cpus": 1, "num_gpus": 0.5}
        assert executor.eval_resources(EvalRun(device="cpu"))["num_gpus"] == 0
        # this machine has two cores: the probes ask for no CPU, so that only the GPUs limit them
        got = ray.get([probe.options(num_cpus=0, num_gpus=wants["num_gpus"]).remote() for _ in range(4)])
        assert sorted(g for g, _, _, _ in got) == ["1", "1", "2", "2"]
        assert {(g, lock) for g, lock, _, _ in got} == {("1", "cuda:1.lock"), ("2", "cuda:2.lock")}
        assert max(s for *_, s, _ in got) < min(e for *_, e in got)  # all four at once: two a GPU
    finally:
        executor.close()
    assert not ray.is_initialized()
