"""Every region answer on record, plus the oracle's regions and broken mutants of them.

Shared by benchmarks/precheck_confusion.py (the confusion matrix against the full evaluator) and
the pre-check tests (a few real answers of each kind). Sources:

* study logs under docs/results/: attempts.jsonl(.gz) of scaffolded runs (the region is read back
  from the judged program, between the markers), also inside the sessions' *.tar.xz archives, and
  the *-regions.jsonl files of the prompt studies;
* replay transcripts of scaffolded runs (tests/fixtures/transcripts/*_scaffold.jsonl), spliced with
  today's splicer (the task is the one whose kernel the prompt shows);
* fresh samples of the embedded model (benchmarks/precheck_fresh.py: docs/results/precheck-confusion/fresh.jsonl);
* the test oracle's correct region per task and target (kernelwright/scaffold/oracle.py), and mutants of
  it: plus one, a dropped term, a wrong constant, an undefined name, the empty region. The H200
  sweep of benchmarks/scaffold_check.py (docs/results/scaffold-gpu.md) gives the evaluator's
  verdicts on the oracle, plus-one and empty regions for CUDA and Triton.

Answers are deduplicated per (task, target, region text).
"""

from __future__ import annotations

import gzip
import io
import json
import re
import tarfile
from pathlib import Path
from typing import Iterator, Optional

from pydantic import BaseModel

from kernelwright.scaffold import Scaffold, ScaffoldPlan, assemble, write

ROOT = Path(__file__).resolve().parents[1]


class RegionAnswer(BaseModel):
    task_id: str
    target: str  # cpp | cuda | triton
    region: str
    source: str  # where it was found: a file, or "oracle" / "mutant:<kind>"
    recorded_verdict: Optional[str] = None  # the evaluator's verdict when it was recorded, if any


def _rows(path: Path) -> Iterator[dict]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as f:
        yield from _json_lines(f)


def _json_lines(lines) -> Iterator[dict]:
    for line in lines:
        if line.strip():
            yield json.loads(line)


def _archived_attempts(archive: Path) -> Iterator[tuple[str, list[dict]]]:
    """The attempts.jsonl(.gz) logs inside a session's archive: (archive/member, rows)."""
    with tarfile.open(archive, "r:xz") as tar:
        for member in tar.getmembers():
            name = Path(member.name).name
            if member.isfile() and name in ("attempts.jsonl", "attempts.jsonl.gz"):
                data = tar.extractfile(member).read()  # type: ignore[union-attr]
                text = gzip.decompress(data).decode() if name.endswith(".gz") else data.decode()
                yield f"{archive.relative_to(ROOT)}/{member.name}", list(_json_lines(io.StringIO(text)))


def region_between_markers(code: str) -> Optional[str]:
    if "REGION BEGIN" not in code or "REGION END" not in code:
        return None
    inner = code.split("REGION BEGIN", 1)[1].split("REGION END", 1)[0]
    lines = inner.split("\n")[1:-1]  # the rest of the BEGIN line; the comment leader before END
    indent = min((len(ln) - len(ln.lstrip()) for ln in lines if ln.strip()), default=0)
    return "\n".join(ln[indent:] for ln in lines)


def target_of(code: str) -> str:
    return "triton" if "@triton.jit" in code else "cuda" if "cuda_sources" in code else "cpp"


def _from_attempts(rows, source: str) -> Iterator[RegionAnswer]:
    for r in rows:
        code = r.get("code") or ""
        region = region_between_markers(code)
        if region is None or not r.get("task_id"):
            continue
        verdict = (r.get("eval") or {}).get("verdict")
        yield RegionAnswer(task_id=r["task_id"], target=target_of(code), region=region,
                           source=source, recorded_verdict=verdict)


def _from_region_logs(path: Path) -> Iterator[RegionAnswer]:
    # the prompt studies on the CPU: C++ regions, each with the verdict it got
    for r in _rows(path):
        yield RegionAnswer(task_id=r["task"], target="cpp", region=r["region"], source=str(path.relative_to(ROOT)),
                           recorded_verdict=r.get("verdict"))


def _from_fresh(path: Path) -> Iterator[RegionAnswer]:
    # benchmarks/precheck_fresh.py: new samples of the embedded model, already spliced
    for r in _rows(path):
        yield RegionAnswer(task_id=r["task_id"], target=r["target"], region=r["region"], source=r["source"])


def _prompt_target(prompt: str) -> str:
    return "cpp" if "C++ (CPU)" in prompt else "triton" if "Triton" in prompt else "cuda"


def _from_transcripts(path: Path, scaffolds: dict[tuple[str, str], Scaffold]) -> Iterator[RegionAnswer]:
    for r in _rows(path):
        prompt = "\n".join(m["content"] for m in r["request"]["messages"])
        target = _prompt_target(prompt)
        match = [sc for (tid, tg), sc in scaffolds.items() if tg == target and sc.kernel_view in prompt]
        if len(match) != 1:
            continue  # an analysis turn, or a prompt of another shape
        for c in r["completions"]:
            region = assemble(match[0], c["text"]).region
            yield RegionAnswer(task_id=match[0].task_id, target=target, region=region,
                               source=str(path.relative_to(ROOT)))


