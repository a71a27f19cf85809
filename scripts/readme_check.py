"""Hold README.md to what it quotes: run its commands as written, print what they print, and check
the figures against the ranges it states; check its results table against the pages it links.

    .venv/bin/python scripts/readme_check.py [--runs 3] [--with-model] [--static]

What is checked lives in scripts/readme_claims.toml. The static checks need no set-up (length, no
commit ids, links, the quoted commands, every results-table figure found on its page); `--static`
stops there. Times depend on the machine's load: the script prints the load beside every run, and a
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
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
CLAIMS = Path(__file__).with_name("readme_claims.toml")
# the README's way to run it; KERNELWRIGHT_BIN names another (a second clone's, an installed one)
KW = os.environ.get("KERNELWRIGHT_BIN") or str(ROOT / ".venv" / "bin" / "kernelwright")

# a commit id: 7-40 hex digits with at least one digit and one letter (so no plain word or number)
COMMIT = re.compile(r"\b(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}\b")
LINK = re.compile(r"\]\(([^)\s]+)\)")
# the figures a results row states: ratios, counts, shares
FIGURE = re.compile(r"\d+(?:\.\d+)?x|\d+ of \d+|\d+%")


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


MEASURES: dict[str, Callable[[str, int], Optional[float]]] = {
    "eval_speedup": _eval_speedup, "optimize_kept": _optimize_kept, "doctor": _doctor,
}


@dataclass(frozen=True)
class Claim:
    name: str
    command: str  # as the README writes it (after `.venv/bin/`), run from the checkout
    measure: str  # a key of MEASURES: the figure read from the output and exit code
    stated: Optional[str] = None  # a regex over the README with the stated range (low, high)
    stated_any: bool = False  # the README states no range: any measured figure holds
    slow: bool = False

    def stated_range(self, text: str) -> Optional[tuple[float, float]]:
        if self.stated_any:
            return (0.0, float("inf"))
        m = re.search(self.stated, text) if self.stated else None
        return (float(m[1]), float(m[2])) if m else None


def load_claims() -> tuple[dict, list[Claim]]:
    data = tomllib.loads(CLAIMS.read_text())
    return data, [Claim(**run) for run in data.get("run", [])]


def _results_rows(text: str) -> list[tuple[str, str]]:
    """(outcome cell, linked page) of each row of the README's results table."""
    section = text.split("## Results", 1)[-1].split("\n## ", 1)[0]
    rows = []
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        link = LINK.search(cells[-1]) if len(cells) >= 4 else None
        if link:
            rows.append((cells[-2], link[1].partition("#")[0]))
    return rows


def static_problems(text: str, root: Path = ROOT) -> list[str]:
    """What is wrong with the README's text, without running anything."""
    data, claims = load_claims()
    problems = []
    lines = text.count("\n")
    if lines > data["max_lines"]:
        problems.append(f"{lines} lines, more than {data['max_lines']}")
    problems += [f"a commit id: {m[0]}" for m in COMMIT.finditer(text)]
    for m in LINK.finditer(text):
        target = m[1].partition("#")[0]
        if target and not re.match(r"^[a-z]+:", target) and not (root / target).exists():
            problems.append(f"a link to nothing: {m[1]}")
    problems += [f"no longer quoted: {c.command}" for c in claims if c.command.replace("kernelwright ", "", 1) not in text]
    rows = _results_rows(text)
    if not 4 <= len(rows) <= 6:
        problems.append(f"the results table has {len(rows)} rows (4 to 6)")
    for outcome, page in rows:
        path = root / page
        if not path.exists():
            continue  # reported above as a link to nothing
        source = path.read_text().replace("**", "")
        problems += [f"{page} does not state {fig!r}" for fig in FIGURE.findall(outcome.replace("**", "")) if fig not in source]
    return problems


def load() -> str:
    return f"{os.getloadavg()[0]:.1f}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3, help="runs of each quick claim (times vary with load)")
    ap.add_argument("--with-model", action="store_true", help="also the optimize run (about 5 minutes)")
    ap.add_argument("--static", action="store_true", help="only the checks of the text (no set-up needed)")
    args = ap.parse_args(argv)
    text = README.read_text()
    problems = static_problems(text)
    for p in problems:
        print(f"!! README: {p}")
    if args.static:
        return 1 if problems else 0
    if not Path(KW).exists():
        print(f"error: {KW} does not exist: run the README's set-up (bash scripts/setup.sh) first", file=sys.stderr)
        return 2
    failures = len(problems)
    rows = []
    for claim in load_claims()[1]:
        if claim.slow and not args.with_model:
            rows.append((claim.name, "skipped (--with-model)", "", ""))
            continue
        stated = claim.stated_range(text)
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
            figures.append(MEASURES[claim.measure](output, p.returncode))
        holds = all(f is not None for f in figures) and (stated is not None or not claim.stated)
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
