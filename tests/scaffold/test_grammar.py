"""The region grammar (kernelwright/scaffold/grammar.py) and the GBNF matcher that checks it
(kernelwright/scaffold/gbnf.py).

Fast: the grammar of every built-in task's scaffold, in every target, accepts the suite's oracle
regions (kernelwright/scaffold/oracle.py) and the recorded correct regions, and rejects prose, undefined
names, functions the target lacks; checked with the Python matcher. Slow (the embedded model's
file): llama.cpp's own grammar engine agrees on the same regions, and a real sampling run under the
grammar gives an answer in the language.
"""

from __future__ import annotations

import ctypes
import json
from pathlib import Path

import pytest

from kernelwright.scaffold import SegmentKind, assemble, plan_task, plan_tasks, write
from kernelwright.scaffold.gbnf import GrammarError, matches, parse
from kernelwright.scaffold.grammar import TRITON_FUNCTIONS, TRITON_REDUCTIONS, region_grammar
from kernelwright.scaffold.oracle import Unsupported, region
from kernelwright.scaffold.types import GEMM_TARGETS
from kernelwright.tasks import load_tasks

ROOT = Path(__file__).resolve().parents[2]
TRANSCRIPT = ROOT / "tests" / "fixtures" / "transcripts" / "search_scaffold.jsonl"
ANSWERS = json.loads((ROOT / "tests" / "fixtures" / "scaffold" / "precheck_answers.json").read_text())
TARGETS = ("cpp", "cuda", "triton")


def fenced(sc, body: str) -> str:
    return f"```{sc.language}\n{body}\n```"


@pytest.fixture(scope="module")
def plans():
    tasks = load_tasks("builtin")
    return dict(zip([t.id for t in tasks], plan_tasks(tasks)))


def oracle_cases(plans):
    for tid, plan in plans.items():
        if not plan.available:
            continue
        for target in TARGETS:
            sc = write(plan, target)
            try:
                yield tid, sc, region(sc), region(sc, wrong=True)
            except Unsupported:
                continue


# ---- the matcher ---------------------------------------------------------------------------------

def test_matcher_reads_the_gbnf_it_needs() -> None:
    g = 'root ::= "a" [b-d]{1,2} x? "\\n"\nx ::= ([^a\\n] | "q")* "!"'
    assert matches(g, "ab\n") and matches(g, "acd\n") and matches(g, "ab zz q!\n")
    assert not matches(g, "a\n") and not matches(g, "abcd\n") and not matches(g, "ab a!\n")
    assert not matches(g, "ab\n ")  # the whole text, not a prefix
    with pytest.raises(GrammarError):
        parse('root ::= "a" nothere')


# ---- what the grammar accepts --------------------------------------------------------------------

def test_every_oracle_region_is_in_its_scaffolds_language(plans) -> None:
    seen = set()
    for tid, sc, good, wrong in oracle_cases(plans):
        g = region_grammar(sc)
        assert matches(g, fenced(sc, good)), f"{tid} {sc.target}:\n{good}"
        assert matches(g, fenced(sc, wrong))  # the language is syntax and names, not the math
        seen.add((sc.target, sc.segment.kind))
    # every layout was covered (the gemm layout exists for Triton only)
    assert seen == {(t, k) for t in TARGETS for k in SegmentKind if k != SegmentKind.GEMM or t in GEMM_TARGETS}


def test_the_recorded_correct_regions_are_in_the_language(plans) -> None:
    from kernelwright.optimize.inputs import load_input

    rec = json.loads(TRANSCRIPT.read_text().splitlines()[0])
    task = load_input(str(ROOT / "examples" / "gemm_bias_gelu.py"))
    sc = write(plan_task(task), "cpp")
    g = region_grammar(sc)
    # sample 1 of the search transcript: the one the evaluator found correct (a whole kernel as
    # the model wrote it; the spliced region is what the grammar would have had it write)
    correct = assemble(sc, rec["completions"][1]["text"]).region
    assert "std::erf" in correct and matches(g, fenced(sc, correct))
    # the recorded correct answers of the pre-check's fixture: all but two are in the language;
    # those two use what the language leaves out on purpose (a free-named local in Triton, the raw
    # input pointer and std::accumulate in C++)
    outside = []
    for a in (a for a in ANSWERS if a["recorded_verdict"] == "correct"):
        sc = write(plans[a["task_id"]], a["target"])
        if not matches(region_grammar(sc), fenced(sc, a["region"])):
            outside.append((a["task_id"], a["target"]))
    assert sorted(outside) == [("builtin/L1/03_softmax", "cpp"), ("builtin/L1/03_softmax", "triton")]


