"""The C++ skeleton against an older checkout's, in one process: each task's oracle program built by
both (same region, same inputs), each forward timed in turn with eager, so the machine's load
falls on all three alike. What `skeleton_speed.py` cannot show on a small CPU task, where the judge's
protocol (about 1 ms a call) hides a kernel's microseconds.

    python benchmarks/cpp_skeleton_ab.py --baseline /tmp/old-checkout examples/gemm_bias_gelu.py builtin/L1/01_gelu_tanh

`--baseline` is another checkout of this repository (e.g. `git worktree add /tmp/old <rev>`); its
kernelwright writes the baseline programs, in a child process. KERNELWRIGHT_SIZE=full for the full size.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
import types
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

WRITE = """
import sys, json
from kernelwright.tasks import load_task
from kernelwright.scaffold import plan_task, write
from kernelwright.scaffold.oracle import region
out = {}
for tid in sys.argv[1:]:
    sc = write(plan_task(load_task(tid)), "cpp")
    out[tid] = sc.program_with(region(sc)) if sc.available else None
print(json.dumps(out))
"""


def programs(repo: Path, tasks: list[str]) -> dict:
    """Each task's oracle program as `repo`'s kernelwright writes it. The child runs in `repo`: with
    `-c`, Python puts the working folder before PYTHONPATH, so run from this checkout it imported
    this checkout's kernelwright for the baseline too (until 2026-12-04e every "baseline" column
    was the current code: the vectorised loop's "no gain" of 2026-12-03 compared it with itself)."""
    env = {**os.environ, "PYTHONPATH": str(repo)}
    paths = [str(Path(t).resolve()) if Path(t).exists() else t for t in tasks]
    done = subprocess.run([sys.executable, "-c", WRITE, *paths], env=env, cwd=repo, capture_output=True, text=True,
                          check=True)
    written = json.loads(done.stdout.strip().splitlines()[-1])
    return {t: written[p] for t, p in zip(tasks, paths)}


def load(text: str, name: str) -> types.ModuleType:
    path = Path(tempfile.mkdtemp()) / f"{name}.py"
    path.write_text(text.replace('load_inline(name="', f'load_inline(name="{name}_'))
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def per_call_ms(fn, inputs, rounds: int) -> float:
    for _ in range(3):
        fn(*inputs)
    start = time.perf_counter()
    for _ in range(rounds):
        fn(*inputs)
    return (time.perf_counter() - start) / rounds * 1e3


def main() -> int:
    import torch

    from kernelwright.tasks import load_task

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("tasks", nargs="+")
    ap.add_argument("--baseline", type=Path, required=True)
    ap.add_argument("--rounds", type=int, default=50)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    here = Path(__file__).resolve().parents[1]
    new, old = programs(here, args.tasks), programs(args.baseline, args.tasks)
    print(f"| task | eager ms | baseline ms | now ms | baseline x eager | now x eager | now x baseline |")
    print("|---|---|---|---|---|---|---|")
    for k, tid in enumerate(args.tasks):
        if not new.get(tid) or not old.get(tid):
            print(f"| {tid} | no scaffold | | | | | |")
            continue
        task = load_task(tid)
        ref = types.ModuleType("ref")
        exec(task.source, ref.__dict__)
        torch.manual_seed(0)
        model = ref.Model(*ref.get_init_inputs())
        mods = [load(old[tid], f"kwa{k}"), load(new[tid], f"kwb{k}")]
        nets = []
        for m in mods:
            net = m.ModelNew(*ref.get_init_inputs())
            net.load_state_dict(model.state_dict())
            nets.append(net)
        inputs = ref.get_inputs()
        times = {"eager": [], "old": [], "new": []}
        with torch.no_grad():
            want = model(*inputs)
            tol = 1e-2 if want.dtype in (torch.float16, torch.bfloat16) else 1e-4  # the evaluator's defaults
            for net in nets:
                assert torch.allclose(net(*inputs).float(), want.float(), atol=tol, rtol=tol), tid
            for _ in range(args.repeats):  # interleaved: the load falls on all three
                times["eager"].append(per_call_ms(model, inputs, args.rounds))
                times["old"].append(per_call_ms(nets[0], inputs, args.rounds))
                times["new"].append(per_call_ms(nets[1], inputs, args.rounds))
        e, o, n = (sorted(times[w])[len(times[w]) // 2] for w in ("eager", "old", "new"))
        print(f"| {tid} | {e:.4f} | {o:.4f} | {n:.4f} | {e / o:.3f} | {e / n:.3f} | {o / n:.3f} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
