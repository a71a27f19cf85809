"""Admission by memory on a real GPU (docs/evaluator.md, "Admission by memory"): evaluates one
candidate twice at once, twice over, and prints what the driver measured and how long each waited.

    PYTHONPATH=. python3 benchmarks/memory_admission_check.py [cuda:0] [ROUNDS]

Round 1 has no footprint for the task yet (each needs an eighth of the device: on an H200 both fit
at once); later rounds need 1.2 x the measured peak. Expect `device_memory_mb` of a few hundred MiB
(CUDA contexts of the judge and the candidate's runner, plus the task's tensors) and waits of about 0.
To see waiting, edit <lock dir>/<device>.footprints.json between rounds to a footprint above 0.45 of
the device (two then do not fit in 0.9): the second evaluation of each round must wait for the first.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from kernelwright import devmem
from kernelwright.device import device_key, lock_dir
from kernelwright.evaluate import EvalRun, evaluate
from kernelwright.tasks import load_task

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    device = sys.argv[1] if len(sys.argv) > 1 else "cuda:0"
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 2
    print("reader:", type(devmem.reader()).__name__, "| device memory:", devmem.reader() and
          devmem.reader().device_memory(device))
    task = load_task(str(ROOT / "tests/fixtures/tasks/bias_relu.py"))
    text = (ROOT / "tests/fixtures/candidates/gpu/correct_triton.py").read_text()
    cache = tempfile.mkdtemp(prefix="kw-admission-")
    for r in range(rounds):
        started = time.monotonic()
        with ThreadPoolExecutor(2) as pool:
            # two texts (a comment apart): distinct candidates, one task
            futures = [pool.submit(evaluate, task, text + f"\n# copy {i}\n",
                                   EvalRun.of(device=device, time=False, cache_dir=cache)) for i in range(2)]
            results = [f.result() for f in futures]
        for i, res in enumerate(results):
            print(f"round {r + 1} eval {i}: {res.verdict.value} device_memory_mb={res.device_memory_mb} "
                  f"memory_admission_wait_s={res.memory_admission_wait_s}")
        print(f"round {r + 1}: {time.monotonic() - started:.1f} s")
    path = lock_dir() / f"{device_key(device)}.footprints.json"
    print(path, json.dumps(json.loads(path.read_text()) if path.exists() else None, indent=1))


if __name__ == "__main__":
    main()
