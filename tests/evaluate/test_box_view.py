"""The box's root as confine.view plans it: what a GPU image's layout needs (no bubblewrap or GPU
needed to check the plan; test_confinement.py runs real boxes)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from kernelwright import confine


def _ro(plan: list[confine.Mount]) -> list[str]:
    return [m.target for m in plan if m.kind == "ro"]


def test_a_folder_inside_a_bound_one_is_not_bound_again(tmp_path: Path, monkeypatch) -> None:
    # a venv whose bin/ is on PATH, the venv itself visible (its Python): bound once, as the venv;
    # bound twice, its bin/ was hidden by the venv's bind and its read-only remount failed
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    monkeypatch.setenv("PATH", f"{venv / 'bin'}{os.pathsep}/usr/bin")
    plan = confine.view(str(tmp_path / "scratch"), [str(venv)], 1 << 20)
    ro = _ro(plan)
    assert str(venv) in ro and str(venv / "bin") not in ro
    assert not any(a != b and b.startswith(a.rstrip("/") + "/") for a in ro for b in ro)


def test_a_tool_folder_binds_its_installation(tmp_path: Path, monkeypatch) -> None:
    # a compiler in /opt/gcc/bin reads its headers from /opt/gcc/lib: bin/ alone built nothing.
    # Outside /tmp, which the box never takes from the host's PATH.
    with tempfile.TemporaryDirectory(dir="/var/tmp") as opt:
        gcc = Path(opt) / "gcc"
        (gcc / "bin").mkdir(parents=True)
        (gcc / "lib").mkdir()
        monkeypatch.setenv("PATH", f"/usr/bin{os.pathsep}{gcc / 'bin'}{os.pathsep}/bin")
        ro = _ro(confine.view(str(tmp_path / "scratch"), [], 1 << 20))
    assert str(gcc) in ro
    assert "/" not in ro  # /bin's "installation" is not the whole root


def test_the_scratch_is_private_unless_kept(tmp_path: Path) -> None:
    scratch = tmp_path / "cache" / "run"
    scratch.mkdir(parents=True)
    private = confine.view(str(scratch), [str(tmp_path / "cache")], 1 << 20)
    kept = confine.view(str(scratch), [str(tmp_path / "cache")], 1 << 20, keep_scratch=True)
    assert [m.kind for m in private if m.target == str(scratch)] == ["tmpfs"]
    assert [m.kind for m in kept if m.target == str(scratch)] == ["rw"]
    # the visible parent is bound before the scratch, so it cannot cover it read-only
    for plan in (private, kept):
        targets = [m.target for m in plan]
        assert targets.index(str(tmp_path / "cache")) < targets.index(str(scratch))
