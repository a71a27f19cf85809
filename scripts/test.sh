#!/usr/bin/env bash
# The test command. GPU tests skip themselves where no GPU is visible.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-$( [ -x .venv/bin/python ] && echo .venv/bin/python || echo python3 )}"
exec "$PY" -m pytest -q -m "not gpu" --timeout 900 "$@"
