"""Templates render strictly, and every regime's prompt carries the one base task prompt."""

from __future__ import annotations

import jinja2
import pytest

from kernelwright import prompts


def base(**kw):
    v = dict(task_source="class Model: ...", target="cuda", target_name="CUDA", ambition=False, scaffold=None,
             fence="python")
    v.update(kw)
    return v


def test_missing_variable_is_an_error():
    with pytest.raises(jinja2.UndefinedError):
        prompts.render("task", target="cuda")


@pytest.mark.parametrize("target,must", [("cuda", "cuda_sources"), ("cpp", "no GPU"), ("triton", "@triton.jit")])
def test_target_specific_api_facts(target, must):
    text = prompts.render("task", **base(target=target))
    assert must in text and "ModelNew" in text
    assert "sources=" not in text.replace("cpp_sources=", "").replace("cuda_sources=", "") or "no `sources=`" in text


def test_every_generator_prompt_contains_the_base_prompt():
    task = prompts.render("task", **base()).strip()
    guided = prompts.render("guided", **base(), device_name="H200", forward_ms=1.0, profile_lines=["a 50%"],
                            roofline_line="memory-bound")
    iterate = prompts.render("iterate", **base(), best_code="x", report="Verdict: wrong_output")
    agent = prompts.render("agent_generator", **base(), analysis=None, brief=None, best_code=None, feedback=None)
    for text in (guided, iterate, agent):
        assert text.startswith(task)


def test_ambition_changes_only_the_agent_wording():
    calm = prompts.render("agent_generator", **base(), analysis=None, brief=None, best_code=None, feedback=None)
    bold = prompts.render("agent_generator", **base(ambition=True), analysis=None, brief=None, best_code=None, feedback=None)
    assert "keep library GEMM" in calm and "tiled kernels" in bold


def test_feedback_report_distills_the_record():
    from kernelwright.records import Attempt, EvalResult, Mismatch, Verdict
    from kernelwright.strategies import feedback

    r = EvalResult(verdict=Verdict.WRONG_OUTPUT, compiled=True, error="output 0 differs from the reference",
                   mismatch=Mismatch(trial=0, max_abs_diff=0.5, mean_abs_diff=0.01, mismatch_fraction=0.25))
    a = Attempt(id="a", task_id="t", regime="iterative", turn=0, sample=0, prompt_hash="h", messages=[],
                raw_response="", eval=r, repairs=[{"rule": "includes", "message": "removed #include \"x.cu\""}])
    text = feedback.report(a)
    assert "wrong_output" in text and "max abs diff 0.5" in text and "25.0% of elements" in text
    assert "removed #include" in text and "Timing" not in text
