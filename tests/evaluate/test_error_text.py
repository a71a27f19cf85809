"""Error text is never empty: a long one-line message (an out-of-memory message runs to 600
characters) is shortened, not dropped; long compiler command lines are still dropped."""

from __future__ import annotations

from kernelwright.evaluate import evaluate
from kernelwright.evaluate.taxonomy import first_relevant_lines
from kernelwright.records import Verdict
from kernelwright.tasks import load_task
from tests.conftest import TASKS

LONG = ("RuntimeError: CUDA out of memory. Tried to allocate 20.00 GiB (GPU 0; 139.81 GiB total capacity; "
        + "x" * 500 + " of which is reserved)")


def test_a_long_message_is_shortened_not_dropped():
    text = first_relevant_lines(LONG)
    assert text.startswith("RuntimeError: CUDA out of memory. Tried to allocate 20.00 GiB")
    assert text.endswith("…") and len(text) <= 400


def test_a_long_command_line_is_still_dropped():
    command = "c++ -MMD -MF main.o.d -DTORCH_EXTENSION_NAME=kw -I/usr/include/python3.11 " + "-I/x " * 120
    text = first_relevant_lines(command + "\nmain.cpp:3:5: error: 'y' was not declared in this scope")
    assert "error: 'y' was not declared" in text and "-I/x" not in text


CANDIDATE = f'''
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, features):
        super().__init__()

    def forward(self, x):
        raise RuntimeError({LONG.split(": ", 1)[1]!r})
'''


def test_a_candidates_600_character_error_reaches_the_record(fast_cfg):
    r = evaluate(load_task(str(TASKS / "bias_relu.py")), CANDIDATE, fast_cfg(time=False))
    assert r.verdict == Verdict.OUT_OF_MEMORY  # its own outcome (tests/evaluate/test_out_of_memory.py)
    assert r.error and r.error.startswith("RuntimeError: CUDA out of memory. Tried to allocate"), r.error


def test_a_message_that_looks_like_a_command_line_is_still_said():
    """Only noise around a message is dropped: a lone line is the message, shortened."""
    text = first_relevant_lines("RuntimeError: bad flags -I/x " + "-Dy " * 200)
    assert text.startswith("RuntimeError: bad flags") and len(text) <= 400
