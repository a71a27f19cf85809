"""What the judge's GPU clock measures, cross-checked: per honest candidate, the split judge's times
(evaluate(): a request to the runner process, timed in the judge) beside the same modules timed here
in one trusted process with CUDA events (timing.time_calls) and with the profiler's kernel times
(torch.profiler, CUPTI: the sum of device time of the kernels one forward launched).

The judge cannot use CUDA events (they would be recorded by the candidate's process, on its streams)
nor the profiler (CUPTI sees only its own process), so its interval also holds the copies of the
inputs into the runner's arena and of the outputs out, a socket round trip and device synchronizes.
This table says how large that is per call, for a compute-bound task and a memory-bound one, and
how much it dilutes a speedup towards 1. The candidates are the project's honest fixtures, so
importing them here is safe. Run on a GPU machine:

    python3 benchmarks/gpu_split_timing.py [--device cuda:0] [--iters 50]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kernelwright.evaluate import EvalRun, evaluate  # noqa: E402
from kernelwright.evaluate.candidate_load import import_source  # noqa: E402
from kernelwright.tasks import load_task  # noqa: E402

CASES = [  # (task, candidate, what bounds it)
    ("builtin/L2/01_linear_gelu_scale", ROOT / "examples" / "candidates" / "linear_gelu_scale_cuda.py", "compute"),
    ("builtin/L2/01_linear_gelu_scale", ROOT / "examples" / "candidates" / "linear_gelu_scale_triton.py", "compute"),
    (str(ROOT / "tests" / "fixtures" / "tasks" / "bias_relu.py"),
     ROOT / "tests" / "fixtures" / "candidates" / "gpu" / "correct_cuda.py", "memory"),
    (str(ROOT / "tests" / "fixtures" / "tasks" / "bias_relu.py"),
     ROOT / "tests" / "fixtures" / "candidates" / "gpu" / "correct_triton.py", "memory"),
]


def _module(source: str, name: str) -> Any:
    return import_source(source, name, f"{name}.py", tempfile.mkdtemp(prefix="kw-xcheck-"))


def _kernel_ms(model: Any, inputs: list[Any], iters: int) -> float:
    """The profiler's device time of the kernels one call launches (median over `iters` calls)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    per_call = []
    with torch.no_grad():
        for _ in range(iters):
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                model(*inputs)
                torch.cuda.synchronize()
            # device-side events: kernels, memcpys and memsets, each once
            us = sum(e.time_range.elapsed_us() for e in prof.events() if e.device_type.name == "CUDA")
            per_call.append(us / 1e3)
    return statistics.median(per_call)


def _in_process(task: Any, code: str, device: str, iters: int) -> dict[str, float]:
    """Events and profiler times of the reference and the candidate, in this process."""
    import torch

    from kernelwright.measure.timing import TimingConfig, time_calls

    ref, cand = _module(task.source, "xcheck_ref"), _module(code, "xcheck_cand")
    init = ref.get_init_inputs()
    torch.manual_seed(0)
    models = {"reference": ref.Model(*init).to(device), "candidate": cand.ModelNew(*init).to(device)}
    sets = [[x.to(device) if isinstance(x, torch.Tensor) else x for x in ref.get_inputs()] for _ in range(4)]
    out = {}
    for role, model in models.items():
        stats = time_calls(model, sets, torch.device(device), TimingConfig(warmup=10, iters=iters))
        out[f"{role}_events"] = stats.median_ms
        out[f"{role}_kernels"] = _kernel_ms(model, sets[0], min(iters, 20))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda:0")
    ap.add_argument("--iters", type=int, default=50, help="timed calls of the in-process measurements")
    args = ap.parse_args(argv)
    os.environ["KERNELWRIGHT_SIZE"] = "full"  # what the evaluator runs on a GPU (size auto)

    rows = []
    for task_id, path, bound in CASES:
        task, code = load_task(task_id), path.read_text()
        r = evaluate(task, code, EvalRun(device=args.device))
        print(f"{path.name}: {r.verdict.value} (judge {r.judge}) {r.error or ''}", flush=True)
        if r.runtime_ms is None or r.ref_runtime_ms is None:
            continue
        here = _in_process(task, code, args.device, args.iters)
        rows.append((path.name, bound, r, here))
        print(f"  judge {r.runtime_ms:.4g}/{r.ref_runtime_ms:.4g} ms, here {here}", flush=True)

    def f(v: float | None, digits: int = 4) -> str:
        return "-" if v is None else f"{v:.{digits}g}"

    print("\n| candidate | bound | role | judge ms (split) | events ms (here) | kernels ms (profiler) "
          "| judge - events ms |")
    print("|---|---|---|---:|---:|---:|---:|")
    for name, bound, r, here in rows:
        for role, judged in (("candidate", r.runtime_ms), ("reference", r.ref_runtime_ms)):
            ev, ker = here[f"{role}_events"], here[f"{role}_kernels"]
            print(f"| {name} | {bound} | {role} | {f(judged)} | {f(ev)} | {f(ker)} | {f(judged - ev, 3)} |")
    print("\n| candidate | speedup by the judge | by events here | by profiler kernels |")
    print("|---|---:|---:|---:|")
    for name, _, r, here in rows:
        ev = here["reference_events"] / here["candidate_events"]
        ker = here["reference_kernels"] / here["candidate_kernels"] if here["candidate_kernels"] else None
        print(f"| {name} | {f(r.speedup, 3)} | {f(ev, 3)} | {f(ker, 3)} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
