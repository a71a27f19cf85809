"""Child side of ``analysis.analyze``: an ``AnalysisJob`` as JSON on stdin, one JSON line on stdout.

The reply is ``{"ok": true, "analysis": {...}}`` or ``{"ok": false, "stage": ..., "error": ...}``.
Before any task code runs, file descriptor 1 is pointed at stderr, so whatever the task prints
cannot corrupt the reply; the reply goes to a duplicate of the original stdout.
"""

from __future__ import annotations

import json
import logging
import os
import sys


def main() -> int:
    reply_fd = os.dup(1)
    os.dup2(2, 1)  # print() in task code now lands on stderr
    logging.basicConfig(level=os.environ.get("KERNELWRIGHT_LOG", "WARNING"), stream=sys.stderr,
                        format="%(levelname)s %(name)s: %(message)s")
    from kernelwright.analysis.runner import AnalysisJob, StageError, analyze_job

    try:
        job = AnalysisJob.model_validate_json(sys.stdin.read())
    except ValueError as e:
        reply = {"ok": False, "stage": "job", "error": f"bad job on stdin: {str(e).splitlines()[0]}"}
    else:
        try:
            analysis = analyze_job(job)
            reply = {"ok": True, "analysis": analysis.model_dump(mode="json")}
        except StageError as e:
            reply = {"ok": False, "stage": e.stage, "error": e.message}
        except Exception as e:  # a bug of ours: still one line for the caller
            logging.getLogger(__name__).exception("analysis failed")
            reply = {"ok": False, "stage": "internal", "error": f"{type(e).__name__}: {str(e)[:300]}"}
    with os.fdopen(reply_fd, "w") as out:
        out.write(json.dumps(reply) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
