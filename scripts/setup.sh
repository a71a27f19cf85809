#!/usr/bin/env bash
# Set up kernelwright in ./.venv on a fresh machine.
#   scripts/setup.sh          the tool itself (CPU build of torch 2.13.0 when no torch is given)
#   scripts/setup.sh test     plus what the tests need
# TORCH_SPEC overrides the torch requirement, e.g. TORCH_SPEC=torch==2.14.1 for the CUDA build.
set -euo pipefail
cd "$(dirname "$0")/.."
what="${1:-run}"
python3 -m venv .venv
. .venv/bin/activate
pip install -q --upgrade pip >/dev/null 2>&1 || true
# torch first, pinned, so that resolving the project's own "torch>=2.4" pulls nothing bigger.
pip install -q "${TORCH_SPEC:-torch==2.13.0}"
if [ "$what" = "test" ]; then
  pip install -q -e '.[test]'
else
  pip install -q -e .
fi
echo "kernelwright is set up in .venv ($(python -c 'import torch; print("torch", torch.__version__)'))"
