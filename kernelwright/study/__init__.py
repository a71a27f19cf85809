"""Studies: run a matrix of regimes x tasks x seeds into append-only logs, import other tools'
generations, and turn the logs into a report and training data.

    spec.py      the study file (TOML) and flags -> StudySpec
    records.py   what the logs hold: StudyAttempt, StudyCell, Manifest
    log.py       append-only JSONL (flushed and fsync'd per record), reading with resume rules
    runner.py    plan cells, skip finished ones, run the rest over the listed devices
    importer.py  KernelBench runs folders and reference-study JSON -> our cells, re-evaluated
Its report (REPORT.md, report.html, figures, a pure function of the logs) and export (SFT,
preference and reflection data) are in report/; the command is cli/study.py.
"""
