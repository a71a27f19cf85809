"""The scaffold's programs, byte for byte: every plannable task's skeleton for each target, hashed
and compared with the digests committed in tests/fixtures/scaffold/program_digests.json.

The skeleton writers are pure strings over a plan, so a change to how they are organised must leave
every program as it was; this test says which (task, target) and which part changed. Parts hashed
per (task, target):

* ``program``: the whole candidate (region at its placeholder), the library twin's after it;
* ``scaffold``: the rest of the record (the view shown to the model, the region's variables, the
  placeholder, indent, default region, language, reason);
* ``launch``: the default launch settings, the variants worth timing and the program rewritten with
  each (`with_launch`);
* ``shared``: two regions in one extension (`shared_programs`: the C-like targets).

The C++ build flags are decided from the machine (`cpp_build`: the instruction set, glibc's vector
math); they are replaced by a token before hashing, so the digests are the same on any machine.

Suites: the built-in tasks (fast tier: one planning child, about 16 s of CPU) and KernelBench's dev
problems (levels 1-3, problems 21 and later; problems 1-20 are withheld and never read), planned at
the CPU's small size as a study on the CPU plans them: 570 (task, target) pairs, 348 scaffolded,
about 12 minutes of CPU and 5 GiB for the planning child, half of CI's whole budget, so it runs only
where $KERNELWRIGHT_KERNELBENCH names the data (``slow``; skipped otherwise).

    PYTHONPATH=$PWD python -m tests.scaffold.test_program_digest --regenerate [--suite builtin|kernelbench]

writes the JSON from the code as it is; regenerate only for a change that means to alter programs.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DIGESTS = ROOT / "tests" / "fixtures" / "scaffold" / "program_digests.json"
TARGETS = ("cpp", "cuda", "triton")
SIZE = "small"
FIRST_DEV_PROBLEM = 21  # problems 1-20 of each level are withheld


def kernelbench_root() -> Path | None:
    root = os.environ.get("KERNELWRIGHT_KERNELBENCH")
    return Path(root) if root and (Path(root) / "level1").is_dir() else None


def suite_tasks(suite: str) -> list:
    from kernelwright.tasks import load_tasks

    if suite == "builtin":
        return load_tasks("builtin")
    root = kernelbench_root()
    assert root is not None, "set KERNELWRIGHT_KERNELBENCH to KernelBench's data (the folder holding level1/)"
    return [t for level in (1, 2, 3) for t in load_tasks(f"kernelbench:{root}:{level}:{FIRST_DEV_PROBLEM}-999")]


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _machine_neutral(text: str) -> str:
    """`text` with the C++ build's machine-dependent literals (the flags and the kernel's
    target_clones attribute, cpp_build) as tokens."""
    text = re.sub(r"extra_(c|ld)flags=\[[^\]]*\]", r"extra_\1flags=@@CPP_FLAGS@@", text)
    return re.sub(r"__attribute__\(\(target_clones\([^\n]*\n", "", text)


def render(plan, target: str) -> dict[str, str]:
    """The digests of one (plan, target): each part of what the writers produce."""
    from kernelwright.scaffold import default_launch, launch_variants, shared_programs, with_launch, write

    sc = write(plan, target)
    if not sc.available:
        return {"none": _sha(sc.reason)}
    twin = sc.library_twin.program if sc.library_twin is not None else ""
    record = sc.model_dump_json(exclude={"program", "library_twin"})
    twin_record = sc.library_twin.model_dump_json(exclude={"program"}) if sc.library_twin is not None else ""
    launch = [json.dumps(default_launch(sc.segment, target))]
    for knobs in launch_variants(sc.segment, target):
        launch += [json.dumps(knobs), str(with_launch(sc.program, knobs))]
    shared = shared_programs(sc, ["", "y = y;" if target != "triton" else "y = y"])
    out = {"program": f"{sc.program}\0{twin}", "scaffold": f"{record}\0{twin_record}", "launch": "\0".join(launch),
           "shared": "\0".join(shared) if shared is not None else "none"}
    return {k: _sha(_machine_neutral(v)) for k, v in out.items()}


def digests(suite: str) -> dict[str, dict[str, str]]:
    from kernelwright.scaffold import plan_tasks

    tasks = suite_tasks(suite)
    plans = plan_tasks(tasks, SIZE)
    return {f"{task.id}|{target}": render(plan, target)
            for task, plan in zip(tasks, plans, strict=True) for target in TARGETS}


def _committed(suite: str) -> dict[str, dict[str, str]]:
    data = json.loads(DIGESTS.read_text())
    if suite not in data:
        pytest.skip(f"no committed digests for {suite} (--regenerate --suite {suite})")
    return data[suite]


def _compare(suite: str) -> None:
    want, got = _committed(suite), digests(suite)
    assert sorted(got) == sorted(want), "the suite's tasks changed: regenerate the digests only if that is meant"
    changed = [f"{key} {part}" for key in want for part in sorted(set(want[key]) | set(got[key]))
               if want[key].get(part) != got[key].get(part)]
    assert not changed, f"{len(changed)} scaffold parts changed: " + ", ".join(changed[:20])


def test_builtin_programs_are_unchanged() -> None:
    _compare("builtin")
    # a test that cannot fail proves nothing: most built-in tasks are scaffolded on every target
    assert sum("program" in v for v in _committed("builtin").values()) >= 60


@pytest.mark.slow  # no compiler, but 12 minutes of planning
@pytest.mark.skipif(kernelbench_root() is None, reason="$KERNELWRIGHT_KERNELBENCH does not name KernelBench's data")
def test_kernelbench_dev_programs_are_unchanged() -> None:
    _compare("kernelbench")


def main() -> None:
    ap = argparse.ArgumentParser(description="write the scaffold programs' digests from the code as it is")
    ap.add_argument("--regenerate", action="store_true", required=True)
    ap.add_argument("--suite", choices=("builtin", "kernelbench"), action="append")
    args = ap.parse_args()
    data = json.loads(DIGESTS.read_text()) if DIGESTS.exists() else {}
    for suite in args.suite or ["builtin", "kernelbench"]:
        data[suite] = digests(suite)
        print(f"{suite}: {len(data[suite])} (task, target) pairs, "
              f"{sum('program' in v for v in data[suite].values())} scaffolded", file=sys.stderr)
    DIGESTS.parent.mkdir(parents=True, exist_ok=True)
    DIGESTS.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
