"""Re-measure what the README quotes: run its commands as written, print what they print, and check
the figures against the ranges the README states. Run it after any change of behaviour and before
editing a quoted transcript (kernelwright issue #22):

    .venv/bin/python scripts/readme_check.py [--runs 3] [--with-model]

Each claim below names the README command it runs, how its figure is read from the output, and the
range the README states for it (read from the README's own text, so an edit of the text is checked
too). Times depend on the machine's load: the script prints the load beside every run, and a
figure outside its range on a loaded machine is reported as such, not hidden. `--with-model` adds
the first command's main job (`optimize`, about 5 minutes with the embedded model). Exit status 1
when a claim does not hold.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
# the README's way to run it; KERNELWRIGHT_BIN names another (a second clone's, an installed one)
KW = os.environ.get("KERNELWRIGHT_BIN") or str(ROOT / ".venv" / "bin" / "kernelwright")


@dataclass
class Claim:
    name: str
    command: str  # as the README writes it (after `.venv/bin/`), run from the checkout
    # from the README: the stated range (low, high), or None where the claim is not a number
    stated: Callable[[str], Optional[tuple[float, float]]]
    # from the output and exit code: the measured figure, or None where the run does not hold
    measured: Callable[[str, int], Optional[float]]
    slow: bool = False
    ranged: bool = True  # the README states a range for it: one it no longer states does not hold


def _readme_has(command: str) -> bool:
    return command in README.read_text()


def _eval_range(text: str) -> Optional[tuple[float, float]]:
    m = re.search(r"\([\w-]+ runs on the 2-core machine[^:]*: ([\d.]+)-([\d.]+)x", text)
    return (float(m[1]), float(m[2])) if m else None


def _eval_speedup(output: str, code: int) -> Optional[float]:
    if code != 0 or not re.search(r"verdict: correct\b", output):
        return None
    m = re.search(r"speedup\s+([\d.]+)x", output)
    return float(m[1]) if m else None


def _optimize_kept(output: str, code: int) -> Optional[float]:
    """optimize exits 0 (kept a faster kernel) or 4 (kept the best correct one): the kept speedup."""
    if code not in (0, 4):
        return None
    m = re.search(r"kept: ([\d.]+)x eager", output)
    return float(m[1]) if m else None


def _doctor(output: str, code: int) -> Optional[float]:
    """It says what the machine can do; exit 0, or 2 ("a missing requirement") exactly when it names one."""
    missing = "MISSING" in output
    return 0.0 if "this machine can:" in output and code == (2 if missing else 0) else None


CLAIMS = [
    Claim("evaluator example (README: `kernelwright eval ... linear_gelu_scale_cpp.py`)",
          "kernelwright eval --task builtin/L2/01_linear_gelu_scale --candidate examples/candidates/linear_gelu_scale_cpp.py",
          _eval_range, _eval_speedup),
    Claim("doctor (README: `kernelwright doctor` says what this machine can do)", "kernelwright doctor",
          lambda text: None, _doctor, ranged=False),
    Claim("first command's main job (README: `kernelwright optimize examples/gemm_bias_gelu.py --budget-minutes 5`)",
          "kernelwright optimize examples/gemm_bias_gelu.py --budget-minutes 5",
          # the README says a verified kernel is kept within the budget: any kept speedup holds
          lambda text: (0.0, float("inf")), _optimize_kept, slow=True),
]


def load() -> str:
    return f"{os.getloadavg()[0]:.1f}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3, help="runs of each quick claim (times vary with load)")
    ap.add_argument("--with-model", action="store_true", help="also the optimize run (about 5 minutes)")
    args = ap.parse_args(argv)
    if not Path(KW).exists():
        print(f"error: {KW} does not exist: run the README's set-up (bash scripts/setup.sh) first", file=sys.stderr)
        return 2
    text = README.read_text()
    failures = 0
    rows = []
    for claim in CLAIMS:
        if claim.slow and not args.with_model:
            rows.append((claim.name, "skipped (--with-model)", "", ""))
            continue
        if not _readme_has(claim.command.replace("kernelwright ", "", 1)):
            print(f"!! the README no longer quotes: {claim.command}")
            failures += 1
            continue
        stated = claim.stated(text)
        runs = 1 if claim.slow else args.runs
        figures = []
        for k in range(runs):
            with tempfile.TemporaryDirectory() as out:
                cmd = shlex.split(claim.command.replace("kernelwright", KW, 1))
                if claim.slow:
                    cmd += ["--out", out]
                before, start = load(), time.monotonic()
                p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=1800)
                wall = time.monotonic() - start
            output = p.stdout + p.stderr
            print(f"== {claim.name}, run {k + 1}/{runs}: exit {p.returncode}, {wall:.0f} s, load {before}")
            print(output.rstrip()[-3000:])
            figures.append(claim.measured(output, p.returncode))
        holds = all(f is not None for f in figures) and (stated is not None or not claim.ranged)
        if holds and stated is not None:
            lo, hi = stated
            holds = all(lo <= f <= hi for f in figures)  # type: ignore[operator]
        failures += not holds
        shown = ", ".join("-" if f is None else f"{f:.3g}" for f in figures)
        rows.append((claim.name, "holds" if holds else "DOES NOT HOLD", shown,
                     "" if stated is None else f"{stated[0]:g}-{stated[1]:g}"))
    print("\n| README claim | result | measured | stated |\n|---|---|---|---|")
    for row in rows:
        print("| " + " | ".join(row) + " |")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
