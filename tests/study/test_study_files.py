"""Every study a page cites is a committed file: each studies/*.toml loads as `study run` loads it
(its built-in task specs select tasks), every `study run studies/X.toml` in the docs names a file
that is there, and no results page or device-session case quotes a study by inline flags instead
(docs/study.md, "Study files", states the rule and its one exception)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from kernelwright.study.spec import load_spec
from kernelwright.tasks import load_tasks

ROOT = Path(__file__).resolve().parents[2]
STUDIES = sorted((ROOT / "studies").glob("*.toml"))
# `kernelwright study run` or `python -m kernelwright.cli[.main] study run`, then what it is given
STUDY_RUN = re.compile(r"kernelwright(?:\.cli(?:\.main)?)? study run\s+(\S+)")
NO_FILE = "no study file"  # the marker of a quoted run whose task list was never recorded


def inline_citations(text: str) -> list[str]:
    """The lines that quote `study run` with flags but no studies/ file, unless marked NO_FILE."""
    lines = text.splitlines()
    found = []
    for m in STUDY_RUN.finditer(text):
        line = lines[text.count("\n", 0, m.start())]
        if not m.group(1).startswith("studies/") and NO_FILE not in line:
            found.append(line.strip())
    return found


def _cited_files(text: str) -> set[str]:
    return {m.group(1).rstrip("`.,;:)") for m in STUDY_RUN.finditer(text) if m.group(1).startswith("studies/")}


@pytest.mark.parametrize("path", STUDIES, ids=lambda p: p.name)
def test_the_study_file_loads_as_study_run_loads_it(path: Path) -> None:
    spec = load_spec(path)
    assert spec.out.parts[0] == "runs", "a study file writes under runs/ unless --out says otherwise"
    for task_spec in spec.tasks:
        if task_spec.startswith("builtin"):  # KernelBench's data lives outside the repository
            assert load_tasks(task_spec), task_spec


def test_every_cited_study_file_is_committed() -> None:
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    cited = {(page.relative_to(ROOT), f) for page in pages for f in _cited_files(page.read_text())}
    assert cited, "the results pages cite their study files"
    assert [(str(page), f) for page, f in sorted(cited) if not (ROOT / f).is_file()] == []


def test_every_study_file_is_named_where_it_is_used() -> None:
    """A file no page or device case names is an orphan: nothing says what it measured."""
    texts = "".join(p.read_text() for p in [*sorted((ROOT / "docs").rglob("*.md")), *sorted((ROOT / "ops").glob("*.sh"))])
    assert [p.name for p in STUDIES if f"studies/{p.name}" not in texts] == []


def test_no_results_page_or_device_case_quotes_a_study_by_inline_flags() -> None:
    sources = [*sorted((ROOT / "docs" / "results").rglob("*.md")), ROOT / "ops" / "device_session.sh"]
    inline = {str(p.relative_to(ROOT)): found for p in sources if (found := inline_citations(p.read_text()))}
    assert inline == {}


def test_the_check_catches_inline_flags() -> None:
    text = ("kernelwright study run -r search -t builtin --target triton\n"
            "python3 -m kernelwright.cli.main study run \\\n  -m hf:x --out /tmp/st\n"
            "kernelwright study run studies/builtin-search-cuda-gpu.toml --jobs 12\n"
            "`kernelwright study run -r search ... --cell-minutes 9` (no study file: tasks not recorded)\n"
            "through `kernelwright study run`.\n")
    assert inline_citations(text) == ["kernelwright study run -r search -t builtin --target triton",
                                      "python3 -m kernelwright.cli.main study run \\"]
    assert _cited_files(text) == {"studies/builtin-search-cuda-gpu.toml"}
