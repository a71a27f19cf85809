"""Candidate text is data (docs/evaluator.md, threat model): what a candidate writes (an exception's
words or type name, a compiler `#error`, a name, a message) never decides that the machine or the
task failed, never breaks the report, and never costs the evaluating process more than linear time.
The hostile fixtures are tests/fixtures/candidates/cpu/hostile/text_*.py, tolerance_*.py and
memorised_correction.py."""

from __future__ import annotations

import time

import pytest

from kernelwright.evaluate import evaluate
from kernelwright.records import EvalResult, Verdict
from kernelwright.tasks import load_task
from tests.conftest import CANDIDATES, TASKS

HOSTILE = CANDIDATES / "cpu" / "hostile"


@pytest.fixture(scope="module")
def bias_relu():
    return load_task(str(TASKS / "bias_relu.py"))


@pytest.fixture(scope="module")
def long_softmax():
    return load_task(str(TASKS / "long_softmax.py"))


def _report(r: EvalResult) -> str:
    from rich.console import Console

    from kernelwright.report.console import print_result

    console = Console(record=True, width=200)
    print_result(console, r)
    return console.export_text()


# --- a full disk, the reference's out of memory: only the evaluator's own observations -----------

def test_an_exception_saying_the_disk_is_full_is_the_candidates(bias_relu, fast_cfg):
    r = evaluate(bias_relu, (HOSTILE / "text_disk_full_exception.py").read_text(), fast_cfg(time=False))
    assert r.verdict == Verdict.RUNTIME_ERROR, (r.verdict, r.error)
    assert "No space left on device" in (r.error or "")


@pytest.mark.build
def test_an_error_directive_saying_the_disk_is_full_is_a_compile_error(bias_relu, fast_cfg):
    r = evaluate(bias_relu, (HOSTILE / "text_error_no_space.py").read_text(), fast_cfg(time=False))
    assert r.verdict == Verdict.COMPILE_ERROR, (r.verdict, r.error)
    assert "No space left on device" in (r.error or "")


def test_the_disk_is_full_when_the_filesystem_says_so(tiny_disk, tmp_path):
    from kernelwright.evaluate.diskroom import shortage

    assert "no space left on device" in (shortage(str(tiny_disk)) or "")
    assert shortage(str(tmp_path)) is None  # this machine's disk has room
    assert shortage(str(tmp_path / "gone")) is None  # no observation, no claim


def test_an_out_of_memory_named_like_the_references_is_the_candidates(bias_relu, fast_cfg, tmp_path, monkeypatch):
    """Its type's name and its message are the reference's out-of-memory words, with markup: it is the
    candidate's out_of_memory (re-run alone), the task is not blamed, and the report prints it."""
    monkeypatch.setenv("KERNELWRIGHT_LOCK_DIR", str(tmp_path / "locks"))
    r = evaluate(bias_relu, (HOSTILE / "text_reference_oom.py").read_text(), fast_cfg(time=False))
    assert r.verdict == Verdict.OUT_OF_MEMORY, (r.verdict, r.error)
    assert r.error.startswith("the reference ran out of device memory beside other work"), r.error
    assert any("re-run alone" in f for f in r.flags)
    assert "[/] [bold red]x[/]" in _report(r)


# --- the report and the regular expressions ------------------------------------------------------

def test_the_report_prints_markup_as_written():
    from kernelwright.records import Mismatch, Stage

    markup = "[bold red]relu[/]"
    r = EvalResult(verdict=Verdict.WRONG_OUTPUT, task_id="[/]", custom_calls={markup: 3, "[/]": 1},
                   copy_only_calls=["[/]", "[link=x]y"], flags=[f"note {markup} [/]"], error="[/] it failed",
                   mismatch=Mismatch(trial=0, detail="[/]"), stages=[Stage(name="[/]", seconds=0.1, ok=False)])
    text = _report(r)
    for said in (markup, "[/] it failed", "[link=x]y", f"note {markup} [/]", "task: [/]"):
        assert said in text, said


def test_an_error_of_slashes_is_judged_quickly(bias_relu, fast_cfg):
    started = time.monotonic()
    r = evaluate(bias_relu, (HOSTILE / "text_slashes.py").read_text(), fast_cfg(time=False))
    assert r.verdict == Verdict.RUNTIME_ERROR, (r.verdict, r.error)
    assert time.monotonic() - started < 120  # the sandbox's own start-up on a busy machine; 42 slashes took 64 s


