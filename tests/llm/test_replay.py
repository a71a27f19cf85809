"""Record and replay: the test double every other part of kernelwright tests against."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from kernelwright.llm import BackendError, Completion, GenerationRequest, make_backend
from kernelwright.llm.replay import Recording, RecordingBackend, ReplayBackend, read_recordings, request_key

REQ = GenerationRequest.chat("Write a fused bias+ReLU kernel.", system="You write CUDA.", n=2, seed=7, max_tokens=64)


def completion(text: str) -> Completion:
    return Completion(text=text, finish_reason="stop", prompt_tokens=30, completion_tokens=12, latency_s=0.5)


def write(path: Path, *recs: tuple[str, GenerationRequest, list[Completion]]) -> None:
    with open(path, "a") as f:
        for model, req, comps in recs:
            rec = Recording(
                key=request_key(req, model), model=model, request=req, completions=comps, recorded_at=time.time()
            )
            f.write(rec.model_dump_json() + "\n")


def test_key_covers_messages_sampling_and_model() -> None:
    key = request_key(REQ, "m")
    assert len(key) == 64 and key == request_key(GenerationRequest.model_validate_json(REQ.model_dump_json()), "m")
    assert key != request_key(REQ, "other")
    for change in (
        {"temperature": 0.0},
        {"top_k": 0},
        {"seed": 8},
        {"n": 3},
        {"max_tokens": 65},
        {"repeat_penalty": 1.0},
    ):
        assert request_key(REQ.model_copy(update=change), "m") != key


def test_replay_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "rec.jsonl"
    answers = [completion("a"), completion("b")]
    write(path, ("m", REQ, answers))
    assert make_backend(f"replay:{path}").generate([REQ]) == [answers]


def test_record_then_replay_gives_identical_completions(tmp_path: Path) -> None:
    source = tmp_path / "source.jsonl"
    other = REQ.model_copy(update={"n": 1, "temperature": 0.0})
    write(source, ("m", REQ, [completion("a"), completion("b")]), ("m", other, [completion("g")]))
    recorded = tmp_path / "out" / "recorded.jsonl"
    recorder = make_backend(f"record:{recorded}=replay:{source}")
    assert isinstance(recorder, RecordingBackend)
    first = recorder.generate([REQ, other])
    assert len(read_recordings(recorded)) == 2  # one line per request, on disk already
    assert make_backend(f"replay:{recorded}").generate([REQ, other]) == first


def test_unrecorded_request_is_an_error_naming_its_hash(tmp_path: Path) -> None:
    path = tmp_path / "rec.jsonl"
    write(path, ("m", REQ, [completion("a"), completion("b")]))
    new = REQ.model_copy(update={"seed": 8})
    with pytest.raises(BackendError) as e:
        ReplayBackend(path).generate([new])
    assert request_key(new, "m") in str(e.value) and "\n" not in str(e.value)


def test_repeated_recordings_are_served_in_order(tmp_path: Path) -> None:
    path = tmp_path / "rec.jsonl"
    req = REQ.model_copy(update={"seed": None, "n": 1})
    write(path, ("m", req, [completion("first")]), ("m", req, [completion("second")]))
    backend = ReplayBackend(path)
    assert [backend.generate([req])[0][0].text for _ in range(3)] == ["first", "second", "second"]


def test_file_with_several_models_needs_one_named(tmp_path: Path) -> None:
    path = tmp_path / "rec.jsonl"
    write(path, ("m1", REQ, [completion("a"), completion("b")]), ("m2", REQ, [completion("c"), completion("d")]))
    with pytest.raises(BackendError, match="several models"):
        make_backend(f"replay:{path}")
    assert make_backend(f"replay:{path}#m2").generate([REQ])[0][1].text == "d"


def test_bad_files_are_clear_errors(tmp_path: Path) -> None:
    with pytest.raises(BackendError, match="replay file not found"):
        make_backend(f"replay:{tmp_path / 'nope.jsonl'}")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"key": 1}\n')
    with pytest.raises(BackendError, match="bad.jsonl:1: not a recording"):
        make_backend(f"replay:{bad}")


@pytest.mark.slow
def test_record_real_model_then_replay(small_model: Path, tmp_path: Path) -> None:
    pytest.importorskip("llama_cpp", reason="llama-cpp-python not installed (pip install 'kernelwright[local]')")
    path = tmp_path / "real.jsonl"
    reqs = [REQ.model_copy(update={"max_tokens": 24}), GenerationRequest.chat("Say hi.", temperature=0.0, max_tokens=8)]
    live = make_backend(f"record:{path}=gguf:{small_model}").generate(reqs)
    assert [len(r) for r in live] == [2, 1] and all(c.completion_tokens > 0 for r in live for c in r)
    assert make_backend(f"replay:{path}").generate(reqs) == live


def test_recordings_made_before_grammars_still_replay(tmp_path: Path) -> None:
    """A line as written before GenerationRequest.grammar and Completion.constrained existed keeps
    its key (the key of a request without a grammar leaves the field out) and loads."""
    import hashlib
    import json

    old_request = REQ.model_dump(mode="json")
    del old_request["grammar"]
    old_completion = completion("answer").model_dump(mode="json")
    del old_completion["constrained"]
    payload = json.dumps({"model": "m", **old_request}, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    line = {"key": hashlib.sha256(payload.encode()).hexdigest(), "model": "m", "request": old_request,
            "completions": [old_completion, old_completion], "recorded_at": 0.0}
    path = tmp_path / "old.jsonl"
    path.write_text(json.dumps(line) + "\n")
    [got] = ReplayBackend(path).generate([REQ])
    assert [c.text for c in got] == ["answer", "answer"] and not any(c.constrained for c in got)
    # a constrained request is another request: its answers were never recorded
    with pytest.raises(BackendError, match="no recording"):
        ReplayBackend(path).generate([REQ.model_copy(update={"grammar": 'root ::= "y"'})])


def test_a_feedback_prompt_with_other_measurements_gets_the_recorded_answer(tmp_path: Path) -> None:
    # the judge draws every check's inputs from secret seeds: the numbers a mismatch quotes change
    said = "output 0 differs: max abs diff {}, relative error of the whole output {}; fix the line at 12"
    recorded = GenerationRequest.chat(said.format("20.9", "0.883"), n=1, seed=3)
    path = tmp_path / "rec.jsonl"
    write(path, ("m", recorded, [completion("fixed")]))
    backend = make_backend(f"replay:{path}")
    assert backend.generate([GenerationRequest.chat(said.format("237.0", "1.5e-03"), n=1, seed=3)]) == [
        [completion("fixed")]]
    # other words, another integer (a line, a size) or another seed are other requests
    for other in (said.replace("fix", "rewrite"), said.replace("12", "13")):
        with pytest.raises(BackendError, match="no recording"):
            backend.generate([GenerationRequest.chat(other.format("20.9", "0.883"), n=1, seed=3)])
    with pytest.raises(BackendError, match="no recording"):
        backend.generate([recorded.model_copy(update={"seed": 4})])



def test_a_feedback_report_of_another_draw_has_the_recorded_loose_key(tmp_path: Path) -> None:
    """Two draws of one candidate differ only in what the judge measured, also where a measurement
    rounds to a whole number (max abs diff 124.2, 1235 ms) or counts elements (NaN/Inf): their
    feedback reports get one loose key."""
    from kernelwright.llm.replay import loose_key
    from kernelwright.records import Attempt, EvalResult, Mismatch, Verdict, measured
    from kernelwright.strategies.feedback import report

    def prompt(max_diff: float, nonfinite: int, ms: float) -> GenerationRequest:
        m = Mismatch(trial=0, max_abs_diff=max_diff, mean_abs_diff=max_diff / 1e4, mismatch_fraction=nonfinite / 50,
                     relative_error=max_diff / 4, nonfinite_in_candidate=nonfinite, elements=64000)
        r = EvalResult(verdict=Verdict.WRONG_OUTPUT, mismatch=m, error=f"output 0 differs; {m.summary()}",
                       runtime_ms=ms, ref_runtime_ms=2 * ms, speedup=2.0, faster=True)
        a = Attempt(id="a", task_id="t", regime="iterative", turn=0, sample=0, prompt_hash="h", messages=[],
                    raw_response="", eval=r)
        return GenerationRequest.chat(report(a), n=1, seed=3)

    first, second = prompt(20.9, 3, 1.234), prompt(124.2, 7, 1235.0)
    said = second.messages[-1].content
    assert "max abs diff 124.0" in said and "1235.0 ms" in said and "NaN/Inf where the reference is finite in" in said
    assert request_key(first, "m") != request_key(second, "m")
    assert loose_key(first, "m") == loose_key(second, "m")
    assert [measured(x) for x in (124.2, 0.5, 1e-5, 2e6, 3.0)] == ["124.0", "0.5", "1e-05", "2e+06", "3.0"]
    path = tmp_path / "rec.jsonl"
    write(path, ("m", first, [completion("fixed")]))
    assert make_backend(f"replay:{path}").generate([second]) == [[completion("fixed")]]
