"""manifest.json: what produced a study folder (spec, configs, versions, machine, git, runs).

Written when an invocation has work to do: created on the first, then each later one adds its
config hashes and a RunInfo line. The top-level versions, machine and git hash are those of the
first invocation; every RunInfo carries its own versions and commit too, so a folder resumed on
another software stack shows it rather than hiding it.
"""

from __future__ import annotations

import importlib.metadata
import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from kernelwright import __version__
from kernelwright.study.log import MANIFEST, read_manifest, write_json_atomic
from kernelwright.study.records import Manifest, RunInfo, now_iso


def _run(cmd: list[str], cwd: Path | None = None) -> str | None:
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=20, cwd=cwd, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return p.stdout.strip() if p.returncode == 0 else None


def versions() -> dict[str, str]:
    """kernelwright, Python, torch, CUDA (torch's build), Triton and the NVIDIA driver, where present."""
    out = {"kernelwright": __version__, "python": platform.python_version()}
    try:
        import torch

        out["torch"] = torch.__version__
        if torch.version.cuda:
            out["cuda"] = str(torch.version.cuda)
    except ImportError:
        pass
    try:
        out["triton"] = importlib.metadata.version("triton")
    except importlib.metadata.PackageNotFoundError:
        pass
    if shutil.which("nvidia-smi"):
        driver = _run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"])
        if driver:
            out["driver"] = driver.splitlines()[0].strip()
    return out


def machine(devices: list[str]) -> dict[str, Any]:
    info: dict[str, Any] = {"platform": platform.platform(), "cpu_count": os.cpu_count(), "devices": devices,
                            "hostname": platform.node()}
    if any(d.startswith("cuda") for d in devices):
        try:
            import torch

            if torch.cuda.is_available():
                info["gpus"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
        except ImportError:
            pass
    return info


def git_info() -> dict[str, Any]:
    """The commit of the kernelwright checkout (if it is one), and whether it had local changes."""
    root = Path(__file__).resolve().parents[2]
    head = _run(["git", "rev-parse", "HEAD"], cwd=root)
    if not head:
        return {}
    status = _run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root)
    return {"commit": head, "dirty": bool(status)}


def record_invocation(folder: Path, spec: dict[str, Any], configs: dict[str, dict[str, Any]],
                      devices: list[str], pending: int, kind: str = "run") -> Manifest:
    folder.mkdir(parents=True, exist_ok=True)
    started = now_iso()
    here, git = versions(), git_info()
    manifest = read_manifest(folder)
    if manifest is None:
        manifest = Manifest(study=spec, versions=here, machine=machine(devices), git=git, started=started)
    manifest.configs.update(configs)
    manifest.runs.append(RunInfo(started=started, argv=list(sys.argv), pending=pending, kind=kind, versions=here,
                                 commit=git.get("commit")))
    write_json_atomic(folder / MANIFEST, manifest.model_dump(mode="json"))
    return manifest


def finish_invocation(folder: Path, started: str, ended: str, done: int | None = None,
                      failed: int | None = None) -> None:
    """Mark the invocation that began at `started` as ended, so a folder says how long a run took and
    whether it finished (a killed process leaves `finished` empty: that is the record of it)."""
    manifest = read_manifest(folder)
    if manifest is None:
        return
    for run in reversed(manifest.runs):
        if run.started == started and run.finished is None:
            run.finished, run.ended, run.done, run.failed = now_iso(), ended, done, failed
            write_json_atomic(folder / MANIFEST, manifest.model_dump(mode="json"))
            return
