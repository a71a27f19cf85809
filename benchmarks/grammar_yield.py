"""What the region grammar buys: n region answers with and without it, through the pre-check.

For each task, the search regime's first request (scaffolded, CPU C++ target) is sampled n times in
each arm, same seeds, and every answer is spliced and pre-checked (scaffold/precheck). Arms:
`grammar` (what `search` sends: the grammar, and the prompt's line on how locals are named),
`no_grammar` (what plain `search` sends), `grammar_bare` (the grammar under the plain prompt,
which does not say that locals are t0, t1, ...). Per arm it counts: answers with no code, answers
outside the grammar's language, pre-check passes, counterexamples, compile errors and, among those,
undefined names (the compiler says a name is not declared / not a member); and the time per answer.

    nice -n 10 python benchmarks/grammar_yield.py --n 8 --model 'gguf:qwen2.5-coder-1.5b?threads=1'

Results: docs/results/grammar-yield.md.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from arm_table import ArmTable  # noqa: E402

from kernelwright import prompts  # noqa: E402
from kernelwright.evaluate import EvalRun  # noqa: E402
from kernelwright.llm.base import Completion  # noqa: E402
from kernelwright.llm.registry import make_backend  # noqa: E402
from kernelwright.scaffold import assemble, plan_tasks, precheck_many  # noqa: E402
from kernelwright.scaffold.gbnf import matches  # noqa: E402
from kernelwright.scaffold.grammar import region_grammar  # noqa: E402
from kernelwright.strategies import (
    parse_regime,  # noqa: E402
    search,  # noqa: E402
)
from kernelwright.strategies.base import RunContext  # noqa: E402
from kernelwright.strategies.search.parts import prompt_vars  # noqa: E402
from kernelwright.tasks import load_tasks  # noqa: E402

# elementwise (with and without extras) and row kernels (a reduction, a norm with a weight)
DEFAULT_TASKS = ("builtin/L1/01_gelu_tanh", "builtin/L2/02_conv2d_mish_clamp",
                 "builtin/L2/09_conv2d_softplus_scale_bias", "builtin/L1/03_softmax", "builtin/L1/08_layer_norm")
UNDEFINED = re.compile(r"was not declared|undeclared|is not a member of|has no member|no matching function")
COLUMNS = ("drawn", "hit max_tokens", "no code", "outside grammar", "pre-check pass", "counterexample", "compile error",
           "undefined name", "other", "distinct", "s/answer", "tokens/answer")


def classify(sc, plan, grammar: str, comps: list[Completion]) -> Counter:
    c: Counter = Counter(drawn=len(comps))
    regions = []
    for comp in comps:
        asm = assemble(sc, comp.text)
        c["outside grammar"] += not matches(grammar, comp.text.strip())
        c["no code"] += asm.empty
        regions.append(asm.region)
        c["tokens"] += comp.completion_tokens
        c["hit max_tokens"] += comp.finish_reason == "length"
    c["distinct"] = len({re.sub(r"\s+", " ", r).strip() for r in regions if r.strip()})
    checkable = [r for r in regions if r.strip()]
    for check in precheck_many(plan, "cpp", checkable) if checkable else []:
        status = check.status.value
        if check.passed:
            c["pre-check pass"] += 1
        elif status == "counterexample":
            c["counterexample"] += 1
        elif status == "compile_error":
            c["compile error"] += 1
            c["undefined name"] += bool(UNDEFINED.search(check.error))
        else:
            c["other"] += 1
    return c


def cells(c: Counter, seconds: float) -> list[str]:
    return [str(c[k]) for k in COLUMNS[:-2]] + [f"{seconds / max(1, c['drawn']):.1f}",
                                                f"{c['tokens'] / max(1, c['drawn']):.0f}"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-tokens", type=int, default=512)
    ap.add_argument("--model", default="gguf:qwen2.5-coder-1.5b?threads=1")
    ap.add_argument("--tasks", default=",".join(DEFAULT_TASKS))
    ap.add_argument("--out", type=Path, default=None, help="also write every answer here (JSONL)")
    ap.add_argument("--arms", default="grammar,no_grammar", help="of grammar, no_grammar, grammar_bare")
    args = ap.parse_args()
    ids = args.tasks.split(",")
    tasks = [t for t in load_tasks("builtin") if t.id in ids]
    plans = dict(zip([t.id for t in tasks], plan_tasks(tasks)))
    backend = make_backend(args.model)
    arms = args.arms.split(",")
    table = ArmTable(COLUMNS, cells)
    for task in tasks:
        for arm in arms:
            spec = "search" if arm != "grammar" else "search+grammar"
            config = parse_regime(spec, target="cpp", scaffold=True, seed=args.seed, max_tokens=args.max_tokens)
            ctx = RunContext(task=task, backend=backend, config=config, eval_run=EvalRun(device="cpu"),
                             cell_key="grammar-yield")
            sc = ctx.scaffold()
            if sc is None:
                print(f"{task.id}: no scaffold", flush=True)
                break
            grammar = region_grammar(sc)
            # the regime's own first request (its prompt and grammar), n samples of it
            request = ctx.request(ctx.messages(prompts.render("task", **prompt_vars(ctx))), args.n,
                                  search.DEFAULT_TEMPERATURE, args.max_tokens, args.seed)
            request = request.model_copy(update={"grammar": grammar if arm != "no_grammar" else None})
            started = time.monotonic()
            comps = backend.generate([request])[0]
            took = time.monotonic() - started
            assert all(comp.constrained == (arm != "no_grammar") for comp in comps)
            if args.out is not None:
                with args.out.open("a") as f:
                    for i, comp in enumerate(comps):
                        f.write(json.dumps({"task_id": task.id, "arm": arm, "sample": i, "text": comp.text,
                                            "finish_reason": comp.finish_reason,
                                            "region": assemble(sc, comp.text).region}) + "\n")
            table.add(task.id.split("/", 1)[1], arm, classify(sc, plans[task.id], grammar, comps), took)
    print("\n" + table.render())
    return 0


def _deep(fn) -> int:
    """Runs fn in a thread with a deep stack: the GBNF matcher recurses once per nesting level of
    an answer, and an answer cut off by max_tokens can nest calls hundreds deep."""
    import threading

    sys.setrecursionlimit(200_000)
    threading.stack_size(1 << 29)
    out: list[int] = []
    t = threading.Thread(target=lambda: out.append(fn()))
    t.start()
    t.join()
    return out[0] if out else 1


if __name__ == "__main__":
    raise SystemExit(_deep(main))
