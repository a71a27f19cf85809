"""search a line at a time (strategies/search/steps.py): a region of several elementwise lines is
sampled a line at a time, each line pre-checked alone, the wrong line alone asked again with its
counterexample, the region composed from the lines that passed and built. A scripted backend
answers by the line each prompt asks for; the pre-check and the build are real."""

from __future__ import annotations

import pytest

from kernelwright.llm.base import Completion
from kernelwright.strategies import parse_regime
from kernelwright.strategies import search as S
from kernelwright.strategies.search import steps

TASK = "builtin/L2/09_conv2d_softplus_scale_bias"  # softplus(x) * 1.75 + channel_bias: three lines
SOFTPLUS_WRONG = "y = std::exp(x);"
SOFTPLUS_RIGHT = "y = x > 20.0f ? x : std::log1p(std::exp(x));"


class ByLine:
    """Answers each request by the torch line its prompt shows; softplus wrong until it is told why."""

    model = "by-line"
    fence = "cpp"

    def __init__(self) -> None:
        self.requests = []

    def answer(self, request) -> str:
        prompt = request.messages[1].content
        if "softplus" in prompt:
            return SOFTPLUS_RIGHT if len(request.messages) > 2 else SOFTPLUS_WRONG
        if "y = x * 1.75" in prompt:
            return "y = x * 1.75f;"
        return "y = x + channel_bias;"

    def generate(self, requests):
        self.requests += requests
        return [[Completion(text=f"```{self.fence}\n{self.answer(r)}\n```", finish_reason="stop", prompt_tokens=10,
                            completion_tokens=5, latency_s=0.1) for _ in range(r.n)] for r in requests]


def _run(spec: str, backend, build_cache=None):
    from kernelwright.evaluate import EvalRun
    from kernelwright.strategies.base import RunContext
    from kernelwright.tasks import load_tasks

    task = next(t for t in load_tasks("builtin") if t.id == TASK)
    ctx = RunContext(task=task, backend=backend, config=parse_regime(spec, target="cpp", scaffold=True),
                     eval_run=EvalRun.of(device="cpu", trials=2, time=False, timeout=300.0,
                                            cache_dir=str(build_cache) if build_cache else None), cell_key="k")
    S.run(ctx)
    return ctx


@pytest.mark.build
def test_only_the_wrong_line_is_asked_again_and_the_composed_region_is_verified(build_cache):
    backend = ByLine()
    ctx = _run("search+n=2+turns=3+no_tune+no_parts", backend, build_cache)
    # turn 0: one request a line; turn 1: only the softplus line, as a follow-up with its counterexample,
    # sampled hotter
    assert [r.temperature for r in backend.requests] == [S.DEFAULT_TEMPERATURE] * 3 + [
        S.DEFAULT_TEMPERATURE + steps.HEAT_STEP]
    shown = [r.messages[1].content for r in backend.requests]
    assert len(shown) == 4 and "softplus" in shown[0] and "y = x * 1.75" in shown[1]
    assert "y = x + channel_bias" in shown[2] and "softplus" in shown[3]
    repair = backend.requests[3].messages
    assert [m.role for m in repair] == ["system", "user", "assistant", "user"]
    assert SOFTPLUS_WRONG in repair[2].content and "PyTorch gives" in repair[3].content
    # every sample recorded; none built on its own; the composed region built once, correct
    lines = [a for a in ctx.attempts if "line" in a.notes["search"]]
    assert len(lines) == 8 and not any(a.notes["search"]["built"] or a.code for a in lines)
    assert [a.eval.verdict.value for a in lines if a.notes["search"]["line"] == 1] == \
        ["wrong_output", "wrong_output", "not_built", "not_built"]
    [composed] = [a for a in ctx.attempts if a.notes["search"].get("composed")]
    assert composed.eval.verdict.value == "correct" and composed.eval.custom_kernel
    assert composed.usage.completion_tokens == 0 and composed.turn == 1
    sources = {a.id: a for a in ctx.attempts}
    assert [sources[i].notes["search"]["line"] for i in composed.notes["search"]["composed"]] == [1, 2, 3]
    assert SOFTPLUS_RIGHT in composed.raw_response and "float v1;" in composed.raw_response


@pytest.mark.build  # the C++ pre-check runs the compiler (CI's tier watch saw cc1plus: 341bb51)
def test_no_steps_samples_the_whole_region():
    """+no_steps: the whole region's prompt (all three lines), and no line attempts. Refuted by the
    real pre-check (no evaluator build)."""
    backend = ByLine()
    ctx = _run("search+n=1+turns=1+no_steps", backend)
    [request] = backend.requests
    prompt = request.messages[1].content
    assert "softplus" in prompt and "1.75" in prompt and "channel_bias" in prompt
    assert not any("line" in a.notes["search"] for a in ctx.attempts)


