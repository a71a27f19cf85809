"""Forged verdicts (issue #16): candidates that attack the verdict itself rather than the task.

Each fixture in tests/fixtures/candidates/cpu/hostile/forge_*.py computes a wrong answer and
forges "correct" the way the hostile review did against the in-process worker: rebinding a stdlib
function the worker serialised its result with (json.dumps; os.write from C++), using the result
channel reached through traceback frames, making every input zero through torch.randn looked up at
call time, writing a result line to every pipe over /proc/self/fd from C++. Against main at 89fb582
all five were judged `correct` (docs/evaluator.md, "Forged verdicts"). On the CPU the judge
(evaluate/judge.py) now draws the inputs, computes the reference, compares, times and writes the
result in a process that never imports the candidate, so each gets the verdict its wrong answer
earns. After each: no process left, no file outside its scratch changed, no secret in the record
(the `watched` fixture of test_confinement.py).
"""

from __future__ import annotations

import pytest

from kernelwright.evaluate.evaluator import EvalRun, Prepared, precheck
from kernelwright.records import EvalResult, Verdict
from kernelwright.tasks import load_task

from tests.conftest import CANDIDATES, TASKS
from tests.evaluate.test_confinement import MECHANISMS, home_secret, study, watched  # noqa: F401 -- fixtures

HOSTILE = CANDIDATES / "cpu" / "hostile"

pytestmark = pytest.mark.skipif(not MECHANISMS, reason="neither bubblewrap nor unshare works here")

# (fixture, verdict with static rules on (None: no strict rule, the sandbox decides), verdict with
# them off, words the error must hold)
FORGES = [
    ("forge_json_dumps.py", None, Verdict.WRONG_OUTPUT, "differs from the reference"),
    ("forge_traceback_channel.py", Verdict.STATIC_VIOLATION, Verdict.WRONG_OUTPUT, "differs from the reference"),
    ("forge_zero_inputs.py", Verdict.STATIC_VIOLATION, Verdict.WRONG_OUTPUT, "differs from the reference"),
    ("forge_cpp_fd_write.py", None, Verdict.CRASH, "broke the evaluation protocol"),
    ("forge_cpp_os_write.py", None, Verdict.WRONG_OUTPUT, "differs from the reference"),
]


@pytest.mark.parametrize("name,static,dynamic,words", FORGES, ids=[c[0] for c in FORGES])
def test_static_rules_on_forgers(name, static, dynamic, words):
    """What the static layer makes of each (no sandbox): a rebound json.dumps and the C++ forgers pass
    it, so the split decides."""
    task = load_task(str(TASKS / "bias_relu.py"))
    pre = precheck(task, (HOSTILE / name).read_text(), EvalRun())
    if static is None:
        assert isinstance(pre, Prepared), pre
    else:
        assert isinstance(pre, EvalResult) and pre.verdict == static, pre


@pytest.mark.build
@pytest.mark.parametrize("name,static,dynamic,words", FORGES, ids=[c[0] for c in FORGES])
def test_a_forged_verdict_does_not_reach_the_record(watched, name, static, dynamic, words):  # noqa: F811
    result = watched(name, MECHANISMS[0], time=False)
    assert result.verdict == dynamic, (result.verdict, result.error, result.output_tail)
    assert words in (result.error or ""), result.error
    assert not result.correct and result.speedup is None


def test_the_candidates_process_cannot_reach_the_judge(watched):  # noqa: F811
    """The runner is the judge's child, without capabilities; the judge is not dumpable, so its
    memory and its descriptors (the result pipe) are closed to the runner."""
    result = watched("forge_reach_judge.py", MECHANISMS[0], time=False)
    assert result.verdict == Verdict.NO_CUSTOM_KERNEL, (result.verdict, result.error, result.output_tail)


def test_forgers_share_one_extension():
    """The five build one source (kw_fixture_forge): a change to one is a change to all."""
    import re

    blocks = set()
    for path in HOSTILE.glob("forge_*.py"):
        text = path.read_text()
        if "load_inline" in text:
            m = re.search(r'CPP_SOURCE = r""".*?"""\n\next = load_inline\(.*?\)\n', text, re.S)
            assert m, path.name
            blocks.add(m.group(0))
    assert len(blocks) == 1
