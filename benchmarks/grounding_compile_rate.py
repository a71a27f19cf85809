"""What grounding buys: the compile rate of recorded model answers with and without it.

    python benchmarks/grounding_compile_rate.py                       # the fixture answers
    python benchmarks/grounding_compile_rate.py more/*.txt log.jsonl --out docs/results/grounding.md

Each answer is evaluated twice by the real evaluator in compile-only mode (on a CPU build of torch,
CUDA sources are compiled to object files with nvcc and not linked): once as the model wrote it, once
after `ground()`. An answer counts as compiled only when the verdict is `compiled` *and* the build
produced at least one object file: a candidate whose load_inline never runs at import (it sits in a
lambda or in forward) imports fine but compiles nothing, and is shown as "imported, nothing built".

Answers: the fixture answers in /work/shared/fixtures/small-model-answers by default, plus any files
given: .txt/.md hold one raw answer; .jsonl holds one per line (the first of raw_response, text,
content, answer, completion, code). The task defaults to tests/fixtures/tasks/bias_relu.py, the
module the fixture answers were asked to rewrite.
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kernelwright.evaluate import EvalRun, evaluate  # noqa: E402
from kernelwright.extract import extract_code  # noqa: E402
from kernelwright.grounding.ground import RULES, GroundingReport, ground  # noqa: E402
from kernelwright.records import EvalResult, Task  # noqa: E402

FIXTURES = Path("/work/shared/fixtures/small-model-answers")
DEFAULT_TASK = ROOT / "tests" / "fixtures" / "tasks" / "bias_relu.py"
_TEXT_KEYS = ("raw_response", "text", "content", "answer", "completion", "code")


@dataclass
class Answer:
    name: str
    text: str


@dataclass
class Outcome:
    verdict: str
    built: bool  # compiled, with at least one object file or shared library produced
    error: str = ""
    seconds: float = 0.0

    @property
    def label(self) -> str:
        if self.built:
            return "**compiled**"
        if self.verdict == "compiled":
            return "imported, nothing built"
        return self.verdict


@dataclass
class Row:
    answer: Answer
    before: Outcome
    after: Outcome
    report: Optional[GroundingReport] = None
    notes: list[str] = field(default_factory=list)


def load_answers(paths: list[str], with_fixtures: bool) -> list[Answer]:
    answers = []
    if with_fixtures:
        answers += [Answer(p.name, p.read_text()) for p in sorted(FIXTURES.glob("*.txt"))]
    for raw in paths:
        path = Path(raw)
        if path.suffix == ".jsonl":
            for i, line in enumerate(path.read_text().splitlines()):
                if line.strip():
                    record = json.loads(line)
                    text = next((record[k] for k in _TEXT_KEYS if isinstance(record.get(k), str)), None)
                    if text is not None:
                        answers.append(Answer(f"{path.name}:{i + 1}", text))
        else:
            answers.append(Answer(path.name, path.read_text()))
    return answers


def compile_only(task: Task, text: str, root: Path, timeout: float) -> Outcome:
    """One compile-only evaluation with a build cache of its own, so its artifacts can be counted."""
    cache = Path(tempfile.mkdtemp(prefix="kw-ground-", dir=root))
    started = time.monotonic()
    result: EvalResult = evaluate(task, text, EvalRun.of(compile_only=True, device="cuda", cache_dir=str(cache),
                                                         timeout=timeout))
    artifacts = [p for p in (cache / "builds").rglob("*") if p.suffix in (".o", ".so")] \
        if (cache / "builds").exists() else []
    built = result.verdict.value == "compiled" and bool(artifacts)
    error = (result.error or "").strip().splitlines()[0][:160] if result.error else ""
    shutil.rmtree(cache, ignore_errors=True)
    return Outcome(result.verdict.value, built, error, time.monotonic() - started)


def run(answers: list[Answer], task: Task, target: str, timeout: float) -> list[Row]:
    rows = []
    with tempfile.TemporaryDirectory(prefix="kw-grounding-bench-") as tmp:
        root = Path(tmp)
        for answer in answers:
            before = compile_only(task, answer.text, root, timeout)
            code = extract_code(answer.text)
            if code is None:
                rows.append(Row(answer, before, before))
                continue
            report = ground(code, target)
            after = compile_only(task, report.code, root, timeout) if report.changed else before
            rows.append(Row(answer, before, after, report))
            logging.info("%s: %s -> %s (%d repairs)", answer.name, before.label, after.label, len(report.repairs))
    return rows


def _rules(report: Optional[GroundingReport]) -> str:
    if report is None or not report.repairs:
        return "none"
    counts = Counter(r.rule for r in report.repairs)
    return ", ".join(f"{rule}×{n}" if n > 1 else rule for rule, n in counts.items())


def _versions() -> str:
    import torch

    try:
        nvcc = subprocess.run(["nvcc", "--version"], capture_output=True, text=True, timeout=30).stdout
        nvcc = next((line.split("release")[-1].split(",")[0].strip() for line in nvcc.splitlines()
                     if "release" in line), "?")
    except (OSError, subprocess.SubprocessError):
        nvcc = "missing"
    return f"torch {torch.__version__}, nvcc {nvcc}, Python {sys.version.split()[0]}"


def render(rows: list[Row], command: str, task: Path, seconds: float) -> str:
    n = len(rows)
    before = sum(r.before.built for r in rows)
    after = sum(r.after.built for r in rows)
    out = [
        "# Grounding: compile rate before and after",
        "",
        f"Command: `{command}`",
        "",
        f"Task: `{task.relative_to(ROOT) if task.is_relative_to(ROOT) else task}`; evaluator in compile-only mode "
        f"(`EvalRun.of(compile_only=True, device=\"cuda\")`); {_versions()}; wall time {seconds / 60:.1f} min.",
        "",
        f"**Compile rate: {before}/{n} before grounding, {after}/{n} after.**",
        "",
        "Compiled means the verdict is `compiled` and the build produced object files (CUDA compiled by nvcc, "
        "C++ by the host compiler; on this CPU build of torch nothing is linked or run). It says nothing about "
        "correctness: the errors grounding left are listed per answer below.",
        "",
        "| answer | before | after | repairs applied | errors left |",
        "|---|---|---|---|---|",
    ]
    for r in rows:
        errors = len(r.report.errors) if r.report else 0
        out.append(f"| {r.answer.name} | {r.before.label} | {r.after.label} | {_rules(r.report)} | {errors} |")
    out += ["", "## Rules (kernelwright/grounding/ground.py, `RULES`)", "",
            "| rule | kind | what it does |", "|---|---|---|"]
    out += [f"| {rule.name} | {rule.kind} | {rule.description} |" for rule in RULES.values()]
    out += ["", "## Per answer", ""]
    for r in rows:
        out.append(f"### {r.answer.name}")
        out.append(f"- before: {r.before.label}" + (f" — `{r.before.error}`" if r.before.error else ""))
        out.append(f"- after: {r.after.label}" + (f" — `{r.after.error}`" if r.after.error else ""))
        if r.report is not None:
            out += [f"- repaired ({x.rule}, line {x.line}): {x.message}" for x in r.report.repairs]
            out += [f"- still wrong ({x.rule}, line {x.line}): {x.message}" for x in r.report.errors]
        out.append("")
    return "\n".join(out)


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("answers", nargs="*", help=".txt/.md answers or .jsonl logs, in addition to the fixtures")
    ap.add_argument("--no-fixtures", action="store_true", help="only the answers given")
    ap.add_argument("--task", default=str(DEFAULT_TASK))
    ap.add_argument("--target", default="cuda", choices=("cuda", "cpp", "triton"))
    ap.add_argument("--timeout", type=float, default=900.0, help="per evaluation, build included")
    ap.add_argument("--out", help="write the markdown table here (e.g. docs/results/grounding.md)")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    logging.getLogger("kernelwright.grounding.ground").setLevel(logging.WARNING)
    task_path = Path(args.task).resolve()
    task = Task(id=f"file/{task_path.stem}", name=task_path.stem, path=str(task_path), source=task_path.read_text())
    answers = load_answers(args.answers, not args.no_fixtures)
    if not answers:
        ap.error("no answers to evaluate")
    started = time.monotonic()
    rows = run(answers, task, args.target, args.timeout)
    command = "python benchmarks/grounding_compile_rate.py " + " ".join(argv if argv is not None else sys.argv[1:])
    text = render(rows, command.strip(), task_path, time.monotonic() - started)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
