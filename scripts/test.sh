#!/usr/bin/env bash
# The test command. GPU tests skip themselves where no GPU is visible.
set -euo pipefail
cd "$(dirname "$0")/.."
exec python -m pytest -q -m "not gpu" --timeout 900 "$@"
