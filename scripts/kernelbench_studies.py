"""Write the KernelBench study files of studies/: the dev set per level and the fixed subset.

    python scripts/kernelbench_studies.py [--data ../shared/kernelbench] [--out studies] [--check] [--list]

The subset is chosen once by this rule and then kept in the files (`--check` says whether the
committed files still are what the rule gives; it never needs to run again for a study):

1. Every problem (levels 1-3, the numbers present in the folder) gets a *kind* from its source alone
   (the AST of the file: the modules it builds and the functions it calls), the first that applies:
   level 3 -> `network`; a convolution -> `conv` on level 1, `conv_epilogue` on level 2; a GEMM
   (nn.Linear, matmul/bmm/mm/einsum, `@`, attention) -> `gemm` on level 1, `gemm_epilogue` on level
   2; a reduction, normalization, pooling, scan, softmax or loss -> `reduction_norm`; else
   `elementwise` (activations and pointwise math).
2. Each level gets a fixed share of the subset (LEVEL_SHARE: 16, 16, 8 = 40 problems), split over
   its kinds in proportion to their counts (largest remainder, at least one per kind).
3. Within a (level, kind) stratum problems are ordered by sha256("kernelbench/L<level>/<number>")
   and the first ones are taken: a fixed order that no result, size or name can steer.

Sizes are not looked at: a problem whose inputs are gigabytes is in the subset as often as any other
(the judge must hold it; docs/results/kernelbench-memory.md).
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import re
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DATA = "../shared/kernelbench"  # the repo's sibling, as the data's README names it
LEVEL_SHARE = {1: 16, 2: 16, 3: 8}
KINDS = ("elementwise", "reduction_norm", "gemm", "conv", "gemm_epilogue", "conv_epilogue", "network")
_FILE = re.compile(r"^(\d+)_(.+)\.py$")
_CONV = re.compile(r"^(Conv(Transpose)?[123]d|conv(_transpose)?[123]d)$")
_GEMM = {"Linear", "linear", "matmul", "mm", "bmm", "baddbmm", "addmm", "einsum", "scaled_dot_product_attention",
         "MultiheadAttention", "Bilinear"}
_REDUCE = re.compile(r"^(sum|mean|max|min|amax|amin|argmax|argmin|prod|cumsum|cumprod|softmax|log_softmax|"
                     r"logsumexp|norm|var|std|(Log)?Softmax|.*Norm\dd?|.*Norm|.*[Pp]ool.*|.*Loss|.*_loss|kl_div|"
                     r"cross_entropy|normalize|layer_norm|group_norm|batch_norm|instance_norm)$")

# The study settings every KernelBench study file shares: the embedded model generating on the
# device's GPU, the `search` regime, and the timing protocol of the device studies before these.
MODEL = "hf:qwen2.5-coder-1.5b?batch_size=64"
CELL_MINUTES = 10  # 40 problems, every cell begun at once, inside a 30-minute device session


@dataclass(frozen=True)
class Problem:
    level: int
    number: int
    name: str
    kind: str

    @property
    def task_id(self) -> str:
        return f"kernelbench/L{self.level}/{self.number}"


def _names(tree: ast.AST) -> tuple[set[str], bool]:
    """The called or referenced names (last part of a dotted name) and whether `@` is used."""
    names: set[str] = set()
    matmul = False
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            f = node.func
            names.add(f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else "")
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.MatMult):
            matmul = True
    return names - {""}, matmul


def kind_of(source: str, level: int) -> str:
    """The problem's kind by the rule in the module docstring."""
    if level >= 3:
        return "network"
    names, matmul = _names(ast.parse(source))
    if any(_CONV.match(n) for n in names):
        return "conv" if level == 1 else "conv_epilogue"
    if matmul or names & _GEMM:
        return "gemm" if level == 1 else "gemm_epilogue"
    if any(_REDUCE.match(n) for n in names):
        return "reduction_norm"
    return "elementwise"


def problems(data: Path) -> list[Problem]:
    out = []
    for level in sorted(LEVEL_SHARE):
        for path in sorted((data / f"level{level}").glob("*.py")):
            m = _FILE.match(path.name)
            if m:
                out.append(Problem(level, int(m.group(1)), m.group(2), kind_of(path.read_text(), level)))
    return sorted(out, key=lambda p: (p.level, p.number))


def _shares(counts: Counter, total: int) -> dict[str, int]:
    """`total` split over the kinds in proportion to their counts: largest remainder, one at least."""
    n = sum(counts.values())
    exact = {k: total * c / n for k, c in counts.items()}
    got = {k: max(1, int(v)) for k, v in exact.items()}
    by_remainder = sorted(counts, key=lambda k: (-(exact[k] - int(exact[k])), KINDS.index(k)))
    i = 0
    while sum(got.values()) < total:
        got[by_remainder[i % len(by_remainder)]] += 1
        i += 1
    while sum(got.values()) > total:  # the ones-at-least pushed it over: take from the largest
        got[max(got, key=lambda k: (got[k], -KINDS.index(k)))] -= 1
    return got


