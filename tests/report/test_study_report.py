"""The report: a pure function of the logs. A golden file pins the tables of a small recorded study
(tests/fixtures/study/: the 2 regimes x 3 tasks replay study, and an import with timing); the
HTML is opened in headless Chromium."""

from __future__ import annotations

import os
import re
import shutil
import subprocess

import pytest
from typer.testing import CliRunner

from kernelwright.cli.main import app
from kernelwright.records import Verdict
from kernelwright.report import metrics, tables
from kernelwright.report.figures import COLORS
from kernelwright.report.study_report import build
from kernelwright.study.log import read_study
from tests.conftest import FIXTURES
from tests.study._records import attempt, cell, result, write

STUDY = FIXTURES / "study"
FOLDERS = [STUDY / "small", STUDY / "imported"]
GOLDEN = STUDY / "tables.golden.md"


def test_tables_match_the_golden_file():
    """Regenerate with KW_UPDATE_GOLDEN=1 after a deliberate change, and read the diff."""
    got = tables.markdown_tables(build(FOLDERS).tables)
    if os.environ.get("KW_UPDATE_GOLDEN"):
        GOLDEN.write_text(got)
    assert got == GOLDEN.read_text()


def test_recorded_study_is_counted_as_recorded():
    data = read_study(*FOLDERS)
    scored = metrics.score(data)
    st = {g: metrics.stats(g, items) for g, items in metrics.groups(scored).items()}
    imported = st["import:kernelbench_runs"]
    # the unmatched problem stays in the denominator as a failure
    assert imported.cells == 3 and imported.custom_correct == 1 and len(imported.speedups) == 1
    assert st["zero_shot"].cells == 3 and st["zero_shot"].custom_correct == 0


def test_report_files_are_self_contained(tmp_path):
    r = CliRunner().invoke(app, ["study", "report", *map(str, FOLDERS), "--out", str(tmp_path)])
    assert r.exit_code == 0, r.output
    md, html = (tmp_path / "REPORT.md").read_text(), (tmp_path / "report.html").read_text()
    for t in ("Table I", "Table II", "Table III", "Table IV", "Table V"):
        assert t in md and t in html
    assert "![Best-of-n scaling](figures/best_of_n.png)" in md
    for png in ("best_of_n.png", "matrix.png"):
        assert (tmp_path / "figures" / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert html.count("data:image/png;base64,") == 2
    assert not re.search(r"""(src|href)=["'](https?:|//|[^"'#d])""", html), "the HTML must load nothing from outside"
    assert "<details>" in html and "kept kernel" in html  # kept kernels, collapsible


def test_a_missing_folder_is_bad_input(tmp_path):
    r = CliRunner().invoke(app, ["study", "report", str(tmp_path)])
    assert r.exit_code == 2 and "not a study folder" in r.output


def test_a_file_given_as_a_folder_is_bad_input_and_left_alone(tmp_path):
    f = tmp_path / "notes.txt"
    f.write_text("mine")
    r = CliRunner().invoke(app, ["study", "report", str(f)])
    assert r.exit_code == 2 and "not a study folder" in r.output
    assert f.read_text() == "mine"


def test_a_full_disk_is_one_line_and_leaves_no_half_report(tiny_disk):
    """A 1 MB tmpfs as the report's folder, filled up to its last 64 kB: the figures and pages do
    not all fit."""
    with open(tiny_disk / "filler", "wb") as f:
        f.write(b"\0" * ((1 << 20) - (64 << 10)))
    r = CliRunner().invoke(app, ["study", "report", *map(str, FOLDERS), "--out", str(tiny_disk)])
    assert r.exit_code == 2, r.output
    assert "cannot write the report" in r.output and "No space left on device" in r.output
    assert not (tiny_disk / "REPORT.md").exists() and not (tiny_disk / "report.html").exists()
    assert not list(tiny_disk.glob(".*.tmp"))


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("chromium") is None, reason="chromium is not installed (apt-get install chromium)")
def test_html_opens_in_headless_chromium(tmp_path):
    from PIL import Image

    CliRunner().invoke(app, ["study", "report", *map(str, FOLDERS), "--out", str(tmp_path)])
    url = (tmp_path / "report.html").resolve().as_uri()
    flags = ["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
             f"--user-data-dir={tmp_path / 'profile'}"]
    dom = subprocess.run([*flags, "--dump-dom", url], capture_output=True, text=True, timeout=120, check=False)
    assert "Table I: outcomes per regime" in dom.stdout and "<table>" in dom.stdout, dom.stderr[-2000:]
    shot = tmp_path / "shot.png"
    subprocess.run([*flags, "--window-size=1280,1600", f"--screenshot={shot}", url], capture_output=True,
                   timeout=120, check=False)
    assert shot.is_file() and shot.stat().st_size > 30_000
    img = Image.open(shot).convert("RGB")
    top = img.crop((0, 0, 1280, 900))  # the tables are at the top of the page
    assert len(top.getcolors(maxcolors=1 << 20) or []) > 50, "the screenshot is blank or nearly so"
    # the table headers' blue fill is drawn: the tables rendered, not just text
    assert any(rgb == (0xDB, 0xE9, 0xF7) for _, rgb in top.getcolors(maxcolors=1 << 20))