def test_a_long_answer_is_matched_without_deep_recursion(plans) -> None:
    """Statements repeat, they do not nest: 400 of them (more than any answer's token budget)."""
    sc = write(plans["builtin/L1/08_layer_norm"], "cpp")
    body = "for (int64_t j = 0; j < cols; ++j) {\n" + "    y[j] = x(j) * 2.0f + (1.0f - x(j));\n" * 400 + "}"
    assert matches(region_grammar(sc), fenced(sc, body))


# ---- what it rejects -----------------------------------------------------------------------------

ELEMENTWISE, ROW = "builtin/L1/01_gelu_tanh", "builtin/L1/03_softmax"


@pytest.mark.parametrize("answer", [
    "Here is the code:\n```cpp\ny = x;\n```",  # prose before the block
    "y = x;",  # no block
    "```cpp\ny = x;\n```\nThis computes y.",  # prose after it
    "```cpp\ny = x * scale;\n```",  # a name nothing declares
    "```cpp\ny = gelu(x);\n```",  # a function C++ does not have
    "```cpp\ny = torch::tanh(x);\n```",
    "```cpp\ny = t0;\nfloat t0 = x;\n```",  # read before declared
    "```cpp\nfloat t1 = x;\n```",  # locals are declared in order
    "```cpp\nconst float t0 = x;\nt0 = t0 * t0;\n```",  # no const locals (assigning one: measured once)
    "```cpp\nx = 2.0f * x;\n```",  # the loads are const
    "```cpp\nreturn x;\n```",
    "```cpp\nfor (int64_t j = 0; j < cols; ++j) y = x;\n```",  # no loop in an elementwise region
    "```python\ny = x;\n```",  # the prompt's fence, not another
    "```cpp\ny = std::tanh(x, 2.0f);\n```",  # arity
])
def test_cpp_elementwise_rejects(plans, answer) -> None:
    sc = write(plans[ELEMENTWISE], "cpp")
    assert matches(region_grammar(sc), "```cpp\ny = 0.5f * x * (1.0f + std::tanh(0.79788456f * x));\n```")
    assert not matches(region_grammar(sc), answer)


@pytest.mark.parametrize("answer", [
    "```cpp\ny[j] = x(j);\n```",  # j outside its loop
    "```cpp\nfor (int64_t j = 0; j < cols; ++j) y[j] = x[j];\n```",  # x is read as x(j)
    "```cpp\nfor (int64_t j = 0; j < cols; ++j) y[j] = x(row * cols + j);\n```",
    "```cpp\nfloat m = *std::max_element(x_ptr, x_ptr + cols);\n```",
    "```cpp\nfor (int64_t j = 0; j < cols; ++j) { float t0 = x(j); }\ny = t0;\n```",  # out of its block
])
def test_cpp_row_rejects(plans, answer) -> None:
    sc = write(plans[ROW], "cpp")
    assert not matches(region_grammar(sc), answer)


@pytest.mark.parametrize("answer", [
    "```python\ny = tl.tanh(x)\n```",  # no tl.tanh
    "```python\ny = x - tl.max(x)\n```",  # reductions name their axis
    "```python\n    y = x\n```",  # Python regions start at column 0
    "```python\ny = x / tl.sum(tl.exp(x), axis=0);\n```",
    "```python\ny = torch.softmax(x, dim=0)\n```",
    "```python\nm = tl.max(x, axis=0)\ny = x - m\n```",  # a free-named local
])
def test_triton_row_rejects(plans, answer) -> None:
    sc = write(plans[ROW], "triton")
    assert matches(region_grammar(sc), "```python\nt0 = tl.max(x, axis=0)\ny = tl.exp(x - t0)\n```")
    assert not matches(region_grammar(sc), answer)


def test_triton_functions_are_real_members_of_triton_language() -> None:
    names = json.loads((ROOT / "kernelwright" / "grounding" / "triton_names.json").read_text())
    members = set(names["members"]["triton.language"])
    used = {f for fs in TRITON_FUNCTIONS.values() for f in fs} | set(TRITON_REDUCTIONS)
    assert used <= members and "tanh" not in used


# ---- llama.cpp's own engine (the embedded model's vocabulary) -----------------------------------

def _vocab_model():
    llama_cpp = pytest.importorskip("llama_cpp")
    from kernelwright.llm import local_model

    path = local_model.cached_path(local_model.DEFAULT_MODEL)
    if path is None:
        pytest.skip("the embedded model is not pulled")
    return llama_cpp, llama_cpp.Llama(model_path=str(path), vocab_only=True, verbose=False)