class OracleLines:
    """Answers each line's prompt with the oracle's region for that line (Triton), found by the
    line the prompt shows: a scripted model that writes every line right."""

    model = "oracle-lines"

    def __init__(self, steps) -> None:
        from kernelwright.scaffold import write
        from kernelwright.scaffold.oracle import region

        self.answers = sorted(((st.line, region(write(st.plan, "triton"))) for st in steps),
                              key=lambda p: -len(p[0]))  # the longest line first: one may hold another
        self.requests = []

    def generate(self, requests):
        self.requests += requests
        out = []
        for r in requests:
            prompt = r.messages[1].content
            text = next(a for line, a in self.answers if line in prompt)
            out.append([Completion(text=f"```python\n{text}\n```", finish_reason="stop", prompt_tokens=10,
                                   completion_tokens=5, latency_s=0.1)] * r.n)
        return out


@pytest.mark.slow  # the composed region evaluated under the Triton interpreter, in the GEMM skeleton
def test_a_gemms_epilogue_is_searched_a_line_at_a_time_and_built_in_the_gemm_skeleton(build_cache):
    """search on a Linear + GELU + scale task (Triton): one request a line of the epilogue, none for
    the GEMM, and the composed region built in the GEMM skeleton (the K loop's tl.dot in the program)
    and correct."""
    import importlib.util

    if importlib.util.find_spec("triton") is None:
        pytest.skip("triton is not installed")
    from kernelwright.evaluate import EvalRun
    from kernelwright.scaffold import plan_task
    from kernelwright.scaffold.steps import split
    from kernelwright.strategies.base import RunContext
    from kernelwright.tasks import load_task

    task = load_task("builtin/L2/01_linear_gelu_scale")
    steps = split(plan_task(task).for_target("triton"))
    backend = OracleLines(steps)
    ctx = RunContext(task=task, backend=backend,
                     config=parse_regime("search+n=1+turns=1+no_tune", target="triton", scaffold=True),
                     eval_run=EvalRun.of(device="cpu", trials=2, time=False, timeout=300.0,
                                            cache_dir=str(build_cache), extra_env={"TRITON_INTERPRET": "1"}),
                     cell_key="k")
    S.run(ctx)
    assert len(backend.requests) == len(steps) >= 2
    assert not any("self.linear" in r.messages[1].content.split("```")[1] for r in backend.requests)
    [composed] = [a for a in ctx.attempts if a.notes["search"].get("composed")]
    assert "tl.dot" in composed.code
    assert composed.eval.verdict.value == "correct" and composed.eval.custom_kernel


class SkeletonReader(ByLine):
    """Triton lines: the softplus line read from the kernel's own pointer, the scale line a comment
    alone, the bias line right."""

    model = "skeleton-reader"
    fence = "python"

    def answer(self, request) -> str:
        prompt = request.messages[1].content
        if "softplus" in prompt:
            return "y = tl.load(x_ptr + offs, mask=mask, other=0.0)\ny = tl.log(1.0 + tl.exp(y))"
        if "y = x * 1.75" in prompt:
            return "# y is computed as the line above says"
        return "y = x + channel_bias"


def test_a_line_that_reads_the_kernels_names_or_only_comments_is_no_pass():
    """A line is transplanted into the composed kernel, where the skeleton's own names (x_ptr,
    offs) mean something else: a line that reads them is refused before its pre-check, and the
    repair says why; a comment alone is no answer (it would pass a near-identity line)."""
    from kernelwright.evaluate import EvalRun
    from kernelwright.strategies.base import RunContext
    from kernelwright.tasks import load_tasks

    task = next(t for t in load_tasks("builtin") if t.id == TASK)
    backend = SkeletonReader()
    ctx = RunContext(task=task, backend=backend,
                     config=parse_regime("search+n=1+turns=2+no_tune+no_parts", target="triton", scaffold=True),
                     eval_run=EvalRun.of(device="cpu", trials=2, time=False, timeout=300.0), cell_key="k")
    assert steps.search_lines(ctx, n=1, turns=2, temperature=S.DEFAULT_TEMPERATURE) is False
    by_line = {}
    for a in ctx.attempts:
        by_line.setdefault(a.notes["search"]["line"], []).append(a)
    assert [a.eval.verdict.value for a in by_line[1]] == ["compile_error", "compile_error"]
    assert "reads offs, x_ptr, which belong to the kernel around it" in by_line[1][0].eval.error
    assert [a.eval.verdict.value for a in by_line[2]] == ["no_code", "no_code"]
    assert [a.eval.verdict.value for a in by_line[3]] == ["not_built"]  # passed in turn 0, not asked again
    # the softplus line's second request shows it why
    again = [r for r in backend.requests if "softplus" in r.messages[1].content][1]
    assert "belong to the kernel around it" in again.messages[-1].content
