"""RayExecutor: a study's evaluations as Ray tasks, for users who outgrow one machine.

    kernelwright study run study.toml --executor ray --jobs 32     # RAY_ADDRESS=auto, or ray.init() locally

Per candidate, from the cell thread that produced it:
1. `precheck` in the driver (no code, syntax, static rules) and exact-duplicate linking
   (dedupe.py): neither needs a worker;
2. a candidate that builds an extension is prebuilt by a CPU task (`num_cpus=build_cpus`, no
   GPU): the build lands in that node's content-hash cache; a build error decides the verdict;
3. the evaluation is a task with `num_gpus=1` (CUDA) or `num_cpus=1` (CPU), placed preferably
   (soft node affinity) on the node that built it, so it finds the build; anywhere else it
   simply builds again (the cache key is the content, never a guess);
4. the result comes back to the waiting cell thread, which appends it to the study log.

A node that dies mid-job: Ray resubmits the task (`max_retries`) on another node. Only the
driver writes the log and only once per candidate, when `ray.get` returns, so a retried task can
never leave two lines. A candidate that raises is an outcome (a verdict), never a retry: the
remote functions return verdicts and raise only for the machinery.

Ray sets CUDA_VISIBLE_DEVICES for a task to the GPU it assigned, so inside the task the GPU is
always `cuda:0`. A GPU that stops answering after a candidate raises RemoteGPUError in the
driver: the cell is recorded as failed; taking that GPU out of the cluster is the operator's job.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field, replace
from typing import Any, Optional

from kernelwright.errors import GPUUnavailableError
from kernelwright.evaluate.evaluator import EvalConfig, Prepared, check_gpu_after, precheck, run_prepared
from kernelwright.executors.dedupe import LinkTable, result_key
from kernelwright.executors.pool import builds_extension
from kernelwright.records import EvalResult, Task


class RemoteGPUError(RuntimeError):
    """A GPU on a Ray node stopped answering after a candidate ran on it."""


def _node_id() -> str:
    import ray

    return ray.get_runtime_context().get_node_id()


def _prebuild(task: Task, pre: Prepared, cfg: EvalConfig, env: dict[str, str]) -> tuple[EvalResult, str]:
    cfg = replace(cfg, extra_env={**cfg.extra_env, **env})
    return run_prepared(task, pre, cfg, prebuild=True), _node_id()


def _evaluate(task: Task, pre: Prepared, cfg: EvalConfig) -> tuple[EvalResult, str]:
    cfg = replace(cfg)
    if cfg.device.startswith("cuda"):
        cfg.device = "cuda:0"  # the one GPU Ray gave this task (CUDA_VISIBLE_DEVICES)
    try:
        result = check_gpu_after(run_prepared(task, pre, cfg), cfg)
    except GPUUnavailableError as e:
        raise RemoteGPUError(f"on node {_node_id()}: {e}") from None
    return result, _node_id()


def _gpu_arch() -> str:
    import torch

    return "%d.%d" % torch.cuda.get_device_capability(0)


@dataclass
class RayStats:
    submitted: int = 0
    linked_duplicates: int = 0
    decided_before_ray: int = 0
    prebuilt: int = 0
    decided_at_build: int = 0
    evaluated: int = 0
    by_node: dict[str, int] = field(default_factory=dict)  # node id -> evaluations it returned


class RayExecutor:
    def __init__(self, address: Optional[str] = None, max_retries: int = 3, build_cpus: int = 2,
                 cuda_arch: Optional[str] = None, runtime_env: Optional[dict[str, Any]] = None) -> None:
        try:
            import ray
        except ImportError as e:  # the optional extra
            raise RuntimeError("the ray executor needs Ray: pip install 'kernelwright[ray]'") from e
        self._ray = ray
        self._owns_ray = not ray.is_initialized()
        if self._owns_ray:
            # address None: RAY_ADDRESS if set, else a local Ray on this machine
            ray.init(address=address, runtime_env=runtime_env, log_to_driver=False)
        self.max_retries, self.build_cpus = max_retries, build_cpus
        self._cuda_arch = cuda_arch
        self._prebuild = ray.remote(_prebuild)
        self._evaluate = ray.remote(_evaluate)
        self._arch_task = ray.remote(_gpu_arch)
        self._links = LinkTable()
        self._lock = threading.Lock()
        self.stats = RayStats()

    def evaluate(self, task: Task, candidate_text: str, cfg: Optional[EvalConfig] = None) -> EvalResult:
        cfg = replace(cfg or EvalConfig())
        self._count("submitted")
        pre = precheck(task, candidate_text, cfg)
        if isinstance(pre, EvalResult):
            self._count("decided_before_ray")
            return pre
        mine, work = self._links.claim(result_key(task, pre.code_hash, cfg))
        if work is None:
            self._count("linked_duplicates")
            return mine.result()
        try:
            work.set_result(self._run(task, pre, cfg))
        except BaseException as e:  # noqa: BLE001 - a later duplicate is evaluated afresh
            self._links.forget(result_key(task, pre.code_hash, cfg))
            work.set_exception(e)
        return mine.result()

    def close(self) -> None:
        if self._owns_ray:
            self._ray.shutdown()

    # -- internals -------------------------------------------------------------------------------

    def _count(self, name: str) -> None:
        with self._lock:
            setattr(self.stats, name, getattr(self.stats, name) + 1)

    def _arch(self) -> str:
        with self._lock:
            if self._cuda_arch is None:
                self._cuda_arch = self._ray.get(self._arch_task.options(num_gpus=1, num_cpus=0).remote())
            return self._cuda_arch

    def _run(self, task: Task, pre: Prepared, cfg: EvalConfig) -> EvalResult:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        ray, gpu = self._ray, cfg.device.startswith("cuda")
        strategy: Any = "DEFAULT"
        if not cfg.compile_only and builds_extension(pre.code):
            env = {"MAX_JOBS": str(self.build_cpus)}
            if gpu:
                # the build key includes the arch; builds never need the GPU itself
                env.update({"TORCH_CUDA_ARCH_LIST": self._arch(), "CUDA_VISIBLE_DEVICES": ""})
            built, node = ray.get(self._prebuild.options(num_cpus=self.build_cpus, max_retries=self.max_retries)
                                  .remote(task, pre, cfg, env))
            self._count("prebuilt")
            if built.verdict.build_failed:
                self._count("decided_at_build")
                return built
            strategy = NodeAffinitySchedulingStrategy(node_id=node, soft=True)
        try:
            result, node = ray.get(self._evaluate.options(
                num_cpus=1, num_gpus=1 if gpu and not cfg.compile_only else 0, max_retries=self.max_retries,
                scheduling_strategy=strategy).remote(task, pre, cfg))
        except RemoteGPUError:
            raise
        except ray.exceptions.RayTaskError as e:
            cause = e.cause if hasattr(e, "cause") else None
            if isinstance(cause, RemoteGPUError):
                raise cause from None
            raise
        with self._lock:
            self.stats.evaluated += 1
            self.stats.by_node[node] = self.stats.by_node.get(node, 0) + 1
        return result
