"""What the kernel view buys: region answers under the kernel shown whole and under its view.

The task prompt shows the model the kernel around its region. Shown whole, the CUDA elementwise
kernel's vector loop, the CUDA row kernel's shared-memory staging, the Triton row kernel's
placeholder `y = tl.sum(x * 0.0, axis=0)` and the Triton GEMM's loop over K are launch machinery a
small model copies into its answer (the H200 studies of 2026-12-03). The view (writers.cuda.cuda_view,
the Triton row view without the placeholder, writers.triton_gemm.gemm_view) shows the names the region
reads and writes and nothing else. Per task and target, the scaffolded task prompt is sampled n
times in each arm (`whole`, `view`; same seeds, search's temperature), every answer spliced and
pre-checked (scaffold/precheck: the region's math alone, no GPU). Counts: pre-check passes,
counterexamples, compile errors, answers that name the kernel's own `kw_` names, answers equal to
a line of the kernel around the region.

    nice -n 10 python benchmarks/view_yield.py --target cuda --n 4 --out docs/results/view-yield/cuda.jsonl

Results: docs/results/view-yield.md.
"""

from __future__ import annotations

import json
import re
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from arm_table import ArmTable, arm_args  # noqa: E402

from kernelwright import prompts  # noqa: E402
from kernelwright.evaluate import EvalRun  # noqa: E402
from kernelwright.llm.registry import make_backend  # noqa: E402
from kernelwright.scaffold import SegmentKind, assemble, plan_tasks, precheck_many  # noqa: E402
from kernelwright.scaffold.writers.base import marked_kernel  # noqa: E402
from kernelwright.scaffold.writers.cuda import cuda_kernel  # noqa: E402
from kernelwright.scaffold.writers.triton import triton_kernel  # noqa: E402
from kernelwright.scaffold.writers.triton_gemm import triton_gemm_kernel  # noqa: E402
from kernelwright.strategies import parse_regime, search  # noqa: E402
from kernelwright.strategies.search.parts import prompt_vars  # noqa: E402
from kernelwright.strategies.base import RunContext  # noqa: E402
from kernelwright.tasks import load_tasks  # noqa: E402

COLUMNS = ("drawn", "pre-check pass", "counterexample", "compile error", "other", "names kw_", "a kernel line",
           "distinct", "s/answer")


def whole_view(sc) -> str:
    """The kernel as the prompt showed it before views: the program's own kernel, region marked."""
    seg = sc.segment
    if sc.target == "cuda":
        kernel, indent, helpers = cuda_kernel(seg)
        return helpers + marked_kernel(kernel, indent, "//")[1]
    if seg.kind == SegmentKind.GEMM:
        kernel, indent = triton_gemm_kernel(seg)
    else:
        kernel, indent = triton_kernel(seg)
    return marked_kernel(kernel, indent, "#")[1]


def classify(sc, plan, regions: list[str]) -> Counter:
    c: Counter = Counter(drawn=len(regions))
    kernel_lines = {ln.strip() for ln in whole_view(sc).splitlines() if len(ln.strip()) > 3}
    for r in regions:
        c["names kw_"] += bool(re.search(r"\bkw_\w+", r))
        c["a kernel line"] += r.strip() in kernel_lines
    c["distinct"] = len({re.sub(r"\s+", " ", r).strip() for r in regions if r.strip()})
    checkable = [r for r in regions if r.strip()]
    for check in precheck_many(plan, sc.target, checkable) if checkable else []:
        status = check.status.value
        key = {"pass": "pre-check pass", "counterexample": "counterexample", "compile_error": "compile error"}
        c[key.get(status, "other")] += 1
    c["other"] += len(regions) - len(checkable)
    return c


def cells(c: Counter, seconds: float) -> list[str]:
    return [str(c[k]) for k in COLUMNS[:-1]] + [f"{seconds / max(1, c['drawn']):.1f}"]


def main() -> int:
    ap = arm_args(__doc__.splitlines()[0], ("cuda", "triton"), 384, "every task of those kinds", "whole,view")
    ap.add_argument("--kinds", default="elementwise,row,gemm", help="segment kinds to sample")
    args = ap.parse_args()
    tasks = load_tasks("builtin")
    plans = dict(zip([t.id for t in tasks], plan_tasks(tasks)))
    backend = make_backend(args.model)
    kinds = set(args.kinds.split(","))
    table = ArmTable(COLUMNS, cells)
    for task in tasks:
        config = parse_regime("search", target=args.target, scaffold=True, seed=args.seed, max_tokens=args.max_tokens)
        ctx = RunContext(task=task, backend=backend, config=config, eval_run=EvalRun(device="cpu"),
                         cell_key="view-yield")
        sc = ctx.scaffold()
        if sc is None or sc.segment.kind.value not in kinds or (args.tasks and task.id not in args.tasks.split(",")):
            continue
        if sc.kernel_view == whole_view(sc):
            continue  # the view is the kernel itself: nothing to compare
        for arm in args.arms.split(","):
            shown = sc if arm == "view" else sc.model_copy(update={"kernel_view": whole_view(sc)})
            ctx.use_scaffold(shown)
            request = ctx.request(ctx.messages(prompts.render("task", **prompt_vars(ctx))), args.n,
                                  search.DEFAULT_TEMPERATURE, args.max_tokens, args.seed)
            started = time.monotonic()
            comps = backend.generate([request])[0]
            took = time.monotonic() - started
            regions = [assemble(shown, comp.text).region for comp in comps]
            if args.out is not None:
                args.out.parent.mkdir(parents=True, exist_ok=True)
                with args.out.open("a") as f:
                    for i, (comp, reg) in enumerate(zip(comps, regions)):
                        f.write(json.dumps({"task_id": task.id, "target": args.target, "arm": arm, "sample": i,
                                            "text": comp.text, "region": reg}) + "\n")
            table.add(f"{task.id.split('/', 1)[1]} ({sc.segment.kind.value})", arm,
                      classify(sc, plans[task.id], regions), took)
    print(f"\n{args.target}, n={args.n}, seed {args.seed}, temperature {search.DEFAULT_TEMPERATURE}\n")
    print(table.render())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
