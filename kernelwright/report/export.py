"""`kernelwright study export`: training data from study logs, every record traceable to attempt ids.

    sft.jsonl          prompt -> a correct kernel (verdict `correct`: custom code ran, outputs match)
    preferences.jsonl  for one prompt, a better and a worse answer by the ranking key (tier, then
                       measured speedup; a tie makes no pair: ties are not wins)
    reflections.jsonl  candidate, the evaluator's feedback on it, and the next candidate the model
                       wrote after seeing that feedback (multi-turn regimes)

Only attempts of completed cells are used (log.read_study drops those of interrupted cells).
Imported attempts carry no prompt, so they give no SFT or preference record.

Reflection parents: the iterative and agentic regimes build turn t+1's prompt from the best
attempt of turns 0..t by the ranking key (`selection.select(ctx.attempts)`); the Attempt records do
not name it, so it is reconstructed here the same way. An attempt whose notes carry `parent` (an
attempt id) uses that instead. The feedback text is the distilled evaluator report
(strategies/feedback.report) of the parent, which is what those regimes show the model.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from kernelwright.records import Verdict
from kernelwright.strategies import feedback, selection
from kernelwright.study.log import StudyData, read_study
from kernelwright.study.records import StudyAttempt


def _code(a: StudyAttempt) -> str:
    return (a.repaired_code or a.code or "").strip()


def _answer(a: StudyAttempt) -> str:
    """The kernel as an answer: the program that was evaluated, in a fenced block."""
    return f"```python\n{_code(a)}\n```"


def _strength(a: StudyAttempt) -> tuple[int, float]:
    """The ranking key without the generation-order tiebreak: equal keys are a tie."""
    tier, speed, _ = selection.rank_key(a.eval, 0)
    return tier, speed


def sft_pairs(data: StudyData) -> Iterator[dict[str, Any]]:
    seen: set[tuple[str, str]] = set()
    for a in data.all_attempts():
        if not a.messages or a.eval.verdict != Verdict.CORRECT or not a.eval.custom_kernel or not _code(a):
            continue
        if (a.prompt_hash, a.code_hash or "") in seen:
            continue
        seen.add((a.prompt_hash, a.code_hash or ""))
        yield {"attempt_id": a.id, "task_id": a.task_id, "regime": a.regime, "prompt_hash": a.prompt_hash,
               "messages": a.messages, "completion": _answer(a), "code_hash": a.code_hash,
               "speedup": a.eval.speedup, "faster": a.eval.faster}


def preference_pairs(data: StudyData) -> Iterator[dict[str, Any]]:
    by_prompt: dict[str, list[StudyAttempt]] = {}
    for a in data.all_attempts():
        if a.messages and _code(a):
            by_prompt.setdefault(a.prompt_hash, []).append(a)
    for prompt_hash, group in by_prompt.items():
        # one answer per distinct program: the same code twice is no preference
        uniq = list({a.code_hash: a for a in group}.values())
        for i, x in enumerate(uniq):
            for y in uniq[i + 1:]:
                sx, sy = _strength(x), _strength(y)
                if sx == sy:
                    continue
                win, lose = (x, y) if sx > sy else (y, x)
                yield {"prompt_hash": prompt_hash, "messages": win.messages, "task_id": win.task_id,
                       "chosen": _answer(win), "rejected": _answer(lose),
                       "chosen_id": win.id, "rejected_id": lose.id,
                       "chosen_verdict": win.eval.verdict.value, "rejected_verdict": lose.eval.verdict.value,
                       "chosen_tier": selection.TIERS[_strength(win)[0]],
                       "rejected_tier": selection.TIERS[_strength(lose)[0]],
                       "chosen_speedup": win.eval.speedup, "rejected_speedup": lose.eval.speedup}


def reflection_triples(data: StudyData) -> Iterator[dict[str, Any]]:
    for cell in data.cells:
        attempts = data.attempts_of(cell)
        by_id = {a.id: a for a in attempts}
        for a in attempts:
            if a.turn == 0:
                continue
            parent_id = a.notes.get("parent")
            parent = by_id.get(parent_id) if parent_id else selection.select([p for p in attempts if p.turn < a.turn])
            if parent is None:
                continue
            improved = _strength(a) > _strength(parent)
            yield {"cell_key": cell.key, "task_id": a.task_id, "regime": a.regime,
                   "parent_id": parent.id, "candidate": _code(parent) or parent.raw_response,
                   "candidate_verdict": parent.eval.verdict.value, "feedback": feedback.report(parent),
                   "next_id": a.id, "next_candidate": _code(a) or a.raw_response,
                   "next_verdict": a.eval.verdict.value, "improved": improved,
                   "parent_from": "notes" if parent_id else "ranking key over earlier turns"}


def write_jsonl(path: Path, records: Iterator[dict[str, Any]]) -> int:
    n = 0
    with open(path, "w", encoding="utf-8") as f:
        for r in records:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
            n += 1
    return n


def export(folders: list[Path], out: Path) -> dict[str, int]:
    data = read_study(*folders)
    out.mkdir(parents=True, exist_ok=True)
    return {
        "sft.jsonl": write_jsonl(out / "sft.jsonl", sft_pairs(data)),
        "preferences.jsonl": write_jsonl(out / "preferences.jsonl", preference_pairs(data)),
        "reflections.jsonl": write_jsonl(out / "reflections.jsonl", reflection_triples(data)),
    }
