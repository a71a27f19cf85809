"""Reports, pure functions of what a run recorded: study_report.py (REPORT.md, report.html),
tables.py, metrics.py, figures.py, export.py (training data), optimize_report.py (an optimize
folder's report and model_new.py), console.py (one EvalResult in the terminal); templates/.
"""