def test_ablation_table_compares_like_with_like(tmp_path):
    cells, attempts = [], []
    outcomes = {  # regime -> verdict per task
        "agentic": [Verdict.CORRECT, Verdict.CORRECT, Verdict.WRONG_OUTPUT, Verdict.CORRECT],
        "agentic+no_retrieval": [Verdict.CORRECT, Verdict.WRONG_OUTPUT, Verdict.WRONG_OUTPUT],  # 3 tasks only
    }
    for regime, verdicts in outcomes.items():
        for i, v in enumerate(verdicts):
            key = f"h{len(regime)}/{regime}/t{i}"
            a = attempt(key, "r", 0, 0, result(v, speedup=2.0 if v == Verdict.CORRECT else None,
                                                faster=v == Verdict.CORRECT))
            attempts.append(a)
            cells.append(cell(key, "r", [a], a))
    scored = metrics.score(read_study(write(tmp_path, cells, attempts)))
    t3 = tables.table_iii(scored)
    # compared on the 3 tasks both ran: 2/3 vs 1/3
    assert t3.rows == [["agentic+no_retrieval", "agentic", "3", "33.3% vs 66.7% (-33.3 pt)",
                        "33.3% vs 66.7% (-33.3 pt)", "100.0% vs 100.0% (+0.0 pt)", "2x vs 2x (1x)"]]


def test_best_of_n_is_the_unbiased_estimate():
    assert metrics.pass_at_k(4, 1, 1) == pytest.approx(0.25)
    assert metrics.pass_at_k(4, 1, 2) == pytest.approx(0.5)
    assert metrics.pass_at_k(4, 0, 4) == 0.0 and metrics.pass_at_k(4, 3, 2) == 1.0


def test_every_verdict_has_a_colour():
    assert {v.value for v in Verdict} <= set(COLORS)



def test_table_v_counts_the_funnel_from_samples_to_verified_kernels():
    """Search's own notes say which samples were duplicates and which it built; a pre-check's
    refutation is a failed `precheck` stage; a verified kernel is a built, correct custom kernel."""
    from kernelwright.records import Stage, Usage

    key = "h/search/builtin/L1/01_x"
    refuted = result(Verdict.WRONG_OUTPUT)
    refuted.stages = [Stage(name="precheck", seconds=0.1, ok=False, detail="counterexample")]
    passed = [Stage(name="precheck", seconds=0.1, ok=True)]
    good, unbuilt = result(Verdict.CORRECT, speedup=1.5), result(Verdict.NOT_BUILT)
    # a built pass has the evaluator's stages; its note keeps the pre-check's record
    good.stages, unbuilt.stages = [Stage(name="build", seconds=30.0, ok=True)], list(passed)
    checked = {"status": "pass"}
    made = []
    for i, (r, note) in enumerate([(refuted, {"duplicate_of": None, "built": False, "precheck": checked}),
                                   (refuted, {"duplicate_of": 0, "built": False}),
                                   (good, {"duplicate_of": None, "built": True, "precheck": checked}),
                                   (unbuilt, {"duplicate_of": None, "built": False, "precheck": checked}),
                                   # a launch variant of the verified kernel: a timing, not a sample
                                   (good, {"tune": {"threads": 512}, "of": "t0/s2"})]):
        a = attempt(key, "r1", 0, i, r)
        a.notes = {"search": note}
        a.usage, a.wall_s = Usage(completion_tokens=100), 10.0
        made.append(a)
    other = attempt("h/zero_shot/builtin/L1/01_x", "r1", 0, 0, result(Verdict.SYNTAX_ERROR))
    scored = [metrics.Scored(cell=cell(key, "r1", made, made[2]), group="search", pick=made[2], attempts=made),
              metrics.Scored(cell=cell(other.cell_key, "r1", [other], other), group="zero_shot", pick=other,
                             attempts=[other])]
    rows = {r[0]: r[1:] for r in tables.table_v(scored).rows}
    # samples, distinct, pre-checked, refuted, built, verified, tokens / verified, wall / verified
    assert rows["search"] == ["4", "3", "3", "1", "1", "1", "400", "40 s"]  # the variant is not in it
    assert rows["zero_shot"] == ["1", "1", "0", "0", "0", "0", "-", "-"]


