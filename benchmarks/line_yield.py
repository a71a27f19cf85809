"""What a line's prompt buys: the embedded model's answers to each line of a region (search a line at
a time, scaffold/steps.py), pre-checked, under two versions of one part of the prompt.

Arms: `now` (the prompt as search sends it), `whole-tl` (Triton: the math line as it was before
7a056c7, all of `tl` and the rule for tanh, whatever the line needs), `hot` (the prompt as `now`,
sampled at the temperature of search's second turn, search.steps.HEAT_STEP), `no-loop` (C++ rows:
without the line that shows the loop over the row, as before 2026-12-03b) and `no-parts` (a
composite op one line, as before decompose.py: its rows are the op's own line). Per task and line, n
answers a request (search's temperature, the same seeds in every arm), each spliced into the line's
scaffold and pre-checked against the line alone (no GPU: Triton on the NumPy `tl`, C++/CUDA on the
system compiler). Counts: pre-check passes, counterexamples, compile errors, distinct answers;
answers that are the tanh rule's `2 * tl.sigmoid(2 * x) - 1` on a line without a tanh.

    nice -n 5 python benchmarks/line_yield.py --target triton --n 4 --out docs/results/line-yield/triton.jsonl
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
from kernelwright.scaffold import assemble, plan_tasks, precheck_many, write  # noqa: E402
from kernelwright.scaffold.steps import line_target, split, worth_it  # noqa: E402
from kernelwright.strategies import parse_regime, search  # noqa: E402
from kernelwright.strategies.base import RunContext  # noqa: E402
from kernelwright.strategies.search.steps import HEAT_STEP, line_prompt_vars  # noqa: E402
from kernelwright.tasks import load_tasks  # noqa: E402

# The Triton math line before 7a056c7 (skeleton.TRITON_MATH), for the `whole-tl` arm
WHOLE_TL = ("tl has exp, log, sqrt, rsqrt, sigmoid, erf, abs, maximum, minimum, where, sum, max, min, cumsum "
            "(sum/max/min/cumsum with axis=0); there is no tl.tanh: use 2 * tl.sigmoid(2 * v) - 1")
COLUMNS = ("drawn", "distinct", "pass", "counterexample", "compile error", "other", "tanh rule, no tanh", "s/answer")


def cells(c: Counter, seconds: float) -> list[str]:
    return [str(c[k]) for k in COLUMNS[:-1]] + [f"{seconds / max(1, c['drawn']):.1f}"]


def main() -> int:
    args = arm_args(__doc__.splitlines()[0], ("cuda", "triton", "cpp"), 256, "every task split into lines",
                    "now,whole-tl", "now, whole-tl, hot, no-loop, no-parts").parse_args()
    tasks = [t for t in load_tasks("builtin") if not args.tasks or t.id in args.tasks.split(",")]
    backend = make_backend(args.model)
    table = ArmTable(COLUMNS, cells)
    for task, plan in zip(tasks, plan_tasks(tasks)):
        plan = plan.for_target(args.target)
        arms = args.arms.split(",")
        steps = split(plan) if arms != ["no-parts"] else []
        whole = [(st, True) for st in split(plan, parts=False)] if "no-parts" in arms else []
        parts = {st.line for st in steps}
        runs = [(st, False) for st in steps] + [(st, True) for st, _ in whole if st.line not in parts]
        if not runs or not worth_it([st for st, _ in runs], args.target):
            continue
        config = parse_regime("search", target=args.target, scaffold=True, seed=args.seed, max_tokens=args.max_tokens)
        ctx = RunContext(task=task, backend=backend, config=config, eval_run=EvalRun(device="cpu"),
                         cell_key="line-yield")
        if ctx.scaffold() is None:
            continue
        for st, unsplit in runs:
            target = line_target(st, args.target)
            sc = write(st.plan, target)
            tanh_needed = "tanh" in " ".join(st.plan.segment.torch_lines + st.plan.segment.op_notes)
            for arm in (["no-parts"] if unsplit else [a for a in arms if a != "no-parts"]):
                if arm == "whole-tl" and target != "triton":
                    continue
                shown = sc.model_copy(update={"variables": sc.variables[:-1] + [WHOLE_TL]}) if arm == "whole-tl" else sc
                if arm == "no-loop":
                    if not any(v.startswith("loop over the row") for v in sc.variables):
                        continue
                    shown = sc.model_copy(update={"variables": [v for v in sc.variables
                                                                if not v.startswith("loop over the row")]})
                heat = search.DEFAULT_TEMPERATURE + (HEAT_STEP if arm == "hot" else 0.0)
                request = ctx.request(ctx.messages(prompts.render("task", **line_prompt_vars(ctx, shown))), args.n,
                                      heat, args.max_tokens, args.seed)
                started = time.monotonic()
                comps = backend.generate([request])[0]
                took = time.monotonic() - started
                regions = [assemble(shown, c.text).region for c in comps]
                c: Counter = Counter(drawn=len(regions), distinct=len(set(r.strip() for r in regions)))
                checkable = [r for r in regions if r.strip()]
                for check in precheck_many(st.plan, target, checkable) if checkable else []:
                    key = {"pass": "pass", "counterexample": "counterexample", "compile_error": "compile error"}
                    c[key.get(check.status.value, "other")] += 1
                c["other"] += len(regions) - len(checkable)
                c["tanh rule, no tanh"] = 0 if tanh_needed else sum(
                    1 for r in regions if re.search(r"2\s*\*\s*tl\.sigmoid\(\s*2\s*\*", r))
                if args.out is not None:
                    args.out.parent.mkdir(parents=True, exist_ok=True)
                    with args.out.open("a") as f:
                        for i, (comp, reg) in enumerate(zip(comps, regions)):
                            f.write(json.dumps({"task_id": task.id, "target": args.target, "line": st.index + 1,
                                                "arm": arm, "sample": i, "text": comp.text, "region": reg}) + "\n")
                table.add(f"{task.id.split('/', 1)[1]} line {st.index + 1}: `{st.line[:40]}`", arm, c, took)
    print(f"\n{args.target}, n={args.n}, seed {args.seed}, temperature {search.DEFAULT_TEMPERATURE} "
          f"(hot: {search.DEFAULT_TEMPERATURE + HEAT_STEP})\n")
    print(table.render())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
