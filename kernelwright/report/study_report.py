"""`kernelwright study report FOLDER...`: REPORT.md, report.html and figures, from the logs alone.

A pure function of the study folders' files (cells.jsonl, attempts.jsonl, manifest.json and the
task facts under facts/): nothing is re-run or re-measured, so the report of a published study
can be rebuilt by anyone from its logs. The HTML is self-contained (inline CSS, figures as base64
PNG, kernels in collapsible blocks): it opens from disk with no server.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from pathlib import Path

from kernelwright.errors import BadInput
from kernelwright.llm.budget import CLOCK
from kernelwright.records import NOT_JUDGED, Verdict
from kernelwright.report import figures, metrics, tables
from kernelwright.report.tables import Table
from kernelwright.study.log import StudyData, read_study, write_text_atomic


class ReportError(BadInput, ValueError):
    """Nothing to report on; the message is one line."""


@dataclass
class Kept:
    group: str
    seed: int
    verdict: str
    speedup: str
    roofline: str
    generalises: str  # correct at the task's second shape too: yes, no, or - (not checked)
    attempt_id: str | None
    reason: str
    code: str | None


@dataclass
class TaskSection:
    task_id: str
    name: str
    level: int | None
    kept: list[Kept] = field(default_factory=list)
    size: str | None = None  # the problem its candidates ran (records.Sizing.summary), where recorded


@dataclass
class Report:
    folders: list[Path]
    sources: list[str]  # lines about where the numbers come from (manifests, log health)
    tables: list[Table]
    tasks: list[TaskSection]
    figures: dict[str, Path] = field(default_factory=dict)  # title -> PNG


def _sources(data: StudyData) -> list[str]:
    lines = []
    for folder, m in zip(data.folders, data.manifests):
        v = ", ".join(f"{k} {val}" for k, val in sorted(m.versions.items()))
        commit = m.git.get("commit", "")[:12] + (" (with local changes)" if m.git.get("dirty") else "")
        # folders written before runs recorded their end (and imports) have none: then nothing is said
        last = m.runs[-1] if m.runs else None
        end = f", last ended {last.finished} ({last.ended})" if last is not None and last.finished else ""
        lines.append(f"{folder.name}: started {m.started}, {len(m.runs)} invocation(s){end}; {v}"
                     + (f"; git {commit}" if commit else "") + (f"; GPUs {', '.join(m.machine['gpus'])}"
                                                                 if m.machine.get("gpus") else ""))
        modes = sorted({(c.get("eval") or {}).get("compat") or "kernelwright" for c in m.configs.values()})
        if modes != ["kernelwright"]:
            lines.append(f"{folder.name}: evaluated in {' and '.join(modes)} mode"
                         + (" (KernelBench's definitions: the task module's names visible to the candidate, an "
                            "__init__ failure not compiled, the task's own size; the candidate could reach the "
                            "reference's Model)" if "kernelbench" in modes else ""))
        clocks = sorted({c["cell_minutes"] for c in m.configs.values() if c.get("cell_minutes") is not None})
        if clocks:
            mine = [c for c in data.cells if c.config_hash in m.configs]
            by_clock = sum(1 for c in mine if (c.stopped or "").startswith(f"{CLOCK} of"))
            unjudged = sum(1 for c in mine for a in data.attempts_of(c)
                           if a.eval.verdict == Verdict.NOT_BUILT and (a.eval.error or "").startswith(NOT_JUDGED))
            lines.append(f"{folder.name}: a clock of {' / '.join(f'{x:g}' for x in clocks)} min per cell (no model "
                         f"request and no evaluation begun after it): {by_clock} of {len(mine)} cell(s) stopped by it, "
                         f"{unjudged} candidate(s) left unjudged by it")
    models = sorted({c.model for c in data.cells if c.model})
    attempts = sum(len(v) for v in data.attempts.values())
    lines.append(f"{len(data.cells)} cell(s), {attempts} candidate(s); model(s): {', '.join(models) or 'n/a'}.")
    if data.dropped_attempts or data.skipped_lines:
        lines.append(f"Not counted: {data.dropped_attempts} attempt line(s) of cells interrupted and redone, "
                     f"{data.skipped_lines} unreadable line(s) (writes cut short by a kill).")
    return lines


def _task_sections(data: StudyData, scored: list[metrics.Scored]) -> list[TaskSection]:
    sections: dict[str, TaskSection] = {}
    for s in sorted(scored, key=lambda s: (s.cell.level if s.cell.level is not None else 99, s.cell.task_id)):
        sec = sections.setdefault(s.cell.task_id, TaskSection(s.cell.task_id, s.cell.task_name, s.cell.level))
        r = s.result
        frac, why = metrics.roofline_fraction(metrics.roofline_floor(data.folders, s.cell.task_id), r)
        roof = f"{frac:.3g} of the floor" if frac is not None else f"n/a ({why})"
        speed = "n/a (not timed)" if r is None or r.speedup is None else (
            f"{r.speedup:.3g}x" + (" (faster beyond noise)" if r.faster else " (not faster beyond noise)"))
        code = (s.pick.repaired_code or s.pick.code) if s.pick is not None else None
        gen = "-" if r is None else {True: "yes", False: "no", None: "-"}[r.generalises]
        sec.kept.append(Kept(group=s.group, seed=s.cell.seed, verdict=s.verdict_label, speedup=speed, roofline=roof,
                             generalises=gen, attempt_id=s.cell.selected, reason=s.cell.reason, code=code))
        if r is not None and r.sizing is not None and sec.size is None:
            sec.size = r.sizing.summary()
    return list(sections.values())


def _check_folders(folders: list[Path]) -> None:
    for f in folders:
        if not (f / "cells.jsonl").is_file():
            raise ReportError(f"{f} is not a study folder (no cells.jsonl)")


def build(folders: list[Path], figure_dir: Path | None = None) -> Report:
    _check_folders(folders)
    data = read_study(*folders)
    scored = metrics.score(data)
    report = Report(folders=list(folders), sources=_sources(data), tables=tables.all_tables(scored),
                    tasks=_task_sections(data, scored))
    if figure_dir is not None:
        figure_dir.mkdir(parents=True, exist_ok=True)
        for title, name, draw in (("Best-of-n scaling", "best_of_n.png", figures.best_of_n),
                                  ("Task x regime matrix", "matrix.png", figures.matrix)):
            if draw(scored, figure_dir / name):
                report.figures[title] = figure_dir / name
    return report


def render_markdown(report: Report, base: Path) -> str:
    out = ["# Study report", "", "Generated from the logs of: " + ", ".join(f"`{f}`" for f in report.folders), ""]
    out += [f"- {line}" for line in report.sources] + [""]
    out.append(tables.markdown_tables(report.tables))
    for title, path in report.figures.items():
        out += [f"### {title}", "", f"![{title}]({path.relative_to(base) if path.is_relative_to(base) else path})", ""]
    out += ["## Per task", ""]
    for sec in report.tasks:
        out += [f"### {sec.task_id}" + (f" (level {sec.level})" if sec.level is not None else ""), ""]
        if sec.size:
            out += [f"Problem size: {sec.size}", ""]
        out += ["| regime | seed | kept verdict | speedup | roofline | generalises | kept attempt |",
                "|---|---|---|---|---|---|---|"]
        for k in sec.kept:
            out.append(f"| {k.group} | {k.seed} | {k.verdict} | {k.speedup} | {k.roofline} | {k.generalises} | "
                       f"{(k.attempt_id or 'none').replace('|', '/')} |")
        out.append("")
        for k in sec.kept:
            if k.code:
                out += [f"<details><summary>{k.group} (seed {k.seed}): kept kernel</summary>", "", "```python",
                        k.code.rstrip(), "```", "", "</details>", ""]
    return "\n".join(out).rstrip() + "\n"


def render_html(report: Report) -> str:
    import jinja2

    env = jinja2.Environment(loader=jinja2.PackageLoader("kernelwright.report", "templates"),
                             autoescape=True, undefined=jinja2.StrictUndefined)
    images = {title: base64.b64encode(p.read_bytes()).decode("ascii") for title, p in report.figures.items()}
    return env.get_template("study.html.jinja").render(report=report, images=images)


def write_report(folders: list[Path], out: Path | None = None) -> dict[str, Path]:
    _check_folders(folders)  # before anything is made: a file given as a folder is bad input
    out = out or folders[0]
    md, html = out / "REPORT.md", out / "report.html"
    try:
        out.mkdir(parents=True, exist_ok=True)
        report = build(folders, figure_dir=out / "figures")
        write_text_atomic(md, render_markdown(report, out))
        write_text_atomic(html, render_html(report))
    except OSError as e:  # a full disk, a read-only folder: one line, and no half-written report
        raise ReportError(f"cannot write the report to {out}: {e.strerror or e}") from None
    return {"markdown": md, "html": html, **{p.stem: p for p in report.figures.values()}}