def test_table_i_counts_the_share_of_work_in_custom_code():
    """Correct with a custom kernel is counted plainly and again where the custom code does most of
    the work (the evaluator's measured share above one half); the median share is over the picks
    that measured one."""
    def row(shares):
        picks = []
        for i, share in enumerate(shares):
            r = result(Verdict.CORRECT, speedup=1.1)
            r.custom_share = share
            a = attempt(f"h/search/builtin/L1/0{i}_x", "r1", 0, 0, r)
            picks.append(metrics.Scored(cell=cell(a.cell_key, "r1", [a], a), group="search", pick=a, attempts=[a]))
        wrong = attempt("h/search/builtin/L1/09_x", "r1", 0, 0, result(Verdict.WRONG_OUTPUT))
        picks.append(metrics.Scored(cell=cell(wrong.cell_key, "r1", [wrong], wrong), group="search", pick=wrong,
                                    attempts=[wrong]))
        table = tables.table_i(picks)
        return dict(zip(table.header, table.rows[0]))

    measured = row([0.01, 0.9, 0.7])
    assert measured["correct (custom kernel)"] == "75.0%" and measured["correct (custom > 1/2)"] == "50.0%"
    assert measured["median share in custom code"] == "70% (n=3)"
    # a correct custom pick without a measured share: the count cannot be stated
    unmeasured = row([0.9, None])
    assert unmeasured["correct (custom > 1/2)"] == "n/a" and unmeasured["median share in custom code"] == "90% (n=1)"


def test_a_kernel_the_template_verifies_alone_is_counted_apart_from_the_models():
    """Honest credit: a pick whose scaffold region was empty, or a lone GEMM the template computes by
    itself, is correct with a custom kernel but not model-written; a launch variant of it is what
    it varies; a region the model wrote counts in both."""
    def scored(i, notes, pick_notes=None):
        a = attempt(f"h/search/builtin/L2/0{i}_x", "r1", 0, 0, result(Verdict.CORRECT, speedup=1.1))
        a.notes = notes
        attempts, pick = [a], a
        if pick_notes is not None:  # a launch variant of `a`, picked
            v = attempt(f"h/search/builtin/L2/0{i}_x", "r1", 0, 1, result(Verdict.CORRECT, speedup=1.2))
            v.notes = {"search": {"tune": {"BLOCK": 256}, "of": a.id}}
            attempts, pick = [a, v], v
        return metrics.Scored(cell=cell(a.cell_key, "r1", attempts, pick), group="search", pick=pick,
                              attempts=attempts)

    picks = [scored(1, {"scaffold": {"region": "y = x * 2.0", "empty": False, "template_only": False}}),
             scored(2, {"scaffold": {"region": "", "empty": False, "template_only": True}}),
             scored(3, {"scaffold": {"region": "y = acc", "empty": False, "template_only": True}}, pick_notes={}),
             scored(4, {"scaffold": {"region": "", "empty": True}})]  # a log from before the key: empty only
    assert [p.template_only for p in picks] == [False, True, True, True]
    t1 = tables.table_i(picks)
    row = dict(zip(t1.header, t1.rows[0]))
    assert row["correct (custom kernel)"] == "100.0%" and row["correct (model-written)"] == "25.0%"
    assert tables.table_ii(picks).rows[0][1] == "4/4 (100%; model-written 1)"