def recorded(plans: dict[str, ScaffoldPlan]) -> list[RegionAnswer]:
    """Every recorded region answer whose task has a scaffold today."""
    scaffolds = {(tid, tg): write(p, tg) for tid, p in plans.items() if p.available for tg in ("cpp", "cuda", "triton")}
    found: list[RegionAnswer] = []
    for path in sorted((ROOT / "docs" / "results").rglob("attempts.jsonl*")):
        found += _from_attempts(_rows(path), str(path.relative_to(ROOT)))
    for archive in sorted((ROOT / "docs" / "results").rglob("*.tar.xz")):
        for source, rows in _archived_attempts(archive):
            found += _from_attempts(rows, source)
    for path in sorted((ROOT / "docs" / "results").rglob("*-regions.jsonl")):
        found += _from_region_logs(path)
    for path in sorted((ROOT / "tests" / "fixtures" / "transcripts").glob("*_scaffold.jsonl")):
        found += _from_transcripts(path, scaffolds)
    fresh = ROOT / "docs" / "results" / "precheck-confusion" / "fresh.jsonl"
    if fresh.exists():
        found += _from_fresh(fresh)
    return [a for a in found if (a.task_id, a.target) in scaffolds]


# ---- the oracle and its mutants ------------------------------------------------------------------

# innermost parenthesized binary expression: `(a OP b)` with no parentheses inside
INNER_BINARY = re.compile(r"\(([^()]+?) ([+\-*/]) ([^()]+?)\)")
FLOAT_LITERAL = re.compile(r"(?<![\w.])(\d+\.\d+)(f?)(?![\w.])")
C_CALL = re.compile(r"\b(expf|erff|tanhf|logf|log1pf|sqrtf|fmaxf|fminf|fabsf|powf)\(")
PY_CALL = re.compile(r"\btl\.(exp|erf|log|sqrt|rsqrt|maximum|minimum|abs|sigmoid|where|sum|max)\(")


def mutants(sc: Scaffold, correct: str) -> list[tuple[str, str]]:
    """(kind, region): deliberately broken versions of a correct region."""
    out: list[tuple[str, str]] = [("empty", "")]
    m = INNER_BINARY.search(correct)
    if m:  # keep the left operand only: a dropped term or factor
        out.append(("dropped_term", correct[:m.start()] + f"({m.group(1)})" + correct[m.end():]))
    lit = FLOAT_LITERAL.search(correct)
    if lit and float(lit.group(1)) != 0.0:
        wrong = repr(float(lit.group(1)) * 1.25)
        out.append(("wrong_constant", correct[:lit.start()] + wrong + lit.group(2) + correct[lit.end():]))
    else:
        bump = " + 0.25f" if sc.language != "python" else " + 0.25"
        out.append(("wrong_constant", _bump_result(correct, bump)))
    call = (PY_CALL if sc.language == "python" else C_CALL).search(correct)
    if call:  # a helper that does not exist
        name = call.group(0)[:-1]
        out.append(("undefined_name", correct[:call.start()] + name + "_fast(" + correct[call.end():]))
    else:
        term = " * scale_factor" if sc.language == "python" else " * scale_factor"
        out.append(("undefined_name", _bump_result(correct, term)))
    return out


def _bump_result(region: str, term: str) -> str:
    """The region with `term` appended to its last assignment's value."""
    lines = region.rstrip().splitlines()
    last = lines[-1]
    if last.endswith(";"):
        lines[-1] = last[:-1] + term + ";"
    else:
        lines[-1] = last + term
    return "\n".join(lines)


def sweep_verdicts() -> dict[tuple[str, str, str], str]:
    """(task, target, variant) -> verdict from the H200 sweep of benchmarks/scaffold_check.py
    (docs/results/scaffold-gpu.md): the full evaluator on the oracle's region ("correct"), the
    empty region and the oracle's region plus one ("wrong"), for CUDA and Triton."""
    path = ROOT / "docs" / "results" / "scaffold-gpu.md"
    out: dict[tuple[str, str, str], str] = {}
    if not path.exists():
        return out
    for line in path.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 7 and cells[0].startswith("builtin/") and cells[1] in ("cuda", "triton"):
            for variant, cell in zip(("correct", "empty", "wrong"), cells[3:6]):
                out[(cells[0], cells[1], variant)] = cell.split()[0]
    return out


def oracle_and_mutants(plans: dict[str, ScaffoldPlan], targets: list[str]) -> list[RegionAnswer]:
    from kernelwright.scaffold.oracle import Unsupported, region

    sweep = sweep_verdicts()
    out: list[RegionAnswer] = []
    for tid, p in plans.items():
        if not p.available:
            continue
        for tg in targets:
            sc = write(p, tg)
            try:
                good = region(sc)
            except Unsupported:
                continue
            out.append(RegionAnswer(task_id=tid, target=tg, region=good, source="oracle",
                                    recorded_verdict=sweep.get((tid, tg, "correct"))))
            out.append(RegionAnswer(task_id=tid, target=tg, region=region(sc, wrong=True), source="mutant:plus_one",
                                    recorded_verdict=sweep.get((tid, tg, "wrong"))))
            for kind, text in mutants(sc, good):
                verdict = sweep.get((tid, tg, "empty")) if kind == "empty" else None
                out.append(RegionAnswer(task_id=tid, target=tg, region=text, source=f"mutant:{kind}",
                                        recorded_verdict=verdict))
    return out


def dedupe(answers: list[RegionAnswer]) -> list[RegionAnswer]:
    seen: dict[tuple[str, str, str], RegionAnswer] = {}
    for a in answers:
        key = (a.task_id, a.target, a.region.strip())
        if key not in seen:
            seen[key] = a
    return list(seen.values())
