"""The `kernelwright` command: main.py (the typer app and the small commands), study.py,
optimize.py, model.py (one module per command group), console.py (consoles, exit codes, `fail`),
progress.py and display.py (live progress), doctor.py.
"""
