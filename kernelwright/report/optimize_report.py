"""The output folder of an `optimize` run: model_new.py, report.md, report.html, summary.json
(attempts.jsonl is written by the runner as attempts finish).

The Markdown and the HTML say the same thing: both render the same tables (the study report's
Table record and its Markdown renderer), the HTML through a self-contained template (inline CSS,
no scripts, opens from disk).
"""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Optional

from kernelwright.errors import EXIT_FASTER
from kernelwright.optimize.types import Outcome
from kernelwright.records import Attempt, EvalResult, Task, TimingStats
from kernelwright.report.console import generalises_text
from kernelwright.report.tables import Table, markdown, ratio
from kernelwright.strategies import selection


def kept_code(a: Attempt) -> str:
    """The kept candidate's program as it was evaluated (after grounding repairs, if any)."""
    return (a.repaired_code or a.code or "").rstrip() + "\n"


def _ms(t: Optional[TimingStats]) -> str:
    return "n/a" if t is None else f"{t.median_ms:.4g} ms (IQR {t.p25_ms:.4g}-{t.p75_ms:.4g})"


def headline(o: Outcome) -> str:
    """The verdict of the run in plain words: the first thing the report and the CLI say."""
    if o.goal:
        # a ratio against a misbehaving or merely chained torch.compile is never the headline
        vs = f", {o.speedup_vs_compile:.3g}x against torch.compile" if o.speedup_vs_compile is not None \
            and not o.vs_compile_caveat else ""
        return (f"Found a verified rewrite: custom code, outputs match, {o.speedup_vs_eager:.3g}x faster than eager "
                f"PyTorch beyond noise{vs}. Kept in model_new.py.")
    if o.kept_id is not None:
        speed = f", {o.speedup_vs_eager:.3g}x eager" if o.speedup_vs_eager is not None else ", not timed"
        return (f"Nothing verified beats the reference. Kept the best correct candidate ({o.kept_label}{speed}) "
                "in model_new.py.")
    return "Nothing verified beats the reference, and no candidate was correct: nothing kept (no model_new.py)."


STOPPED = {"goal": "stopped early: a candidate reached the goal",
           "budget": "the budget was spent",
           "rounds": "the round limit was reached",
           "interrupted": "interrupted by the user",
           "error": "stopped by an error"}


def _round_of(attempts: list[Attempt]) -> dict[str, int]:
    """Attempt id -> round number: each round is one regime run, one cell key (the id's prefix)."""
    rounds: dict[str, int] = {}
    out = {}
    for a in attempts:
        cell = a.id.rsplit("/t", 1)[0]
        out[a.id] = rounds.setdefault(cell, len(rounds))
    return out


def _note(r: EvalResult) -> str:
    if r.error:
        lines = [x.strip() for x in r.error.strip().splitlines() if x.strip()]
        # a build failure's first line names only the extension; the compiler's "error:" line says why
        why = next((x for x in lines[1:] if "error" in x.lower()), None)
        return (lines[0] + (f" {why}" if why else ""))[:200]
    if r.flags:
        return "; ".join(r.flags)[:160]
    return ""


def _net(r: EvalResult) -> str:
    if r.net_speedup is None:
        return "n/a (not timed, or the forwards too small beside the protocol to separate)"
    return f"{r.net_speedup:.3g}x (the protocol's {r.timing.protocol_ms:.4g} ms a call off both sides)"


