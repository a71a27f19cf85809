"""Small hand-made study records for the tests of pure functions (log reading, tables, export).

The evaluator is not involved here: these tests check how recorded results are read and counted,
so the EvalResults are written out as a log would hold them.
"""

from __future__ import annotations

from pathlib import Path

from kernelwright.records import EvalResult, Tolerance, Verdict
from kernelwright.study.log import ATTEMPTS, CELLS, append_record
from kernelwright.study.records import StudyAttempt, StudyCell

BUILT = {Verdict.CORRECT, Verdict.NO_CUSTOM_KERNEL, Verdict.WRONG_OUTPUT, Verdict.RUNTIME_ERROR}


def result(verdict: Verdict, speedup: float | None = None, faster: bool = False) -> EvalResult:
    return EvalResult(verdict=verdict, compiled=verdict in BUILT, correct=verdict == Verdict.CORRECT,
                      custom_kernel=verdict == Verdict.CORRECT, speedup=speedup, faster=faster, device="cpu",
                      tolerance=Tolerance(atol=1e-4, rtol=1e-4, dtype="float32"), trials=3,
                      runtime_ms=1.0 if speedup else None)


def attempt(key: str, run: str, turn: int, sample: int, r: EvalResult, prompt: str = "p", code: str = "") -> StudyAttempt:
    task = key.split("/", 2)[2]
    regime = key.split("/")[1]
    return StudyAttempt(id=f"{key}/t{turn}/s{sample}", task_id=task, regime=regime, turn=turn, sample=sample,
                        prompt_hash=f"h-{prompt}", messages=[{"role": "user", "content": prompt}],
                        raw_response=f"```python\n{code or f'# {key} {turn} {sample}'}\n```",
                        code=code or f"# {key} {turn} {sample}", code_hash=f"c-{key}-{turn}-{sample}", eval=r,
                        run=run, cell_key=key, config_hash=key.split("/")[0], level=1)


def cell(key: str, run: str, attempts: list[StudyAttempt], selected: StudyAttempt | None, level: int = 1,
         status: str = "ok") -> StudyCell:
    task = key.split("/", 2)[2]
    regime = key.split("/")[1]
    v = selected.eval if selected else None
    return StudyCell(key=key, task_id=task, regime=regime, config_hash=key.split("/")[0],
                     attempt_ids=[a.id for a in attempts], selected=selected.id if selected else None, reason="test",
                     verdict=v.verdict if v else Verdict.CRASH, speedup=v.speedup if v else None,
                     faster=bool(v and v.faster), custom_kernel=bool(v and v.custom_kernel), run=run, level=level,
                     task_name=task, model="m", status=status)  # type: ignore[arg-type]


def write(folder: Path, cells: list[StudyCell], attempts: list[StudyAttempt]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for a in attempts:
        append_record(folder / ATTEMPTS, a)
    for c in cells:
        append_record(folder / CELLS, c)
    return folder