def _hostile_strings(n: int = 100_000) -> dict[str, str]:
    """Repetitions of what backtracking patterns choke on: slashes, open brackets, fences, words
    without their ends, line breaks, markup, and a random mix of all of them."""
    import random

    units = ["/", "/a", "a/", "(", "a(", "x[", "<", "->", "&", "A.", "\n", "```", "``` ", "\n ", "~", "a ",
             ":1", "error: ", "fatal error: ", "'a'", "::a", "[/]", "\\"]
    out = {repr(u): (u * (n // len(u) + 1))[: n - 1] + "!" for u in units}
    rnd = random.Random(0)
    out["mix"] = "".join(rnd.choice("/ ():'\"\n<>[]{}-&._aA1\\`#~*;,=+") for _ in range(n))
    return out


def _readers():
    """Every function of the evaluating process (and the strategies' grounding) that reads a
    candidate's or a model's text."""
    from kernelwright.evaluate import candidate_load, evaluator, static_checks, taxonomy
    from kernelwright.extract import extract_code, fenced_blocks
    from kernelwright.grounding.ground import ground

    def in_code(text: str) -> str:  # inside a candidate's C++ and CUDA sources
        body = text.replace('"""', "'''").replace("\\", "")
        return (f'import torch\nfrom torch.utils.cpp_extension import load_inline\nsrc = r"""\n{body}\n"""\n'
                'ext = load_inline(name="x", cpp_sources=src, cuda_sources=src, functions=["f"])\n'
                "class ModelNew(torch.nn.Module):\n    def forward(self, x):\n        return ext.f(x)\n")

    return {
        "strip_paths": evaluator.strip_paths,
        "explain": lambda t: taxonomy.explain("RuntimeError", t, t),
        "explain_compiler_line": lambda t: taxonomy.explain("E", "main.cpp:1:1: error: " + t),
        "first_relevant_lines": taxonomy.first_relevant_lines,
        "first_relevant_compiler_line": lambda t: taxonomy.first_relevant_lines("main.cpp:1:1: error: " + t),
        "says_out_of_memory": candidate_load.says_out_of_memory,
        "error_text": lambda t: candidate_load.error_text(RuntimeError(t)),
        "extract_code": extract_code,
        "extract_fenced": lambda t: extract_code("```python\n" + t + "\n```"),
        "fenced_blocks": fenced_blocks,
        "check_source": lambda t: static_checks.check_source(in_code(t)),
        "ground": lambda t: ground(in_code(t), "cuda"),
    }


@pytest.mark.parametrize("reader", sorted(_readers()))
def test_no_reader_of_candidate_text_backtracks(reader):
    """A hostile 100 KB text costs each reader well under a second of CPU (a backtracking pattern
    costs seconds to hours)."""
    from kernelwright.grounding.ground import MAX_GROUNDED_CHARS

    read = _readers()[reader]
    read("x")  # a first call's one-off set-up (grounding probes the installed headers) is not the text's
    texts = list(_hostile_strings().items())
    if reader == "ground":  # longer texts are not grounded: the longest that is, too (its costliest kinds)
        costliest = ("'a('", '"\'a\'"', "'```'", "'[/]'", "'/'", "mix")
        texts += [(k, t) for k, t in _hostile_strings(MAX_GROUNDED_CHARS - 1000).items() if k in costliest]
    for name, text in texts:
        started = time.process_time()
        read(text)
        spent = time.process_time() - started
        assert spent < 1.0, f"{reader} spent {spent:.2f} s of CPU on {name}"


# --- tolerance -----------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["tolerance_softmax_bf16.py", "tolerance_small_zeroed.py"])
def test_a_softmax_within_atol_everywhere_but_wrong_as_a_whole_is_wrong(long_softmax, fast_cfg, name):
    r = evaluate(long_softmax, (HOSTILE / name).read_text(), fast_cfg(time=False, trials=2))
    assert r.verdict == Verdict.WRONG_OUTPUT, (r.verdict, r.error)
    assert r.mismatch is not None and r.mismatch.relative_error > 1e-3, r.mismatch


def test_an_honest_softmax_passes(long_softmax, fast_cfg):
    honest = ("import torch\nimport torch.nn as nn\n\n\nclass ModelNew(nn.Module):\n    def forward(self, x):\n"
              "        e = torch.exp(x - x.amax(1, keepdim=True))\n        return e / e.sum(1, keepdim=True)\n")
    r = evaluate(long_softmax, honest, fast_cfg(time=False, trials=2))
    assert r.verdict == Verdict.NO_CUSTOM_KERNEL and r.correct, (r.verdict, r.error)


# --- fresh, secret inputs ------------------------------------------------------------------------

@pytest.mark.parametrize("timed", [False, True], ids=["no_timing", "timing"])
def test_a_memorised_correction_meets_inputs_it_cannot_know(bias_relu, fast_cfg, timed):
    """Right only for the inputs of the seeds the checks once used: with or without timing, every
    check's inputs come from seeds drawn in the judge, recorded after the verdict."""
    cfg = fast_cfg(time=timed, trials=3, warmup=1, iters=3)
    r = evaluate(bias_relu, (HOSTILE / "memorised_correction.py").read_text(), cfg)
    assert r.verdict == Verdict.WRONG_OUTPUT, (r.verdict, r.error)
    seeds = r.input_seeds.get("correctness", [])
    assert len(seeds) == 1 and seeds[0] not in (42, 43)  # wrong from the first trial


def test_every_check_records_its_own_seed(bias_relu, fast_cfg):
    torch_only = (CANDIDATES / "cpu" / "torch_only.py").read_text()
    r = evaluate(bias_relu, torch_only, fast_cfg(time=False, trials=3))
    assert r.verdict == Verdict.NO_CUSTOM_KERNEL, (r.verdict, r.error)
    seeds = [s for drawn in r.input_seeds.values() for s in drawn]
    assert len(r.input_seeds["correctness"]) == 3 and len(set(seeds)) == len(seeds)