def tables(o: Outcome, attempts: list[Attempt], kept: Optional[Attempt]) -> list[Table]:
    b, r = o.baseline, (kept.eval if kept is not None else None)
    if b.compiled is not None:
        compiled = _ms(b.compiled) + (f"; compiling took {b.compile_s:.1f} s" if b.compile_s is not None else "")
    elif b.compile_error:
        compiled = f"torch.compile failed on this machine: {b.compile_error}"
    else:
        compiled = f"not measured: {b.error or 'unknown reason'}"
    rows = [["eager PyTorch (reference)", _ms(b.eager) if b.eager else f"not measured: {b.error}"],
            ["torch.compile (default mode)", compiled]]
    if r is not None:
        rows += [["kept candidate", _ms(r.timing) if r.timing else "not timed"],
                 ["eager, beside the kept candidate", _ms(r.ref_timing) if r.ref_timing else "not timed"],
                 ["speedup vs eager", "n/a (not timed)" if r.speedup is None else
                  f"{r.speedup:.3g}x ({'faster beyond noise' if r.faster else 'not faster beyond noise'})"],
                 ["speedup vs torch.compile", (ratio(o.speedup_vs_compile) + (
                     f" (not a speedup to report: {o.vs_compile_caveat})" if o.vs_compile_caveat else ""))
                  if o.speedup_vs_compile is not None else "n/a (torch.compile or the candidate not timed)"],
                 *([["torch.compile, beside the kept candidate", f"{o.beside_ms[0]:.4g} ms (the kept candidate "
                     f"{o.beside_ms[1]:.4g} ms in that evaluation)"]] if o.beside_ms else []),
                 ["net of the timing protocol, vs eager", _net(r)],
                 ["time in custom code", "n/a (not measured)" if r.custom_share is None else
                  f"{100 * r.custom_share:.0f}% of one forward (the evaluator's work probe)"],
                 ["correct at a second shape (generalises)", generalises_text(r)]]
    floor = "n/a" if o.roofline_floor_ms is None else f"{o.roofline_floor_ms:.4g} ms"
    frac = "n/a" if o.fraction_of_floor is None else f"{o.fraction_of_floor:.3g} of the floor (1.0 = at the roofline)"
    if o.fraction_of_floor is not None and o.fraction_of_floor > 1:
        # faster than physics allows: the timing was disturbed (a loaded machine) or the floor is off
        frac += "; above 1 means below the physical floor: distrust this timing (machine load?)"
    rows += [["roofline floor", floor + (f" ({o.roofline_line})" if o.roofline_line else "")],
             ["kept candidate vs the floor", frac]]
    protocol = (r.timing.protocol if r is not None and r.timing else b.eager.protocol if b.eager else None)
    notes = ["Speedup vs eager: the evaluator times the reference and the candidate in one process on the same "
             "inputs; faster means the candidate's p75 is below the reference's p25.",
             ("Speedup vs torch.compile: torch.compile(reference) timed beside the kept candidate by the evaluator, "
              "in one more evaluation under the same protocol." if o.vs_compile_by == "judge" else
              "Speedup vs torch.compile: (torch.compile / eager, timed together in one child process) x (speedup vs "
              "eager): two paired ratios, so load on a shared machine between the two processes cancels; the two "
              "protocols differ (a warm process against the evaluator's cold caches and copies), so a memory-bound "
              "kernel's ratio is understated (used where torch.compile could not be timed beside it).")]
    if protocol:
        notes.append(f"Timing protocol: {protocol}.")
    notes.append("Net of the timing protocol: each timed call includes copying its inputs in and its outputs out "
                 "of the runner's memory and the round trip to it; the evaluator times the same copies and round "
                 "trip with no forward in the same loop and takes their median off both sides. It is what the "
                 "forwards alone compare as; the verdict (faster or not) stays on the whole calls.")
    times = Table("times", "Times", ["what", "time"], rows, notes=notes)

    rounds = _round_of(attempts)
    arows = []
    for i, a in enumerate(attempts, 1):
        e = a.eval
        arows.append([str(i), f"{rounds[a.id] + 1}/{a.turn}/{a.sample}", e.verdict.value,
                      "yes" if e.custom_kernel else "no",
                      "n/a" if e.speedup is None else f"{e.speedup:.3g}x" + (" (faster)" if e.faster else ""),
                      "; ".join(x for x in ("kept" if kept is not None and a.id == kept.id else "", _note(e)) if x)])
    verdicts = Table("attempts", "Every attempt", ["#", "round/turn/sample", "verdict", "custom code ran", "speedup",
                                                   "note"], arows, empty="No candidate was generated.",
                     notes=["Full records (prompts, answers, evaluated code, evaluator reports): attempts.jsonl."])
    return [times, verdicts]


def setup_lines(o: Outcome) -> list[str]:
    op = o.options
    return [f"input: {o.source_path} (task {o.task_id}); outputs {', '.join(o.outputs) or 'n/a'}",
            f"device {op.device}, target {op.target}, model {o.model}, regime {op.regime}"
            + (f" (routed to {o.route})" if o.route else "") + (f", graph shape {o.shape}" if o.shape else "")
            + (", scaffolded generation" if op.scaffold else ""),
            f"budget {op.budget_minutes:g} min; samples {op.samples or 'regime default'}, turns "
            f"{op.turns or 'regime default'}, rounds {op.rounds or 'while the budget lasts'}",
            f"{o.attempts} attempt(s) in {o.rounds} round(s), {o.completion_tokens} tokens generated for candidates, "
            f"{o.wall_s:.0f} s wall; {STOPPED.get(o.stopped, o.stopped)}" + (f": {o.error}" if o.error else ""),
            f"kept: attempt {o.kept_id} ({o.kept_label})" if o.kept_id else "kept: nothing",
            *([f"problem size: {o.size}"] if o.size else [])]


def diff(task: Task, code: Optional[str]) -> str:
    if code is None:
        return ""
    return "".join(difflib.unified_diff(task.source.splitlines(keepends=True), code.splitlines(keepends=True),
                                        "reference.py", "model_new.py"))


def render_markdown(task: Task, o: Outcome, ts: list[Table], code: Optional[str]) -> str:
    out = [f"# kernelwright optimize: {task.name}", "", f"**{headline(o)}**", ""]
    out += [f"- {line}" for line in setup_lines(o)] + [""]
    out += [markdown(t) for t in ts]
    d = diff(task, code)
    if d:
        out += ["### Diff against the reference", "", "```diff", d.rstrip("\n"), "```", ""]
    return "\n".join(out).rstrip() + "\n"


def render_html(task: Task, o: Outcome, ts: list[Table], code: Optional[str]) -> str:
    import jinja2

    env = jinja2.Environment(loader=jinja2.PackageLoader("kernelwright.report", "templates"),
                             autoescape=True, undefined=jinja2.StrictUndefined)
    return env.get_template("optimize.html.jinja").render(
        name=task.name, headline=headline(o), good=o.exit_code == EXIT_FASTER, setup=setup_lines(o), tables=ts,
        diff_lines=diff(task, code).splitlines(), code=code)


def write(out_dir: Path, task: Task, o: Outcome, attempts: list[Attempt]) -> None:
    kept = next((a for a in attempts if a.id == o.kept_id), None)
    code = None
    if kept is not None:
        # The kept program as evaluated, runnable as is; the header says what it is and where it came from.
        header = (f"# model_new.py: kept by `kernelwright optimize` for {o.source_path}\n"
                  f"# {selection.reason(kept, len(attempts))}\n"
                  f"# device {o.options.device}, target {o.options.target}; the full report is report.md\n")
        code = kept_code(kept)
        (out_dir / "model_new.py").write_text(header + code)
    ts = tables(o, attempts, kept)
    (out_dir / "summary.json").write_text(o.model_dump_json(indent=2) + "\n")
    (out_dir / "report.md").write_text(render_markdown(task, o, ts, code))
    (out_dir / "report.html").write_text(render_html(task, o, ts, code))
