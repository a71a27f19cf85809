"""Every whole-program prompt's example code defines each name it uses.

A small model copies the example it is taught; a name the example uses but does not define (a
`CPP_DECLARATIONS` the answer was supposed to write elsewhere) comes back as a NameError at import.
So every ```python block of a rendered prompt (other than the task's own source) must parse and
bind every name it loads, and no load_inline call may be taught outside such a block.
"""

from __future__ import annotations

import ast
import builtins
import re

import pytest

from kernelwright import prompts

TASK_SOURCE = "import torch\n\n\nclass Model(torch.nn.Module):\n    def forward(self, x):\n        return x * 2\n"
_BLOCK = re.compile(r"```python\n(.*?)```", re.S)


def _whole_program_prompts(target: str) -> dict[str, str]:
    base = dict(task_source=TASK_SOURCE, target=target, target_name=target, ambition=False, scaffold=None,
                fence="python")
    return {
        "task": prompts.render("task", **base),
        "guided": prompts.render("guided", **base, device_name="GPU", forward_ms=1.0, profile_lines=["mul 100%"],
                                 roofline_line="memory-bound"),
        "iterate": prompts.render("iterate", **base, best_code="x = 1", report="Verdict: wrong_output"),
        "agent_generator": prompts.render("agent_generator", **base, analysis=None, brief=None, best_code=None,
                                          feedback=None),
    }


def undefined_names(code: str) -> set[str]:
    """Names the code loads that neither it (assignment, import, def, class, argument, loop or
    comprehension target, with/except alias) nor Python's builtins bind. Order-insensitive: a
    teaching example is checked for what it leaves to the reader, not for execution order."""
    tree = ast.parse(code)
    bound: set[str] = set(dir(builtins))
    used: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            (used if isinstance(node.ctx, ast.Load) else bound).add(node.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            bound.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            bound.add(node.name)
    return used - bound


def test_the_checker_finds_a_name_left_to_the_reader():
    assert undefined_names('ext = load_inline(name="x", cpp_sources=CPP_DECLARATIONS)') == {"load_inline",
                                                                                                "CPP_DECLARATIONS"}
    assert undefined_names("from m import f\nS = 's'\ndef g(a):\n    return [f(a, S, b) for b in a]\n") == set()


@pytest.mark.parametrize("target", ["cuda", "triton", "cpp"])
def test_whole_program_examples_define_every_name_they_use(target):
    for name, text in _whole_program_prompts(target).items():
        outside = _BLOCK.sub("", text)
        assert "load_inline(" not in outside, f"{name}/{target}: a load_inline call taught outside a code block"
        for code in _BLOCK.findall(text):
            if code == TASK_SOURCE or code.strip() == "x = 1":
                continue  # the task's own module and the previous attempt are not taught examples
            assert not undefined_names(code), f"{name}/{target}: the example uses {sorted(undefined_names(code))}"


def test_knowledge_notes_examples_define_every_name_they_use():
    """The notes retrieval puts into prompts are taught examples too."""
    from kernelwright.knowledge.retrieval import NOTES_DIR

    for note in sorted(NOTES_DIR.glob("*.md")):
        for code in _BLOCK.findall(note.read_text()):
            assert not undefined_names(code), f"{note.name}: the example uses {sorted(undefined_names(code))}"
