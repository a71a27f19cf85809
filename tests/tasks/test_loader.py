"""Every spec form of kernelwright.tasks.load_tasks, and every bad input it must reject."""

from __future__ import annotations

import logging
import tempfile
from pathlib import Path

import pytest

from kernelwright.records import Task
from kernelwright.tasks import SIZE_ENV, TaskError, load_task, load_tasks

TASK_TEXT = '''import torch
import torch.nn as nn


class Model(nn.Module):
    """Doubles its input."""

    def forward(self, x):
        return x * 2


def get_inputs():
    return [torch.randn(4)]


def get_init_inputs():
    return []
'''


def write(path: Path, text: str = TASK_TEXT) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


@pytest.fixture
def kb_root(tmp_path: Path) -> Path:
    """A fake KernelBench checkout: two levels, ids that sort differently as text and as numbers."""
    root = tmp_path / "KernelBench-repo"
    data = root / "KernelBench"
    for name in ("1_Square_matmul.py", "2_ReLU.py", "10_Conv3d_big.py"):
        write(data / "level1" / name)
    write(data / "level2" / "1_Gemm_Add.py")
    write(data / "level1" / "notes.py", "x = 1\n")  # not <ID>_<Name>.py: ignored
    (root / "README.md").write_text("fake\n")
    return root


def ids(tasks: list[Task]) -> list[str]:
    return [t.id for t in tasks]


# --- files and folders -------------------------------------------------------------------------


def test_single_file(tmp_path: Path) -> None:
    path = write(tmp_path / "my_op.py")
    [task] = load_tasks(str(path))
    assert (task.id, task.name, task.level, task.origin) == ("my_op", "my_op", None, "file")
    assert task.source == TASK_TEXT
    assert Path(task.path).is_absolute()
    assert load_task(str(path)) == task


