"""Child side of ``analysis.analyze``: an ``AnalysisJob`` as JSON on stdin, one JSON line on stdout.

The reply is ``{"ok": true, "analysis": {...}}`` or ``{"ok": false, "stage": ..., "error": ...}``.
"""

from __future__ import annotations

import sys

from kernelwright.child import child_main


def handle(text: str) -> dict:
    from kernelwright.analysis.runner import AnalysisJob, StageError, analyze_job

    try:
        job = AnalysisJob.model_validate_json(text)
    except ValueError as e:
        return {"ok": False, "stage": "job", "error": f"bad job on stdin: {str(e).splitlines()[0]}"}
    try:
        return {"ok": True, "analysis": analyze_job(job).model_dump(mode="json")}
    except StageError as e:
        return {"ok": False, "stage": e.stage, "error": e.message}


if __name__ == "__main__":
    sys.exit(child_main(handle))
