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
always `cuda:0`; its device lock and memory ledger are keyed by the GPU the host sees
(device.lock_key), so evaluations on several GPUs of one host overlap, and `slots_per_gpu` > 1
evaluations that share a GPU (a fraction of it each, in Ray's terms) take turns for their timings
as the local pool's slots do. A GPU that stops answering after a candidate raises RemoteGPUError
in the driver: the cell is recorded as failed; taking that GPU out of the cluster is the
operator's job.

Which cluster: `address` (or RAY_ADDRESS) names one that is running; without either a local one
is started for the run with this machine's GPUs, less `exclude_gpus` (a model generating on a GPU
of its own; the raylet is started with CUDA_VISIBLE_DEVICES naming the others, so Ray never
hands that GPU to an evaluation).
"""

from __future__ import annotations

import os
import subprocess
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Optional

from kernelwright.device import visible_devices
from kernelwright.errors import BadInput, GPUUnavailableError
from kernelwright.evaluate.evaluator import EvalRun, Prepared, check_gpu_after, clock_ran_out, precheck, run_prepared
from kernelwright.executors.dedupe import LinkTable, result_key
from kernelwright.executors.pool import builds_extension
from kernelwright.records import EvalResult, Task


class RemoteGPUError(RuntimeError):
    """A GPU on a Ray node stopped answering after a candidate ran on it."""


def _node_id() -> str:
    import ray

    return ray.get_runtime_context().get_node_id()


def _prebuild(task: Task, pre: Prepared, run: EvalRun, env: dict[str, str]) -> tuple[EvalResult, str]:
    run = run.but(extra_env={**run.extra_env, **env})
    return run_prepared(task, pre, run, prebuild=True), _node_id()


def _place() -> str:
    """Where this task runs: its node, and the GPU Ray gave it as the host names it (`node/gpu`)."""
    import ray

    gpus = ray.get_gpu_ids()
    return _node_id() + ("/" + ",".join(str(g) for g in gpus) if gpus else "")


def _evaluate(task: Task, pre: Prepared, run: EvalRun) -> tuple[EvalResult, str]:
    if run.device.startswith("cuda"):
        run = run.but(device="cuda:0")  # the one GPU Ray gave this task (CUDA_VISIBLE_DEVICES)
    try:
        result = check_gpu_after(run_prepared(task, pre, run), run)
    except GPUUnavailableError as e:
        raise RemoteGPUError(f"on {_place()}: {e}") from None
    return result, _place()


def host_gpus() -> list[str]:
    """This machine's GPUs as CUDA numbers them for this process: CUDA_VISIBLE_DEVICES's entries
    when set, else the driver's indices (nvidia-smi; none without it)."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return visible_devices(visible)
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=index", "--format=csv,noheader"], capture_output=True,
                             text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return []
    return [line.strip() for line in out.stdout.splitlines() if line.strip()] if out.returncode == 0 else []


def _start_local(gpus: Optional[Sequence[str]], exclude: Sequence[str], runtime_env: Optional[dict[str, Any]],
                 cpus: Optional[int] = None) -> None:
    """A Ray instance of this machine for the run: its GPUs (`gpus`, default host_gpus()) less
    `exclude`, given to the raylet as CUDA_VISIBLE_DEVICES (Ray's GPU ids are then those entries),
    and `cpus` of its cores (default all)."""
    import ray

    if gpus is None and not exclude:
        ray.init(address="local", num_cpus=cpus, runtime_env=runtime_env, log_to_driver=False,
                 include_dashboard=False)
        return
    keep = [g for g in (host_gpus() if gpus is None else list(gpus)) if g not in set(exclude)]
    if exclude and not keep:
        raise BadInput(f"no GPU is left to evaluate on once GPU {', '.join(exclude)} is kept for the model "
                       "(model_gpu = shared lends it to both)")
    before = os.environ.get("CUDA_VISIBLE_DEVICES")
    # the raylet inherits this at its start; this process's CUDA is set up already or reads it later,
    # so the variable is given back as it was before anything here initialises CUDA
    os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(keep)
    try:
        ray.init(address="local", num_gpus=len(keep), num_cpus=cpus, runtime_env=runtime_env, log_to_driver=False,
                 include_dashboard=False)
    finally:
        if before is None:
            del os.environ["CUDA_VISIBLE_DEVICES"]
        else:
            os.environ["CUDA_VISIBLE_DEVICES"] = before


def _reachable(address: str, timeout_s: float = 5.0) -> None:
    """A `host:port` cluster address answers a TCP connection, else a one-line BadInput: ray.init
    waits minutes for a head that is not there (2.60: killed after 5 min here). Other forms
    (`auto`, `ray://`) are Ray's to resolve."""
    import socket

    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit() or "/" in address:
        return
    try:
        socket.create_connection((host, int(port)), timeout=timeout_s).close()
    except OSError as e:
        raise BadInput(f"cannot reach the Ray cluster at {address}: {e.strerror or e}") from None


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
    by_gpu: dict[str, int] = field(default_factory=dict)  # `node/gpu` -> GPU evaluations it returned