def _order(p: Problem) -> str:
    return hashlib.sha256(p.task_id.encode()).hexdigest()


def subset(all_problems: list[Problem]) -> list[Problem]:
    chosen: list[Problem] = []
    for level, share in LEVEL_SHARE.items():
        mine = [p for p in all_problems if p.level == level]
        for kind, k in _shares(Counter(p.kind for p in mine), share).items():
            chosen += sorted((p for p in mine if p.kind == kind), key=_order)[:k]
    return sorted(chosen, key=lambda p: (p.level, p.number))


def _ranges(numbers: list[int]) -> str:
    """1,2,3,5 -> 1-3,5 (the task spec's id syntax)."""
    parts, run = [], [numbers[0]]
    for n in numbers[1:]:
        if n == run[-1] + 1:
            run.append(n)
        else:
            parts.append(run)
            run = [n]
    parts.append(run)
    return ",".join(f"{r[0]}-{r[-1]}" if len(r) > 1 else str(r[0]) for r in parts)


def _task_specs(chosen: list[Problem], data: str) -> list[str]:
    return [f"kernelbench:{data}:{level}:{_ranges([p.number for p in chosen if p.level == level])}"
            for level in sorted({p.level for p in chosen})]


def _toml_list(items: list[str]) -> str:
    return "[\n" + "".join(f'  "{s}",\n' for s in items) + "]"


def study_file(title: str, out: str, tasks: list[str], jobs: int, target: str, notes: list[str]) -> str:
    lines = [f"# {title}", *[f"# {n}" for n in notes],
             "# Written by scripts/kernelbench_studies.py; run from the repository root (the data is its",
             f"# sibling {DEFAULT_DATA}): kernelwright study run THIS_FILE [flags override keys]", "",
             f'out = "{out}"', f'model = "{MODEL}"', 'regimes = ["search"]', f"tasks = {_toml_list(tasks)}",
             f'target = "{target}"', 'devices = ["cuda:0"]', "max_tokens = 768", f"cell_minutes = {CELL_MINUTES}",
             f"jobs = {jobs}  # every cell begun at once, as a user with one GPU runs it", "slots = 2", "",
             "[eval]", "iters = 50", "compile_baseline = true", ""]
    return "\n".join(lines)


def files(data_dir: Path, data: str) -> dict[str, str]:
    all_problems = problems(data_dir)
    chosen = subset(all_problems)
    out: dict[str, str] = {}
    for level in sorted(LEVEL_SHARE):
        n = sum(p.level == level for p in all_problems)
        out[f"kernelbench-L{level}.toml"] = study_file(
            f"KernelBench level {level}, the dev set: all {n} problems present (21 and up).",
            f"runs/kernelbench-L{level}", [f"kernelbench:{data}:{level}"], n, "cuda",
            ["Triton: --target triton --out runs/kernelbench-L%d-triton." % level])
    kinds = Counter((p.level, p.kind) for p in chosen)
    table = [f"  L{lv} {k}: {c}" for (lv, k), c in sorted(kinds.items())]
    for target in ("cuda", "triton"):
        out[f"kernelbench-subset-{target}.toml"] = study_file(
            f"KernelBench stratified subset ({len(chosen)} problems), {target} target; chosen once by",
            f"runs/kernelbench-subset-{target}", _task_specs(chosen, data), len(chosen), target,
            ["scripts/kernelbench_studies.py (the rule is its docstring) and kept fixed here. Per stratum:",
             *table])
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=ROOT / DEFAULT_DATA,
                    help=f"where the KernelBench folder is read (the files always name it {DEFAULT_DATA})")
    ap.add_argument("--out", type=Path, default=ROOT / "studies")
    ap.add_argument("--check", action="store_true", help="compare with the files there; write nothing")
    ap.add_argument("--list", action="store_true", help="print every problem's kind and whether it is chosen")
    args = ap.parse_args(argv)
    data_dir = args.data
    if not data_dir.is_dir():
        print(f"error: no KernelBench folder at {data_dir}", file=sys.stderr)
        return 2
    if args.list:
        chosen = {p.task_id for p in subset(problems(data_dir))}
        for p in problems(data_dir):
            print(f"{p.task_id:22s} {p.kind:15s} {'*' if p.task_id in chosen else ' '} {p.name}")
    wanted = files(data_dir, DEFAULT_DATA)
    if args.check:
        stale = [n for n, text in wanted.items() if not (args.out / n).is_file() or (args.out / n).read_text() != text]
        print("up to date" if not stale else f"differ from the rule: {', '.join(stale)}")
        return 1 if stale else 0
    args.out.mkdir(parents=True, exist_ok=True)
    for name, text in wanted.items():
        (args.out / name).write_text(text)
        print(args.out / name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
