"""Studies: run a matrix of regimes x tasks x seeds into append-only logs, import other tools'
generations, and turn the logs into a report and training data.

    spec.py      the study file (TOML) and flags -> StudySpec
    records.py   what the logs hold: StudyAttempt, StudyCell, Manifest
    log.py       append-only JSONL (flushed and fsync'd per record), reading with resume rules
    runner.py    plan cells, skip finished ones, run the rest over the listed devices
    importer.py  KernelBench runs folders and reference-study JSON -> our cells, re-evaluated
    report.py    REPORT.md, report.html and figures, a pure function of the logs
    export.py    SFT pairs, preference pairs and reflection triples
    cli.py       `kernelwright study run|import|report|export`
"""
