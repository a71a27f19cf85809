"""Tables I-IV of the report as plain data (title, header, rows, notes), rendered to Markdown here
and to HTML by the template, so both say exactly the same thing."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import NamedTuple

from kernelwright.records import Verdict
from kernelwright.report import metrics
from kernelwright.report.metrics import GroupStats, Scored
from kernelwright.study.records import StudyAttempt


@dataclass
class Table:
    key: str
    title: str
    header: list[str]
    rows: list[list[str]]
    notes: list[str] = field(default_factory=list)
    empty: str | None = None  # said instead of the table when there are no rows


def pct(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.1f}%"


def ratio(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.3g}x"


def delta(a: float | None, b: float | None, unit: str) -> str:
    if a is None or b is None:
        return "n/a"
    return f"{a - b:+.1f} {unit}" if unit == "pt" else f"{a / b:.3g}x"


# -- Table I ---------------------------------------------------------------------------------------


def _protocol_notes(scored: list[Scored]) -> list[str]:
    tolerances, trials, protocols, devices = Counter(), Counter(), Counter(), Counter()
    untimed = 0
    for s in scored:
        for a in s.attempts:
            r = a.eval
            if r.tolerance is not None:
                tolerances[f"atol={r.tolerance.atol:g} rtol={r.tolerance.rtol:g} ({r.tolerance.dtype})"] += 1
            if r.trials and r.verdict.outputs_match:  # a failing run stops early: not the protocol
                trials[r.trials] += 1
            if r.timing is not None:
                protocols[r.timing.protocol] += 1
            elif r.verdict.outputs_match:
                untimed += 1
            if r.device:
                devices[r.device] += 1
    notes = []
    if tolerances:
        notes.append("Tolerance (allclose against the reference): " + "; ".join(sorted(tolerances))
                     + (f", over {' or '.join(str(t) for t in sorted(trials))} trials of fresh random inputs" if trials else "")
                     + ".")
    else:
        notes.append("Tolerance: no candidate reached the output comparison, so none is recorded.")
    if protocols:
        notes.append("Timing protocol: " + "; ".join(sorted(protocols)) + ".")
    if untimed or not protocols:
        notes.append(f"Timing: {untimed} candidate(s) with matching outputs carry no timing (evaluated without "
                     "timing); where a correct pick is untimed, fast_1 and speedups are n/a.")
    if devices:
        notes.append("Evaluated on: " + ", ".join(sorted(devices)) + ".")
    return notes


def table_i(scored: list[Scored]) -> Table:
    rows = []
    for group, items in metrics.groups(scored).items():
        st = metrics.stats(group, items)
        rows.append([group, str(st.cells), pct(st.pct(st.compiled)), pct(st.pct(st.correct)),
                     pct(st.pct(st.custom_correct)), _majority(st), pct(st.fast_pct), pct(st.fast_vs_compile_pct),
                     ratio(st.geomean) + (f" (n={len(st.speedups)})" if st.speedups else ""),
                     "-" if st.median_share is None else f"{100 * st.median_share:.0f}% (n={len(st.shares)})"])
    notes = [
        ("Rates are over cells (regime x task x seed), each scored by its pick (the ranking key's choice); a failed "
         "cell stays in the denominator as a failure."),
        ("fast_1: correct, custom kernel ran, and faster than the eager reference beyond noise (the candidate's p75 "
         "below the reference's p25); a tie is not a win."),
        ("fast_1 vs torch.compile: fast_1 and also faster beyond noise than torch.compile(reference) timed under "
         "the same protocol (`study run --compile-baseline`): faster than both, whichever a user would pick (where "
         "torch.compile ran more than 2x slower than eager beside it, a misbehaving baseline the record flags, eager "
         "alone is the bar); n/a where a correct pick carries no torch.compile timing (run without "
         "that flag, or torch.compile failed on the machine: the record says why)."),
        "Geomean speedup: over picks that are correct with a custom kernel and were timed (n = how many).",
        ("Share of work: the time of one forward spent inside custom code (the evaluator's work probe, outside the "
         "timing loop), over the correct-with-custom picks that measured it. 'custom > 1/2' counts the picks whose "
         "custom code takes more than half of that time: a fused ReLU after a network of library convolutions is "
         "correct with a custom kernel, not this; n/a where such a pick has no measured share."),
        *_protocol_notes(scored),
    ]
    return Table("table1", "Table I: outcomes per regime",
                 ["regime", "cells", "compile", "correct", "correct (custom kernel)", "correct (custom > 1/2)",
                  "fast_1", "fast_1 vs torch.compile", "geomean speedup (correct)", "median share in custom code"],
                 rows, notes)


def _majority(st: metrics.GroupStats) -> str:
    """n/a where a correct-with-custom pick has no measured share (as fast_1 is where one is untimed)."""
    return pct(None if st.custom_correct > len(st.shares) else st.pct(st.custom_majority))


# -- Table II --------------------------------------------------------------------------------------


def table_ii(scored: list[Scored]) -> Table:
    levels = sorted({s.cell.level for s in scored if s.cell.level is not None})
    has_none = any(s.cell.level is None for s in scored)
    cols = [f"L{lv}" for lv in levels] + (["no level"] if has_none else [])
    rows = []
    for group, items in metrics.groups(scored).items():
        row = [group]
        for lv in levels + ([None] if has_none else []):
            at = [s for s in items if s.cell.level == lv]
            ok = sum(s.custom_correct for s in at)
            row.append(f"{ok}/{len(at)} ({100 * ok / len(at):.0f}%)" if at else "-")
        rows.append(row)
    return Table("table2", "Table II: correct with a custom kernel, per level", ["regime", *cols], rows,
                 ["Cells whose pick is correct with a custom kernel / cells at that level."])


# -- Table III -------------------------------------------------------------------------------------


def _paired(a: list[Scored], b: list[Scored]) -> tuple[list[Scored], list[Scored]]:
    """Both sides restricted to the (task, seed) pairs both ran, so a delta compares like with like."""
    ka = {(s.cell.task_id, s.cell.seed): s for s in a}
    kb = {(s.cell.task_id, s.cell.seed): s for s in b}
    common = sorted(set(ka) & set(kb))
    return [ka[k] for k in common], [kb[k] for k in common]


def table_iii(scored: list[Scored]) -> Table:
    by = metrics.groups(scored)
    rows = []
    missing = []
    for group, items in by.items():
        base = metrics.baseline_of(group)
        if base is None:
            continue
        if base not in by:
            missing.append(f"{group} (no {base} cells in these logs)")
            continue
        mine, theirs = _paired(items, by[base])
        a: GroupStats = metrics.stats(group, mine)
        b: GroupStats = metrics.stats(base, theirs)
        rows.append([
            group, base, str(a.cells),
            f"{pct(a.pct(a.custom_correct))} vs {pct(b.pct(b.custom_correct))} ({delta(a.pct(a.custom_correct), b.pct(b.custom_correct), 'pt')})",
            f"{pct(a.fast_pct)} vs {pct(b.fast_pct)} ({delta(a.fast_pct, b.fast_pct, 'pt')})",
            f"{pct(a.pct(a.compiled))} vs {pct(b.pct(b.compiled))} ({delta(a.pct(a.compiled), b.pct(b.compiled), 'pt')})",
            f"{ratio(a.geomean)} vs {ratio(b.geomean)} ({delta(a.geomean, b.geomean, 'x')})",
        ])  # fmt: skip
    notes = [("Each ablation against the same regime without the ablation (a spec with only n=/turns= against "
              "the plain regime), on the task x seed pairs both ran; deltas in percentage points, speedups as a ratio.")]
    if missing:
        notes.append("Not compared: " + "; ".join(missing) + ".")
    return Table("table3", "Table III: ablations against the full regime",
                 ["regime", "against", "pairs", "correct (custom kernel)", "fast_1", "compile", "geomean speedup"],
                 rows, notes, empty="No ablation in these logs has its full regime next to it." if not rows else None)


# -- Table IV --------------------------------------------------------------------------------------


def table_iv(scored: list[Scored]) -> Table:
    by = metrics.groups(scored)
    counts = {g: Counter(a.eval.verdict for s in items for a in s.attempts) for g, items in by.items()}
    failed = {g: Counter(s.cell.failure or "other" for s in items if not s.ok) for g, items in by.items()}
    verdicts = [v for v in Verdict if any(c[v] for c in counts.values())]
    kinds = sorted({k for c in failed.values() for k in c})
    rows = []
    for g in by:
        rows.append([g, str(sum(counts[g].values())), *[str(counts[g][v]) for v in verdicts],
                     *[str(failed[g][k]) for k in kinds]])
    return Table("table4", "Table IV: failure taxonomy per regime",
                 ["regime", "candidates", *[v.value for v in verdicts], *[f"cell failed: {k}" for k in kinds]], rows,
                 [("Every candidate's verdict (not only the kept one), from the evaluator's records. 'cell failed' "
                   "columns count cells without a regular outcome: task_load (the task did not load), worker (the "
                   "regime's run raised: a crashed worker, a GPU that stopped answering, a backend error), "
                   "task_missing (an imported problem no task matches).")])


# -- Table V ---------------------------------------------------------------------------------------


class Funnel(NamedTuple):
    """Where one attempt got to, on the way from a sample to a verified kernel."""

    distinct: bool
    prechecked: bool
    refuted: bool  # by the pre-check, without a build
    built: bool


def _funnel(a: StudyAttempt) -> Funnel:
    """`search` says which samples were duplicates and which it built (notes["search"]); in other
    regimes an attempt was built unless it was decided before any build (no code, syntax, a
    static rule) or refuted by a pre-check."""
    note = a.notes.get("search")
    prechecked = any(s.name == "precheck" for s in a.eval.stages)
    refuted = any(s.name == "precheck" and not s.ok for s in a.eval.stages)
    if isinstance(note, dict):
        distinct = note.get("duplicate_of") is None
        # a pass that was built carries the evaluator's stages, not the pre-check's: search's note
        # keeps the pre-check's record (the H200 study's Table V missed its built passes without it)
        checked = prechecked or note.get("precheck") is not None
        return Funnel(distinct, checked and distinct, refuted and distinct, bool(note.get("built")))
    return Funnel(True, prechecked, refuted, not refuted and not a.eval.verdict.decided_before_build)


def _per(total: float, n: int, unit: str = "") -> str:
    return f"{total / n:.0f}{unit}" if n else "-"


def table_v(scored: list[Scored]) -> Table:
    rows = []
    for g, items in metrics.groups(scored).items():
        # search's launch variants of a verified kernel are timings of one region, not samples
        attempts = [a for s in items for a in s.attempts if "tune" not in (a.notes.get("search") or {})]
        steps = [_funnel(a) for a in attempts]
        verified = sum(1 for a, st in zip(attempts, steps)
                       if st.built and a.eval.verdict == Verdict.CORRECT and a.eval.custom_kernel)
        # a region search composed from lines that passed (strategies/search/steps.py) is built, not sampled
        drawn = [not (a.notes.get("search") or {}).get("composed") for a in attempts]
        counts = [sum(getattr(st, f) and (d or f == "built") for st, d in zip(steps, drawn)) for f in Funnel._fields]
        rows.append([g, str(sum(drawn)), *map(str, counts), str(verified),
                     _per(sum(a.usage.completion_tokens for a in attempts), verified),
                     _per(sum(a.wall_s for a in attempts), verified, " s")])
    return Table("table5", "Table V: from samples to verified kernels, per regime",
                 ["regime", "samples", "distinct", "pre-checked", "refuted by pre-check", "built",
                  "verified kernels", "completion tokens / verified", "wall time / verified"], rows,
                 ["A verified kernel is a built candidate the evaluator found correct with a custom kernel (several "
                  "per cell count). 'built' counts candidates whose evaluation reached the sandbox (for `search`: "
                  "the samples it chose to build, and the regions it composed from lines that passed their own "
                  "pre-check; a duplicate carries its twin's verdict and is not built again). "
                  "Tokens and wall time are every attempt's (generation, pre-check, build and evaluation), shared "
                  "out over the verified kernels."])


def all_tables(scored: list[Scored]) -> list[Table]:
    return [table_i(scored), table_ii(scored), table_iii(scored), table_iv(scored), table_v(scored)]


# -- Markdown ----------------------------------------------------------------------------------------


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def markdown(t: Table) -> str:
    lines = [f"### {t.title}", ""]
    if t.rows:
        lines.append("| " + " | ".join(_cell(h) for h in t.header) + " |")
        lines.append("|" + "|".join("---" for _ in t.header) + "|")
        lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in t.rows]
    else:
        lines.append(t.empty or "No rows.")
    if t.notes:
        lines.append("")
        lines += [f"- {n}" for n in t.notes]
    return "\n".join(lines) + "\n"


def markdown_tables(tables: list[Table]) -> str:
    return "\n".join(markdown(t) for t in tables)
