"""Human-readable rendering of an EvalResult in the terminal (rich).

Much of a record is the candidate's text (its entry points' names, its error, flags quoting it): every
cell is a `Text`, which rich never parses for markup, so a name like "[bold red]" or "[/]" prints as
written and cannot break the report.
"""

from __future__ import annotations

from rich.console import Console
from rich.table import Table
from rich.text import Text

from kernelwright.records import EvalResult, Verdict

_STYLE = {
    Verdict.CORRECT: "bold green",
    Verdict.NO_CUSTOM_KERNEL: "yellow",
    Verdict.COMPILED: "green",
    Verdict.CHEAT: "bold magenta",
}


def generalises_text(r: EvalResult) -> str:
    """The check at a second shape in words: yes, NO (shape-specialised), or not checked and why."""
    word = {True: "yes", False: "NO: correct only at the task's shape", None: "not checked"}[r.generalises]
    return word + (f" ({r.generalises_note})" if r.generalises_note else "")


def print_result(console: Console, r: EvalResult) -> None:
    style = _STYLE.get(r.verdict, "bold red")
    console.print(Text.assemble("verdict: ", (r.verdict.value, style), f"   task: {r.task_id}   device: {r.device}"))
    facts = _Facts(box=None, show_header=False)
    facts.add_row("compiled", str(r.compiled))
    facts.add_row("correct (outputs match)", str(r.correct))
    facts.add_row("custom kernel did the work", str(r.custom_kernel) + (f"  {r.custom_calls}" if r.custom_calls else ""))
    if r.sizing is not None:
        facts.add_row("problem size", r.sizing.summary())
    if r.correct or r.generalises_note:
        facts.add_row("generalises", generalises_text(r))
    if r.custom_share is not None:
        facts.add_row("time in custom code", f"{100 * r.custom_share:.1f}% of one forward")
    if r.copy_only_calls:
        facts.add_row("copy-only custom calls", ", ".join(r.copy_only_calls))
    if r.tolerance:
        facts.add_row("tolerance", f"atol={r.tolerance.atol:g} rtol={r.tolerance.rtol:g} ({r.tolerance.dtype}), {r.trials} trials")
    heard = r.mismatch.accuracy if r.mismatch else None
    if heard:
        facts.add_row("against float64", f"max abs error {heard.max_abs_err:.3g} (the reference's {heard.ref_max_abs_err:.3g}), "
                      f"root mean square {heard.rms_err:.3g} ({heard.ref_rms_err:.3g}): less accurate than the "
                      "reference, so outside the tolerance stays wrong")
    if r.accuracy:
        a = r.accuracy
        facts.add_row("outside the tolerance, as accurate",
                      f"{a.comparisons} output check(s) passed against the reference run in float64: max abs error "
                      f"{a.max_abs_err:.3g} (the reference's {a.ref_max_abs_err:.3g}), root mean square "
                      f"{a.rms_err:.3g} ({a.ref_rms_err:.3g})")
    if r.runtime_ms is not None and r.timing and r.ref_timing:
        facts.add_row("runtime", f"{r.runtime_ms:.4f} ms (IQR {r.timing.p25_ms:.4f}-{r.timing.p75_ms:.4f})")
        facts.add_row("reference", f"{r.ref_runtime_ms:.4f} ms (IQR {r.ref_timing.p25_ms:.4f}-{r.ref_timing.p75_ms:.4f})")
        facts.add_row("speedup", f"{r.speedup:.3f}x  ({'faster beyond noise' if r.faster else 'not faster beyond noise'})")
        if r.net_speedup is not None:
            facts.add_row("net of the protocol", f"{r.net_speedup:.3f}x"
                          + (f", {r.net_speedup_vs_compile:.3f}x torch.compile" if r.net_speedup_vs_compile else "")
                          + f" (the protocol's copies and round trip, {r.timing.protocol_ms:.4f} ms a call, "
                            "off both sides)")
        facts.add_row("timing protocol", r.timing.protocol)
    if r.compile_baseline_suspect:
        facts.add_row("torch.compile", r.compile_baseline_suspect)
    if r.flags:
        facts.add_row("flags", "; ".join(r.flags))
    console.print(facts)
    if r.error:
        console.print("[bold]error:[/]")
        console.print(r.error, markup=False, highlight=False)
    warnings = [f for f in r.findings if f.severity == "warning"]
    if warnings:
        console.print(Text("static warnings: " + ", ".join(sorted({f.rule for f in warnings}))))
    stages = "  ".join(f"{s.name} {s.seconds:.2f}s{'' if s.ok else ' ✗'}" for s in r.stages)
    console.print(Text(f"stages: {stages}"))


class _Facts(Table):
    """A table whose cells are plain text, never markup."""

    def add_row(self, *cells: object, **kwargs: object) -> None:  # type: ignore[override]
        super().add_row(*(Text(c) if isinstance(c, str) else c for c in cells), **kwargs)  # type: ignore[arg-type]
