"""Device time of one forward, in this process: a task's eager module, its torch.compile and a
program of ours (a skeleton with its oracle region), each timed by `triton.testing.do_bench` (CUDA
events, the L2 cache flushed before every call, the median), with each one's error against the
reference run in float64.

This is the kernels' own speed, which the judge cannot show: its timed interval also holds the
copy of fresh inputs in and of the outputs out (measure/timing.py), which on a memory-bound task
is several times the kernel. It imports the program, which the judge never does with a candidate,
so it is for programs this project wrote (the oracle regions), never for a model's answer.
skeleton_speed.py --device-time and gemm_check.py print tables from it.
"""

from __future__ import annotations

import copy
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from kernelwright.child import load_task_module
from kernelwright.measure.draw import SEED, draw_inputs, seed_all
from kernelwright.records import Task

_COUNT = [0]


@dataclass
class DeviceTimes:
    eager_ms: Optional[float] = None
    compile_ms: Optional[float] = None
    program_ms: Optional[float] = None  # a program's (measure's second return)
    bytes: int = 0  # inputs, parameters and outputs: what one pass over memory moves
    library_flops: float = 0.0  # GEMM / conv FLOPs (the roofline's)
    bound: str = ""  # "memory" | "compute": the roofline's, on the H200's peaks
    # max abs difference from the reference run in float64, per side
    errors: dict[str, float] = field(default_factory=dict)
    error: str = ""  # why a measurement is missing


def _flat(out: Any) -> list:
    import torch

    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, (list, tuple)):
        return [t for o in out for t in _flat(o)]
    return []


def _max_diff(out: Any, exact: Any) -> float:
    return max((float((a.double() - b).abs().max()) for a, b in zip(_flat(out), _flat(exact)) if a.numel()),
               default=0.0)


def _import_program(program: str, folder: Path, name: str) -> Any:
    path = folder / f"{name}.py"
    path.write_text(program)  # Triton reads the kernel's source back (inspect)
    return load_task_module(program, str(path), name, file=str(path), keep=True)


def _bench(fn: Any, device: str) -> float:
    """do_bench's median, holding the device alone (the judge's lock: a study or another benchmark
    on the same GPU times nothing meanwhile)."""
    import triton.testing

    from kernelwright.device import DeviceLock

    with DeviceLock(device):
        return triton.testing.do_bench(fn, return_mode="median")


def launch_programs(segment: Any, target: str, program: str) -> dict[str, str]:
    """label -> `program` at its default launch ("default") and at each of its launch variants
    ("threads=256, stage=1"): what the device-time table and the profiler time side by side."""
    from kernelwright.scaffold import launch_variants, with_launch

    out = {"default": program}
    for knobs in launch_variants(segment, target):
        variant = with_launch(program, knobs)
        if variant:
            out[", ".join(f"{k}={v}" for k, v in knobs.items())] = variant
    return out


def reference(task: Task, dev: Any, name: str) -> tuple[Any, Any, list]:
    """(init inputs, the task's Model on `dev` in eval mode, its inputs), drawn from the seed the
    evaluator uses; KERNELWRIGHT_SIZE must be set before (the module reads it when it loads)."""
    ref = load_task_module(task.source, task.path or "reference.py", name, keep=True)
    seed_all(SEED)
    init = ref.get_init_inputs()
    seed_all(SEED)
    model = ref.Model(*copy.deepcopy(init)).to(dev).eval()
    return init, model, draw_inputs(ref.get_inputs, SEED, dev)


def measure(task: Task, programs: dict[str, str], size: str, *, device: str = "cuda",
            compile_baseline: bool = True) -> tuple[DeviceTimes, dict[str, DeviceTimes]]:
    """The eager and torch.compile device times of `task` at `size` on a CUDA `device` (with the
    bytes and roofline), and each program's (a label -> the program's text): its time and error."""
    import torch

    from kernelwright.analysis.roofline import roofline
    from kernelwright.device import DeviceLock

    os.environ["KERNELWRIGHT_SIZE"] = size  # the task's module reads its size when it loads
    torch.backends.cuda.matmul.allow_tf32 = False  # as the evaluator: fp32 means fp32
    torch.backends.cudnn.allow_tf32 = False
    dev = torch.device(device)
    _COUNT[0] += 1
    n = _COUNT[0]
    init, model, inputs = reference(task, dev, f"kw_dt_ref_{n}")
    out = DeviceTimes()
    results: dict[str, DeviceTimes] = {}
    with torch.no_grad():
        exact_model = copy.deepcopy(model).double()
        exact = exact_model(*[x.double() if isinstance(x, torch.Tensor) and x.is_floating_point() else x
                              for x in inputs])
        del exact_model
        eager_out = model(*inputs)
        out.errors["eager"] = _max_diff(eager_out, exact)
        out.bytes = (sum(x.nbytes for x in inputs if isinstance(x, torch.Tensor))
                     + sum(p.nbytes for p in model.parameters()) + sum(t.nbytes for t in _flat(eager_out)))
        del eager_out
        try:
            line = roofline(model, "h200", inputs=inputs, measure=False)
            out.library_flops, out.bound = line.library_flops, line.bound
        except Exception as e:  # noqa: BLE001 - the table says the roofline is missing
            out.error = f"roofline: {type(e).__name__}: {e}"[:200]
        out.eager_ms = _bench(lambda: model(*inputs), device)
        if compile_baseline:
            compiled = torch.compile(model)
            # its first call under the device lock: Inductor times its kernels' configs there, and beside
            # another process's timed calls the two disturbed each other (2026-12-04c: a softmax 20% slower)
            with DeviceLock(device):
                compiled(*inputs)
            out.compile_ms = _bench(lambda: compiled(*inputs), device)
        with tempfile.TemporaryDirectory(prefix="kw-device-time-") as tmp:
            for label, text in programs.items():
                side = results[label] = DeviceTimes()
                try:
                    mod = _import_program(text, Path(tmp), f"kw_dt_{n}_{len(results)}")
                    seed_all(SEED)
                    cand = mod.ModelNew(*copy.deepcopy(init)).to(dev).eval()
                    # the first call under the device lock too: a Triton autotune times its configs
                    # there, and beside another timing process it picked a worse tile (2026-12-04)
                    with DeviceLock(device):
                        side.errors["program"] = _max_diff(cand(*inputs), exact)
                    side.program_ms = _bench(lambda: cand(*inputs), device)
                except Exception as e:  # noqa: BLE001 - one program's failure is one row's
                    side.error = f"{label}: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:300]
    torch.cuda.empty_cache()
    return out, results


def copy_bandwidth(device: str = "cuda", gib: float = 1.0) -> float:
    """Bytes a second of a device-to-device copy (read and write counted), do_bench's median."""
    import torch

    n = int(gib * 2**30) // 4
    src = torch.empty(n, dtype=torch.float32, device=device).uniform_()
    dst = torch.empty_like(src)
    ms = _bench(lambda: dst.copy_(src), device)
    return 2 * n * 4 / (ms * 1e-3)
