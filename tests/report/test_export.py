"""`kernelwright study export`: SFT pairs, preference pairs, reflection triples, traceable to attempts."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from kernelwright.cli.main import app
from kernelwright.records import Verdict
from tests.study._records import attempt, cell, result, write


def read(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_export_from_a_multi_turn_cell(tmp_path):
    key = "h/iterative+turns=2/builtin/L1/03_softmax"
    t0 = [attempt(key, "r", 0, 0, result(Verdict.COMPILE_ERROR), prompt="task", code="broken"),
          attempt(key, "r", 0, 1, result(Verdict.WRONG_OUTPUT), prompt="task", code="wrong"),
          attempt(key, "r", 0, 2, result(Verdict.WRONG_OUTPUT), prompt="task", code="wrong too")]
    t1 = [attempt(key, "r", 1, 0, result(Verdict.CORRECT, speedup=1.5, faster=True), prompt="feedback", code="good")]
    # a killed earlier run of the same cell: its attempt must not reach the training data
    stale = attempt(key, "killed", 0, 0, result(Verdict.CORRECT), prompt="task", code="stale")
    study = write(tmp_path / "s", [cell(key, "r", [*t0, *t1], t1[0])], [stale, *t0, *t1])
    out = tmp_path / "export"
    r = CliRunner().invoke(app, ["study", "export", str(study), "--out", str(out)])
    assert r.exit_code == 0, r.output

    sft = read(out / "sft.jsonl")
    assert [s["attempt_id"] for s in sft] == [t1[0].id] and "good" in sft[0]["completion"]
    assert sft[0]["messages"] == t1[0].messages

    prefs = read(out / "preferences.jsonl")
    pairs = {(p["chosen_id"], p["rejected_id"]) for p in prefs}
    # wrong_output (it built) beats compile_error; the two wrong outputs tie: no pair between them
    assert pairs == {(t0[1].id, t0[0].id), (t0[2].id, t0[0].id)}
    assert all(p["prompt_hash"] == t0[0].prompt_hash for p in prefs)

    [refl] = read(out / "reflections.jsonl")
    # turn 1 was written from the best of turn 0 by the ranking key: the first wrong_output
    assert refl["parent_id"] == t0[1].id and refl["next_id"] == t1[0].id and refl["improved"]
    assert refl["candidate"] == "wrong" and refl["next_candidate"] == "good" and "wrong_output" in refl["feedback"]
    assert all("stale" not in line for line in (out / "sft.jsonl").read_text().splitlines())
