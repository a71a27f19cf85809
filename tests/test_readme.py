"""The README and the results pages hold together: scripts/readme_check.py's static checks (length,
no commit ids, links, quoted commands, every results-table figure on its page), and every results
page reachable from docs/results/README.md. No set-up, no model: plain text."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "docs" / "results"
LINK = re.compile(r"\]\(([^)\s]+)\)")

_spec = importlib.util.spec_from_file_location("readme_check", ROOT / "scripts" / "readme_check.py")
readme_check = sys.modules.setdefault("readme_check", importlib.util.module_from_spec(_spec))
_spec.loader.exec_module(readme_check)  # type: ignore[union-attr]


def test_the_readme_holds() -> None:
    assert readme_check.static_problems((ROOT / "README.md").read_text()) == []


def test_the_checks_catch_what_they_name(tmp_path: Path) -> None:
    (tmp_path / "page.md").write_text("kept at 1.46x torch.compile, 25 of 28\n")
    rows = "".join(f"| s{i} | ran | kept at 1.46x, 25 of 28 | [p](page.md) |\n" for i in range(3))
    text = (
        "A run at 3fa9c2e1 did it; see [gone](nowhere.md).\n## Results\n| setting | what | outcome | page |\n|---|---|---|---|\n"
        + rows + "| s3 | ran | kept at 1.55x | [p](page.md) |\n" + "line\n" * 170
    )
    problems = readme_check.static_problems(text, root=tmp_path)
    assert any("commit id: 3fa9c2e1" in p for p in problems), problems
    assert any("link to nothing: nowhere.md" in p for p in problems)
    assert any("lines, more than 170" in p for p in problems)
    assert any("page.md does not state '1.55x'" in p for p in problems)
    assert any("no longer quoted: kernelwright doctor" in p for p in problems)
    assert not any("rows (4 to 6)" in p for p in problems)  # four rows
    assert not any("1.46x" in p or "25 of 28" in p for p in problems)  # stated on the page


def _links(page: Path) -> set[Path]:
    out = set()
    for target in LINK.findall(page.read_text()):
        path = target.partition("#")[0]
        if path and not re.match(r"^[a-z]+:", path):
            out.add((page.parent / path).resolve())
    return out


def _pages() -> list[Path]:
    """The written pages: docs/*.md, docs/results/*.md and the session pages (not the raw files)."""
    return sorted([*ROOT.glob("docs/*.md"), *RESULTS.glob("*.md"), *RESULTS.glob("sessions/*.md"), ROOT / "README.md"])


def test_every_link_of_the_docs_resolves() -> None:
    broken = [f"{page.relative_to(ROOT)} -> {t}" for page in _pages() for t in _links(page) if not t.exists()]
    assert broken == []


def test_the_results_index_reaches_every_results_page_and_archive() -> None:
    index = RESULTS / "README.md"
    reached = _links(index) | _links(RESULTS / "sessions" / "README.md")
    assert (RESULTS / "sessions" / "README.md").resolve() in _links(index)
    pages = [*RESULTS.glob("*.md"), *RESULTS.glob("sessions/*.md"), *RESULTS.glob("sessions/*.tar.xz")]
    orphans = [p.relative_to(RESULTS) for p in pages if p.resolve() not in reached and p.name != "README.md"]
    assert orphans == []