class RayExecutor:
    def __init__(self, address: Optional[str] = None, max_retries: int = 3, build_cpus: int = 2,
                 cuda_arch: Optional[str] = None, runtime_env: Optional[dict[str, Any]] = None,
                 slots_per_gpu: int = 1, gpus: Optional[Sequence[str]] = None,
                 exclude_gpus: Sequence[str] = (), cpus: Optional[int] = None) -> None:
        try:
            import ray
        except ImportError as e:  # the optional extra
            raise RuntimeError("the ray executor needs Ray: pip install 'kernelwright[ray]'") from e
        if slots_per_gpu < 1:
            raise BadInput("slots_per_gpu must be at least 1")
        self._ray = ray
        self._owns_ray = not ray.is_initialized()
        address = address or os.environ.get("RAY_ADDRESS") or None
        if (gpus is not None or exclude_gpus or cpus is not None) and (address or not self._owns_ray):
            raise BadInput("which GPUs and CPUs evaluate is chosen when a local cluster starts; on a running "
                           "cluster, start its nodes with what they should lend (`ray start --num-gpus "
                           "--num-cpus`, CUDA_VISIBLE_DEVICES)")
        if self._owns_ray:
            if address:
                _reachable(address)
                try:
                    ray.init(address=address, runtime_env=runtime_env, log_to_driver=False)
                except (ConnectionError, RuntimeError, ValueError) as e:
                    first = (str(e).strip().splitlines() or [type(e).__name__])[0]
                    raise BadInput(f"cannot join the Ray cluster at {address}: {first}") from None
            else:
                _start_local(gpus, [str(g) for g in exclude_gpus], runtime_env, cpus)
        # a prebuild asking for more CPUs than a node has would wait for ever
        self.max_retries, self.build_cpus = max_retries, build_cpus if cpus is None else max(1, min(build_cpus, cpus))
        # a GPU evaluation asks for this much of a GPU: `slots_per_gpu` of them share one
        self.gpu_share = 1.0 / slots_per_gpu
        self._cuda_arch = cuda_arch
        self._prebuild = ray.remote(_prebuild)
        self._evaluate = ray.remote(_evaluate)
        self._arch_task = ray.remote(_gpu_arch)
        self._links = LinkTable()
        self._lock = threading.Lock()
        self.stats = RayStats()

    def evaluate(self, task: Task, candidate_text: str, run: Optional[EvalRun] = None) -> EvalResult:
        run = run or EvalRun()
        self._count("submitted")
        pre = precheck(task, candidate_text, run)
        if isinstance(pre, EvalResult):
            self._count("decided_before_ray")
            return pre
        # a cell's clock is this machine's monotonic time: asked here, before the job leaves (the
        # wait in Ray's own queue is not covered), and never shipped to a worker's clock
        late = clock_ran_out(task, pre.code_hash, run)
        if late is not None:
            return late
        run = run.but(deadline=None)
        mine, work = self._links.claim(result_key(task, pre.code_hash, run))
        if work is None:
            self._count("linked_duplicates")
            return mine.result()
        try:
            work.set_result(self._run(task, pre, run))
        except BaseException as e:  # noqa: BLE001 - a later duplicate is evaluated afresh
            self._links.forget(result_key(task, pre.code_hash, run))
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
                self._cuda_arch = self._ray.get(self._arch_task.options(num_gpus=self.gpu_share, num_cpus=0).remote())
            return self._cuda_arch

    def _run(self, task: Task, pre: Prepared, run: EvalRun) -> EvalResult:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        ray, gpu = self._ray, run.device.startswith("cuda")
        strategy: Any = "DEFAULT"
        if not run.config.compile_only and builds_extension(pre.code):
            env = {"MAX_JOBS": str(self.build_cpus)}
            if gpu:
                # the build key includes the arch; builds never need the GPU itself
                env.update({"TORCH_CUDA_ARCH_LIST": self._arch(), "CUDA_VISIBLE_DEVICES": ""})
            built, node = ray.get(self._prebuild.options(num_cpus=self.build_cpus, max_retries=self.max_retries)
                                  .remote(task, pre, run, env))
            self._count("prebuilt")
            if built.verdict.build_failed:
                self._count("decided_at_build")
                return built
            strategy = NodeAffinitySchedulingStrategy(node_id=node, soft=True)
        try:
            result, place = ray.get(self._evaluate.options(
                **self.eval_resources(run), max_retries=self.max_retries, scheduling_strategy=strategy)
                .remote(task, pre, run))
        except RemoteGPUError:
            raise
        except ray.exceptions.RayTaskError as e:
            cause = e.cause if hasattr(e, "cause") else None
            if isinstance(cause, RemoteGPUError):
                raise cause from None
            raise
        node = place.split("/", 1)[0]
        with self._lock:
            self.stats.evaluated += 1
            self.stats.by_node[node] = self.stats.by_node.get(node, 0) + 1
            if "/" in place:
                self.stats.by_gpu[place] = self.stats.by_gpu.get(place, 0) + 1
        return result

    def eval_resources(self, run: EvalRun) -> dict[str, float]:
        """What an evaluation asks of Ray: a CPU, and its share of a GPU when it runs on one."""
        on_gpu = run.device.startswith("cuda") and not run.config.compile_only
        return {"num_cpus": 1, "num_gpus": self.gpu_share if on_gpu else 0}

    def layout(self) -> str:
        """The cluster as this run uses it, in one line (printed when a study starts)."""
        res = self._ray.cluster_resources()
        nodes = sum(1 for n in self._ray.nodes() if n.get("Alive"))
        gpus = int(res.get("GPU", 0))
        slots = f", {round(1 / self.gpu_share)} evaluation(s) a GPU" if gpus else ""
        return f"ray: {nodes} node(s), {int(res.get('CPU', 0))} CPU(s), {gpus} GPU(s){slots}"