def _llama_accepts(llama_cpp, llm, grammar: str, text: str) -> bool:
    """Feeds the text's tokens through llama.cpp's grammar sampler, then end-of-text."""
    vocab = llm._model.vocab
    sampler = llama_cpp.llama_sampler_init_grammar(vocab, grammar.encode(), b"root")
    assert sampler, "llama.cpp could not parse the grammar"
    try:
        for tok in llm.tokenize(text.encode(), add_bos=False, special=False) + [llama_cpp.llama_vocab_eos(vocab)]:
            data = (llama_cpp.llama_token_data * 1)(llama_cpp.llama_token_data(tok, 0.0, 0.0))
            llama_cpp.llama_sampler_apply(sampler, ctypes.byref(llama_cpp.llama_token_data_array(data, 1, -1, False)))
            if data[0].logit == float("-inf"):
                return False
            llama_cpp.llama_sampler_accept(sampler, tok)
        return True
    finally:
        llama_cpp.llama_sampler_free(sampler)


@pytest.mark.slow
def test_llama_cpp_parses_every_grammar_and_agrees_with_the_matcher(plans) -> None:
    llama_cpp, llm = _vocab_model()
    for tid, sc, good, _ in oracle_cases(plans):
        g = region_grammar(sc)
        assert _llama_accepts(llama_cpp, llm, g, fenced(sc, good)), f"{tid} {sc.target}"
        for bad in ("Here it is:\n" + fenced(sc, good), fenced(sc, "y = gelu(x);"), fenced(sc, "y = undefined_name")):
            assert not _llama_accepts(llama_cpp, llm, g, bad) and not matches(g, bad)


@pytest.mark.slow
def test_a_real_sample_under_the_grammar_is_in_the_language(plans, small_model) -> None:
    """A real model on the CPU (the small 0.5B the llm tests use: the grammar, not the model, is what
    is tested), one sample: the answer is a sentence of the grammar."""
    from kernelwright.llm import GenerationRequest, make_backend

    sc = write(plans[ELEMENTWISE], "cpp")
    g = region_grammar(sc)
    backend = make_backend(f"gguf:{small_model}?threads=1")
    req = GenerationRequest.chat(f"Write `y = gelu(x)` (tanh approximation) for this kernel region:\n"
                                 f"```cpp\n{sc.kernel_view}\n```\nReply with one ```cpp code block.",
                                 n=1, seed=3, max_tokens=160, grammar=g)
    [[comp]] = backend.generate([req])
    assert comp.constrained and comp.finish_reason == "stop", comp.text
    assert matches(g, comp.text), comp.text


def test_a_region_reading_the_skeletons_own_names_is_found():
    """What a line may not read once it is moved into a composed kernel: Triton, any name but its
    inputs, y, mask, a row's cols/row, its own locals, modules and builtins; C++ and CUDA, the
    skeleton's pointers (comments, members and namespaces aside)."""
    from kernelwright.scaffold import plan_task, write
    from kernelwright.scaffold.grammar import skeleton_names_read
    from kernelwright.scaffold.steps import line_target, split
    from kernelwright.tasks import load_task

    task = load_task("builtin/L2/09_conv2d_softplus_scale_bias")  # softplus, * 1.75, + channel_bias
    for target, fine, foreign in (
            ("triton", ["y = x + channel_bias", "t = tl.where(mask, x, 0.0)\ny = t + channel_bias",
                        "y = x + float(1) + max(channel_bias, 0.0)"],
             {"y = tl.load(x_ptr + offs, mask=mask) + channel_bias": ["offs", "x_ptr"],
              "y = x + channel_bias / BLOCK\nz = pid": ["BLOCK", "pid"]}),
            ("cpp", ["y = x + channel_bias;", "/* not x_ptr */ y = x + p.q_ptr + channel_bias; // x_ptr"],
             {"y = static_cast<float>(x_ptr[i]) + channel_bias_ptr[0];": ["channel_bias_ptr", "x_ptr"]})):
        step = split(plan_task(task).for_target(target))[-1]  # + channel_bias
        sc = write(step.plan, line_target(step, target))
        assert [a.name for a in sc.segment.args] == ["x", "channel_bias"]
        for region in fine:
            assert skeleton_names_read(sc, region) == [], region
        for region, names in foreign.items():
            assert skeleton_names_read(sc, region) == names, region