def test_folder_sorted_skips_init_and_helpers(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    write(tmp_path / "b_task.py")
    write(tmp_path / "a_task.py")
    write(tmp_path / "__init__.py", "")
    write(tmp_path / "helpers.py", "def util():\n    return 1\n")
    write(tmp_path / "notes.txt", "not python")
    with caplog.at_level(logging.WARNING):
        tasks = load_tasks(str(tmp_path))
    assert ids(tasks) == ["a_task", "b_task"]
    assert "helpers.py" in caplog.text


def test_loading_never_executes_task_code(tmp_path: Path) -> None:
    marker = tmp_path / "imported"
    text = f"open({str(marker)!r}, 'w').close()\nraise SystemExit(3)\n" + TASK_TEXT
    [task] = load_tasks(str(write(tmp_path / "side_effect.py", text)))
    assert task.source == text
    assert not marker.exists()


def test_definitions_inside_module_level_if_count(tmp_path: Path) -> None:
    text = TASK_TEXT.replace("def get_inputs():", "if True:\n    def get_inputs():\n        return [torch.randn(4)]\n\ndef _unused():")
    assert load_task(str(write(tmp_path / "guarded.py", text))).id == "guarded"


# --- kernelbench -------------------------------------------------------------------------------


def test_kernelbench_all_levels_numeric_order(kb_root: Path) -> None:
    tasks = load_tasks(f"kernelbench:{kb_root}")
    assert ids(tasks) == ["kernelbench/L1/1", "kernelbench/L1/2", "kernelbench/L1/10", "kernelbench/L2/1"]
    first = tasks[0]
    assert (first.name, first.level, first.origin) == ("Square_matmul", 1, "kernelbench")
    assert first.source == TASK_TEXT


@pytest.mark.parametrize(
    ("selectors", "expected"),
    [
        (":1", ["kernelbench/L1/1", "kernelbench/L1/2", "kernelbench/L1/10"]),
        (":1:1-2", ["kernelbench/L1/1", "kernelbench/L1/2"]),
        (":1:1-5,10", ["kernelbench/L1/1", "kernelbench/L1/2", "kernelbench/L1/10"]),
        (":1,2:1", ["kernelbench/L1/1", "kernelbench/L2/1"]),
        (":1-2:10", ["kernelbench/L1/10"]),
        ("::1", ["kernelbench/L1/1", "kernelbench/L2/1"]),
        (":*:2", ["kernelbench/L1/2"]),
    ],
)
def test_kernelbench_selectors(kb_root: Path, selectors: str, expected: list[str]) -> None:
    assert ids(load_tasks(f"kernelbench:{kb_root}{selectors}")) == expected


def test_kernelbench_inner_folder_as_root(kb_root: Path) -> None:
    task = load_task(f"kernelbench:{kb_root / 'KernelBench'}:2:1")
    assert (task.id, task.name) == ("kernelbench/L2/1", "Gemm_Add")


# --- builtin -----------------------------------------------------------------------------------


def test_builtin_all() -> None:
    tasks = load_tasks("builtin")
    assert len(tasks) >= 32
    assert all(t.origin == "builtin" and t.id.startswith("builtin/L") for t in tasks)
    assert [t.level for t in tasks] == sorted(t.level for t in tasks)  # type: ignore[type-var]


def test_builtin_selectors() -> None:
    level1 = load_tasks("builtin:1")
    assert level1 and {t.level for t in level1} == {1}
    assert ids(load_tasks("builtin:2:1-3")) == [
        "builtin/L2/01_linear_gelu_scale",
        "builtin/L2/02_conv2d_mish_clamp",
        "builtin/L2/03_linear_layernorm_silu",
    ]
    assert [(t.level, t.id.split("/")[-1][:2]) for t in load_tasks("builtin:1,3:1")] == [(1, "01"), (3, "01")]
    assert {t.level for t in load_tasks("builtin::2")} == {1, 2, 3}


@pytest.mark.parametrize("spec", ["builtin/L1/03_softmax", "03_softmax", "softmax"])
def test_builtin_single(spec: str) -> None:
    task = load_task(spec)
    assert (task.id, task.name, task.level, task.origin) == ("builtin/L1/03_softmax", "softmax", 1, "builtin")
    assert "def get_inputs" in task.source and Path(task.path).name == "03_softmax.py"


def test_unknown_size_value_warns(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setenv(SIZE_ENV, "huge")
    with caplog.at_level(logging.WARNING):
        load_task("softmax")
    assert SIZE_ENV in caplog.text


# --- bad input ---------------------------------------------------------------------------------


def bad_cases(tmp: Path, kb: Path) -> dict[str, tuple[str, str]]:
    """case name -> (spec, a fragment the one-line message must contain)."""
    empty = tmp / "empty_dir"
    empty.mkdir()
    only_helpers = tmp / "only_helpers"
    write(only_helpers / "util.py", "X = 1\n")
    broken_in_folder = tmp / "broken_folder"
    write(broken_in_folder / "a_good.py")
    write(broken_in_folder / "b_half.py", "class Model:\n    pass\n")
    not_kb = tmp / "not_kb"
    write(not_kb / "something.py")
    dup = tmp / "dup_kb"
    write(dup / "KernelBench" / "level1" / "3_A.py")
    write(dup / "KernelBench" / "level1" / "03_B.py")
    non_utf8 = tmp / "latin1.py"
    non_utf8.write_bytes(b"# caf\xe9\n" + TASK_TEXT.encode())
    return {
        "empty spec": ("   ", "empty task spec"),
        "missing file": (str(tmp / "nope.py"), "no such file or folder"),
        "missing folder": (str(tmp / "nowhere") + "/", "no such file or folder"),
        "syntax error": (str(write(tmp / "bad_syntax.py", "import torch\n\ndef get_inputs(:\n    pass\n")), "line 3"),
        "missing defs": (str(write(tmp / "no_model.py", "def get_inputs():\n    return []\n")), "missing class Model, def get_init_inputs"),
        "Model is a function": (str(write(tmp / "fn_model.py", TASK_TEXT.replace("class Model(nn.Module):", "def Model():"))), "missing class Model"),
        "empty file": (str(write(tmp / "blank.py", "")), "not a task file"),
        "not utf-8": (str(non_utf8), "not a UTF-8 text file"),
        "empty folder": (str(empty), "no *.py task files"),
        "folder of helpers": (str(only_helpers), "no file in folder"),
        "half task in folder": (str(broken_in_folder), "missing def get_inputs"),
        "unknown builtin name": ("sofmax", "close matches: softmax"),
        "unknown builtin id": ("builtin/L1/03_sofmax", "close matches: builtin/L1/03_softmax"),
        "unknown name, no match": ("zzzzqqq", "unknown built-in task 'zzzzqqq'"),
        "builtin level matches nothing": ("builtin:9", "no built-in task matches"),
        "builtin id matches nothing": ("builtin:1:90-99", "no built-in task matches"),
        "builtin malformed level": ("builtin:x", "malformed level selector"),
        "builtin too many parts": ("builtin:1:2:3", "malformed spec"),
        "builtin reversed range": ("builtin:1:5-2", "end is below the start"),
        "kernelbench no root": ("kernelbench", "malformed spec"),
        "kernelbench empty root": ("kernelbench:", "malformed spec"),
        "kernelbench missing root": (f"kernelbench:{tmp / 'no_kb'}", "KernelBench root not found"),
        "kernelbench root is a file": (f"kernelbench:{non_utf8}", "not a folder"),
        "kernelbench bad layout": (f"kernelbench:{not_kb}", "is not a KernelBench checkout"),
        "kernelbench range matches nothing": (f"kernelbench:{kb}:1:50-60", "no KernelBench task"),
        "kernelbench level matches nothing": (f"kernelbench:{kb}:7", "no KernelBench task"),
        "kernelbench malformed ids": (f"kernelbench:{kb}:1:1-", "malformed id selector"),
        "kernelbench too many parts": (f"kernelbench:{kb}:1:1:1", "malformed spec"),
        "kernelbench duplicate ids": (f"kernelbench:{dup}", "share problem id 3"),
        "load_task with many": ("builtin:1", "matched"),
    }


def _case_names() -> list[str]:
    # pytest needs the names at collection time; build the cases once in a throwaway folder.
    with tempfile.TemporaryDirectory() as tmp:
        return list(bad_cases(Path(tmp), Path(tmp) / "kb"))


@pytest.mark.parametrize("case", _case_names())
def test_bad_input_raises_one_line(case: str, tmp_path: Path, kb_root: Path) -> None:
    spec, fragment = bad_cases(tmp_path, kb_root)[case]
    loader = load_task if case == "load_task with many" else load_tasks
    with pytest.raises(TaskError) as info:
        loader(spec)
    message = str(info.value)
    assert fragment in message
    assert "\n" not in message and message.strip() == message and message


def test_task_error_is_value_error_and_flattens_newlines() -> None:
    err = TaskError("first\nsecond\tthird")
    assert isinstance(err, ValueError)
    assert str(err) == "first second third"


def test_load_task_says_how_many_matched() -> None:
    count = len(load_tasks("builtin:1"))
    with pytest.raises(TaskError, match=rf"matched {count} tasks, expected exactly one"):
        load_task("builtin:1")
