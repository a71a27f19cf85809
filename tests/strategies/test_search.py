"""The search regime's bookkeeping (strategies/search/): duplicates, the build order, and the
verdict every sample gets whether or not it was built. Real pre-check records, no model, no build.
The regime end to end (replayed model answers, real pre-check, real builds) is in test_regimes.py."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from kernelwright import prompts
from kernelwright.llm.base import Completion
from kernelwright.records import Verdict
from kernelwright.scaffold.precheck import Counterexample, PrecheckResult, PrecheckStatus
from kernelwright.strategies import parse_regime
from kernelwright.strategies import search as S
from kernelwright.strategies.search import parts, region


def sample(i: int, region: str, check: PrecheckResult | None = None) -> parts.Sample:
    comp = Completion(text=f"```cpp\n{region}\n```", finish_reason="stop", prompt_tokens=10, completion_tokens=5,
                      latency_s=0.1)
    return parts.Sample(index=i, completion=comp, code=f"program with {region}", grounding=None, extra={},
                        region=region, check=check, gen_s=0.1)


PASS = PrecheckResult(status=PrecheckStatus.PASS, target="cpp", probes=64)
WRONG = PrecheckResult(status=PrecheckStatus.COUNTEREXAMPLE, target="cpp", probes=64, counterexample=Counterexample(
    index=3, label="edge", inputs={"x": -1.0}, expected=0.0, got=-1.0, atol=1e-4, rtol=1e-4))
BROKEN = PrecheckResult(status=PrecheckStatus.COMPILE_ERROR, target="cpp",
                        error="region.cpp:3:9: error: 'scale' was not declared in this scope")
UNSURE = PrecheckResult(status=PrecheckStatus.UNSUPPORTED, target="cpp", error="no probes")


def test_the_regime_and_its_ablations_parse():
    c = parse_regime("search+no_precheck+no_repair+grammar+n=16", target="cpp")
    assert c.name == "search" and c.has("no_precheck") and c.has("no_repair") and c.has("grammar") and c.n == 16
    assert c.spec == "search+no_precheck+no_repair+grammar+n=16"


class Scripted:
    """A deterministic backend that keeps the requests it was sent; it applies a grammar the way a
    backend that can would report it (the answers here are in the language anyway)."""

    model = "scripted"

    def __init__(self) -> None:
        self.requests = []

    def generate(self, requests):
        self.requests += requests
        return [[Completion(text="```cpp\ny = 2.0f * x;\n```", finish_reason="stop", prompt_tokens=10,
                            completion_tokens=5, latency_s=0.1, constrained=bool(r.grammar)) for _ in range(r.n)]
                for r in requests]


def test_region_answers_are_sampled_under_the_grammar_with_grammar():
    from kernelwright.evaluate import EvalRun
    from kernelwright.scaffold.grammar import region_grammar
    from kernelwright.strategies.base import RunContext
    from kernelwright.tasks import load_tasks

    task = next(t for t in load_tasks("builtin") if t.id == "builtin/L1/01_gelu_tanh")
    for spec, constrained in (("search+grammar", True), ("search", False)):
        backend = Scripted()
        ctx = RunContext(task=task, backend=backend, config=parse_regime(spec, target="cpp", scaffold=True),
                         eval_run=EvalRun(device="cpu"), cell_key="k")
        samples = region.draw(ctx, ctx.messages("the prompt"), 0, 2, 0.7)
        [request] = backend.requests
        assert request.grammar == (region_grammar(ctx.scaffold()) if constrained else None)
        batch = region._record(ctx, ctx.messages("the prompt"), samples, 0)
        assert [a.notes["search"]["constrained"] for a in batch] == [constrained, constrained]
        # the prompt says how locals are named in the language the answer is held to, and only then
        # (without +grammar the prompt is the plain one, so recorded unconstrained runs still replay)
        prompt = prompts.render("task", **parts.prompt_vars(ctx))
        assert ("`float t0 = ...;`, then t1, t2" in prompt) == constrained
        if not constrained:
            assert prompt == prompts.render("task", **ctx.task_vars())


@pytest.mark.build  # the real pre-check compiles the C++ region (cc1plus)
def test_a_repair_turn_follows_up_in_the_same_conversation():
    """Turn 2 is the task as turn 1 had it (the kernel, where the region goes), the failing region
    as the model's answer, and its counterexample with the reply rule: the frame stays in view.
    Real pre-check (the scripted `y = 2.0f * x;` is not GELU), so nothing is built."""
    from kernelwright.evaluate import EvalRun
    from kernelwright.strategies.base import RunContext
    from kernelwright.tasks import load_tasks

    task = next(t for t in load_tasks("builtin") if t.id == "builtin/L1/01_gelu_tanh")
    backend = Scripted()
    ctx = RunContext(task=task, backend=backend, config=parse_regime("search+n=2+turns=2+no_parts", target="cpp",
                                                                      scaffold=True),
                     eval_run=EvalRun(device="cpu"), cell_key="k")
    S.run(ctx)
    first, second = (r.messages for r in backend.requests)
    assert [m.role for m in first] == ["system", "user"] and "REGION BEGIN" in first[1].content
    assert [m.role for m in second] == ["system", "user", "assistant", "user"]
    assert second[:2] == first
    assert second[2].content == "```cpp\ny = 2.0f * x;\n```"
    follow_up = second[3].content
    assert "PyTorch gives" in follow_up and "only the corrected lines of the region" in follow_up
    assert "no function signature" in follow_up
    assert [a.turn for a in ctx.attempts] == [0, 0, 1, 1]
    assert ctx.attempts[2].messages == [m.model_dump() for m in second]
    assert not any(a.notes["search"]["built"] for a in ctx.attempts)


def test_regions_equal_up_to_whitespace_and_comments_are_one_candidate():
    assert parts.normalise("y = x * 2.0f; // double it\n") == parts.normalise("y  =  x * 2.0f;") == "y = x * 2.0f;"
    samples = [sample(0, "y = x;"), sample(1, "y = fmaxf(x, 0.f);"), sample(2, "y =  fmaxf(x, 0.f); // relu"),
               sample(3, "y = fmaxf(x,0.f);")]
    tried: set[str] = {parts.normalise("y = x;")}
    parts.dedupe(samples, tried)
    assert [s.twin for s in samples] == [None, None, 1, None]  # spacing inside a call is a different text
    assert samples[1].votes == 2 and samples[0].seen_before
    assert parts.normalise("y = fmaxf(x,0.f);") in tried


def test_build_order_skips_refuted_and_ranks_agreement_first():
    samples = [sample(0, "a", WRONG), sample(1, "b", PASS), sample(2, "c", UNSURE), sample(3, "d", BROKEN),
               sample(4, "c", None)]
    parts.dedupe(samples, set())
    order = region._order(samples)
    # refuted ones (a counterexample, a compile error) are never built; the region two samples
    # drew comes first; a region the pre-check could not judge is still built
    assert [s.index for s in order] == [2, 1]


def test_every_sample_gets_a_verdict_built_or_not(monkeypatch):
    class Ctx:
        class task:
            id = "t"

    samples = [sample(0, "a", WRONG), sample(1, "b", BROKEN), sample(2, "c", PASS), sample(3, "c")]
    parts.dedupe(samples, set())
    wrong = region._unbuilt_result(Ctx, samples[0], samples)
    assert wrong.verdict == Verdict.WRONG_OUTPUT and "PyTorch gives 0" in wrong.error
    assert [st.name for st in wrong.stages] == ["precheck"] and not wrong.stages[0].ok
    broken = region._unbuilt_result(Ctx, samples[1], samples)
    # an undeclared variable is a compile error to the evaluator too (taxonomy.py decides both)
    assert broken.verdict == Verdict.COMPILE_ERROR and "'scale' was not declared" in broken.error
    waiting = region._unbuilt_result(Ctx, samples[2], samples)
    assert waiting.verdict == Verdict.NOT_BUILT and waiting.stages[0].ok
    assert region._unbuilt_result(Ctx, samples[3], samples) == waiting  # a duplicate carries its twin's


def test_a_samples_note_keeps_its_keys_in_order_and_leaves_out_what_it_does_not_say():
    """notes["search"] is compared across replays as written: the same keys in the same order, and
    seen_before / shared_build / line only where they say something."""
    samples = [sample(0, "a", WRONG), sample(1, "a"), sample(2, "b")]
    tried = {parts.normalise("b")}
    parts.dedupe(samples, tried)
    first = parts.sample_note(samples[0], samples).dump()
    assert list(first) == ["drawn", "votes", "duplicate_of", "built", "constrained", "precheck"]
    assert first["precheck"] == WRONG.model_dump(mode="json") and first["votes"] == 2
    twin = parts.sample_note(samples[1], samples).dump()
    assert twin["duplicate_of"] == 0 and twin["votes"] == 2 and twin["precheck"] is None
    samples[2].shared_build = 3
    again = parts.sample_note(samples[2], samples, line=2, lines=3).dump()
    assert list(again)[6:] == ["seen_before", "shared_build", "line", "lines"]
    assert (again["seen_before"], again["shared_build"], again["line"], again["lines"]) == (True, 3, 2, 3)


# -- end to end on real answers ------------------------------------------------------------------

TRANSCRIPT = Path(__file__).resolve().parents[1] / "fixtures" / "transcripts" / "search_scaffold.jsonl"
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "gemm_bias_gelu.py"


@pytest.mark.build
def test_search_on_real_answers_builds_only_what_the_precheck_passed(build_cache):
    """The embedded model's eight real answers for examples/gemm_bias_gelu.py (recorded from an
    `optimize` run on the 2-core CPU, replayed here), through the real pre-check and evaluator:
    six refuted in milliseconds (five counterexamples, one compiler error), one duplicate, and the
    one region that passed is the one built, and it is correct. They were sampled unconstrained
    (before the grammar), so the regime replays them without +grammar: the request is the recorded one."""
    from kernelwright.evaluate import EvalRun
    from kernelwright.llm import make_backend
    from kernelwright.optimize.inputs import load_input
    from kernelwright.strategies import run_regime, selection

    task = load_input(str(EXAMPLE))
    config = parse_regime("search+no_steps", target="cpp", seed=0, max_tokens=1024, scaffold=True)
    logged = []
    cell = run_regime(task, make_backend(f"replay:{TRANSCRIPT}"), config,
                      EvalRun.of(device="cpu", trials=3, time=False, timeout=300.0, cache_dir=str(build_cache)),
                      sink=logged.append)
    verdicts = [a.eval.verdict.value for a in logged]
    assert verdicts == ["wrong_output", "correct", "wrong_output", "wrong_output", "compile_error", "wrong_output",
                        "wrong_output", "wrong_output"]
    built = [a.sample for a in logged if a.notes["search"]["built"]]
    assert built == [1] and logged[1].eval.custom_kernel
    assert logged[7].notes["search"]["duplicate_of"] == 6 and logged[6].notes["search"]["votes"] == 2
    # every unbuilt verdict came from the pre-check alone: one stage, no compile
    assert all([s.name for s in a.eval.stages] == ["precheck"] for a in logged if not a.notes["search"]["built"]
               and a.notes["search"]["duplicate_of"] is None)
    assert "PyTorch gives" in logged[0].eval.error
    assert cell.selected == logged[1].id == selection.select(logged).id and cell.turns == 1


class Answers:
    """A deterministic backend answering each request with the given regions, one per sample."""

    model = "answers"

    def __init__(self, regions: list[str]) -> None:
        self.regions = regions

    def generate(self, requests):
        return [[Completion(text=f"```cpp\n{r}\n```", finish_reason="stop", prompt_tokens=10, completion_tokens=5,
                            latency_s=0.1) for r in self.regions[:req.n]] for req in requests]


def _bias_add_search(regions: list[str], spec: str, build_cache):
    from kernelwright.evaluate import EvalRun
    from kernelwright.strategies import run_regime
    from kernelwright.tasks import load_tasks

    task = next(t for t in load_tasks("builtin") if t.id == "builtin/L1/02_bias_add")
    logged = []
    run_regime(task, Answers(regions), parse_regime(f"{spec}+n={len(regions)}+turns=1", target="cpp", seed=0,
                                                    scaffold=True),
               EvalRun.of(device="cpu", trials=2, time=False, timeout=300.0, cache_dir=str(build_cache)),
               sink=logged.append)
    return logged


def _shared_stage(attempt):
    return next(s for s in attempt.eval.stages if s.name == "shared_build")


@pytest.mark.build
def test_the_turns_survivors_share_one_build(build_cache):
    """Two regions that pass no pre-check (+no_precheck builds every distinct one), the wrong one
    agreed on by two samples so it goes first: one extension holds both regions; the first
    evaluation builds it, the second finds it built, and each program is judged on its own."""
    logged = _bias_add_search(["y = (x + bias) + 1.0f;", "y = (x + bias) + 1.0f;", "y = x + bias;"],
                              "search+no_precheck", build_cache)
    assert [a.eval.verdict.value for a in logged] == ["wrong_output", "wrong_output", "correct"]
    wrong, _, right = logged
    assert wrong.notes["search"]["built"] and right.notes["search"]["built"]
    assert wrong.code == right.code.replace("kw_fused_impl_v1(x", "kw_fused_impl_v0(x")  # one extension
    assert "namespace kw_v1" in right.code and right.eval.custom_kernel
    assert wrong.notes["search"]["shared_build"] == right.notes["search"]["shared_build"] == 2
    assert _shared_stage(wrong).detail.startswith("0 cached, 1 built")
    assert _shared_stage(right).detail.startswith("1 cached, 0 built")


@pytest.mark.build
def test_a_broken_region_sends_the_turn_back_to_one_build_each(build_cache):
    """The agreed-on region is right, the other does not compile: the shared build fails for both,
    so the right region is built alone and verified; the broken one is never built alone, since a
    correct kernel was found first."""
    logged = _bias_add_search(["y = x + bias;", "y = x + bias;", "y = x + no_such_name;"],
                              "search+no_precheck", build_cache)
    right, _, broken = logged
    assert right.eval.verdict.value == "correct" and right.eval.custom_kernel
    assert "namespace kw_v" not in right.code  # judged as its own program
    first = right.eval.stages[0]
    assert first.name == "shared_extension" and not first.ok and "2 regions did not build" in first.detail
    assert "shared_build" not in right.notes["search"]
    assert broken.eval.verdict.value == "not_built"


class TritonAnswers(Answers):
    def generate(self, requests):
        return [[Completion(text=f"```python\n{r}\n```", finish_reason="stop", prompt_tokens=10, completion_tokens=5,
                            latency_s=0.1) for r in self.regions[:req.n]] for req in requests]


@pytest.mark.slow  # five evaluations under the Triton interpreter
@pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="triton is not installed")
def test_a_verified_kernel_is_timed_under_its_other_launch_settings(build_cache):
    """Speed search: once a region is verified, the same program with each of the skeleton's other
    launch settings (here a row kernel's warps) is evaluated in full and recorded as an attempt of
    the turn, costing no tokens; +no_tune does none of it."""
    from kernelwright.evaluate import EvalRun
    from kernelwright.scaffold import launch_variants, plan_task, write
    from kernelwright.strategies import run_regime
    from kernelwright.tasks import load_task

    task = load_task("builtin/L1/05_row_sum")
    cfg = EvalRun.of(device="cpu", trials=2, time=False, timeout=300.0, cache_dir=str(build_cache),
                     extra_env={"TRITON_INTERPRET": "1"})
    answer = "y = tl.sum(x, axis=0)"

    from kernelwright.executors.base import Direct

    class Recording(Direct):  # the real evaluator, the settings each evaluation got kept
        def evaluate(self, task, text, cfg):
            seen.append(cfg)
            return super().evaluate(task, text, cfg)

    seen = []

    def run(spec):
        logged = []
        run_regime(task, TritonAnswers([answer]), parse_regime(spec, target="triton", seed=0, scaffold=True), cfg,
                   sink=logged.append, executor=Recording())
        return logged

    logged = run("search+n=1+turns=1")
    # the variants queue behind other cells' first candidates in a shared pool
    assert [c.priority for c in seen] == [0] + [1] * (len(seen) - 1)
    variants = launch_variants(write(plan_task(task), "triton").segment, "triton")
    assert len(variants) == 3 and len(logged) == 1 + len(variants)
    found, *tuned = logged
    assert found.eval.verdict.value == "correct" and found.eval.custom_kernel
    for a, knobs in zip(tuned, variants):
        assert a.notes["search"] == {"tune": knobs, "of": found.id}
        assert a.eval.verdict.value == "correct" and a.usage.completion_tokens == 0
        # the same program but for its launch line
        assert a.code.replace(f"KW_LAUNCH = {knobs!r}", "") == found.code.replace("KW_LAUNCH = {'warps': 0}", "")
    assert len({a.id for a in logged}) == len(logged)
    assert len(run("search+no_tune+n=1+turns=1")) == 1

    # a clock (optimize's budget, a study cell's) that passes during the first variant: no other
    # variant is timed, and the cell says the clock stopped it though the regime did not raise
    from kernelwright.llm.budget import Budget, BudgetedBackend

    clock = Budget(10.0, label="clock")

    class Expiring(Recording):
        def evaluate(self, task, text, cfg):
            result = super().evaluate(task, text, cfg)
            if len(seen) == 2:
                clock.started -= 3600.0
            return result

    seen.clear()
    logged = []
    cell = run_regime(task, BudgetedBackend(TritonAnswers([answer]), clock),
                      parse_regime("search+n=1+turns=1", target="triton", seed=0, scaffold=True), cfg,
                      sink=logged.append, executor=Expiring())
    assert len(logged) == 2 and cell.verdict.value == "correct"
    assert cell.stopped == f"clock of 10 min spent ({len(variants) - 1} launch variant(s) not timed)"
    assert cell.reason.endswith(f"(the run stopped: {cell.stopped})")


@pytest.mark.slow  # two evaluations under the Triton interpreter, one of them a GEMM
@pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="triton is not installed")
def test_a_verified_gemm_region_is_also_timed_in_its_library_twin(build_cache):
    """A region verified in the Triton GEMM skeleton is evaluated once more in the skeleton that
    leaves the GEMM to the library and runs the region after it (its library twin): recorded as a
    variant of the turn, no tokens, the twin's program (no tl.dot), its own verdict."""
    from kernelwright.evaluate import EvalRun
    from kernelwright.executors.base import Direct
    from kernelwright.strategies import run_regime
    from kernelwright.tasks import load_task

    task = load_task("builtin/L2/01_linear_gelu_scale")
    cfg = EvalRun.of(device="cpu", trials=2, time=False, timeout=300.0, cache_dir=str(build_cache),
                     extra_env={"TRITON_INTERPRET": "1"})
    answer = "y = 0.5 * x * (1.0 + tl.erf(x * 0.7071067811865476)) * 0.5"
    logged = []
    run_regime(task, TritonAnswers([answer]), parse_regime("search+n=1+turns=1+no_steps", target="triton", seed=0,
                                                           scaffold=True), cfg, sink=logged.append, executor=Direct())
    found, twin = logged
    assert "tl.dot" in found.code and found.eval.verdict.value == "correct"
    assert twin.notes["search"] == {"tune": {"skeleton": "library_twin"}, "of": found.id}
    assert "tl.dot" not in twin.code and answer in twin.code
    assert twin.eval.verdict.value == "correct" and twin.eval.custom_kernel and twin.usage.completion_tokens == 0


def test_a_launch_variant_is_timed_against_its_cells_compile_baseline():
    """The variants take the compile baseline their verified kernel measured (the task's, not
    compiled again): the same fields the judge writes, from the variant's own timing."""
    from kernelwright.records import EvalResult, TimingStats
    from kernelwright.strategies.search.tune import with_baseline

    def stats(median, p25, p75, protocol=0.01):
        return TimingStats(median_ms=median, p25_ms=p25, p75_ms=p75, mean_ms=median, calls=50, protocol="t",
                           protocol_ms=protocol)

    comp = stats(0.50, 0.48, 0.52)
    verified = EvalResult(verdict=Verdict.CORRECT, compile_timing=comp, compile_runtime_ms=0.5)
    fast = EvalResult(verdict=Verdict.CORRECT, timing=stats(0.30, 0.29, 0.31))
    got = with_baseline(fast, verified)
    assert got.compile_runtime_ms == 0.5 and got.compile_timing == comp and got.faster_than_compile
    assert got.net_speedup_vs_compile == pytest.approx((0.50 - 0.01) / (0.30 - 0.01))
    slow = with_baseline(EvalResult(verdict=Verdict.CORRECT, timing=stats(0.51, 0.40, 0.60)), verified)
    assert slow.faster_than_compile is False  # within the noise
    failed = EvalResult(verdict=Verdict.CORRECT, compile_baseline_error="inductor: no compiler")
    assert with_baseline(fast, failed).compile_baseline_error == "inductor: no compiler"
    wrong = EvalResult(verdict=Verdict.WRONG_OUTPUT)
    assert with_baseline(wrong, verified).compile_runtime_ms is None  # not timed: nothing to compare
