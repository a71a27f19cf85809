#!/usr/bin/env bash
# Set up kernelwright in ./.venv on a fresh machine.
#   scripts/setup.sh          the tool itself (the CPU build of torch 2.13.0 unless TORCH_SPEC says otherwise),
#                             and bubblewrap (apt, when root or password-less sudo) to confine candidates
#   scripts/setup.sh local    plus the embedded model's runtime (llama.cpp, built portable: ~7 min on 2 cores)
#   scripts/setup.sh test     everything the tests use (local + openai + hf + ray extras, CUDA library headers)
# TORCH_SPEC overrides the torch requirement, e.g. TORCH_SPEC=torch==2.14.1 for the CUDA build.
set -euo pipefail
cd "$(dirname "$0")/.."
what="${1:-run}"
[ -x .venv/bin/python ] || python3 -m venv .venv
. .venv/bin/activate
pip install -q --upgrade pip >/dev/null 2>&1 || true
# torch first, pinned, so that resolving the project's own "torch>=2.4" pulls nothing bigger.
pip install -q "${TORCH_SPEC:-torch==2.13.0}"
if [ "$what" = "local" ] || [ "$what" = "test" ]; then
  if ! python -c 'import llama_cpp, uvicorn' >/dev/null 2>&1; then
    # Portable build: the native one uses AMX instructions that some virtual CPUs advertise but
    # fault on (SIGILL); --no-cache-dir so pip never reuses a native build cached earlier. The build
    # takes ~7 minutes on 2 cores, so its wheel is kept in the user's cache, one folder per Python,
    # and a second set-up on this machine (a fresh clone, CI) installs it instead of building again.
    wheels="${XDG_CACHE_HOME:-$HOME/.cache}/kernelwright/wheels/$(python -c 'import sys; print("cp%d%d" % sys.version_info[:2])')-portable"
    whl=$(ls -t "$wheels"/llama_cpp_python-*.whl 2>/dev/null | head -n 1 || true)
    if [ -z "$whl" ] || ! pip install -q "${whl}[server]"; then
      mkdir -p "$wheels"
      CMAKE_ARGS="-DGGML_NATIVE=OFF" pip wheel -q --no-cache-dir --no-deps -w "$wheels" 'llama-cpp-python>=0.3'
      whl=$(ls -t "$wheels"/llama_cpp_python-*.whl | head -n 1)
      pip install -q "${whl}[server]"
    fi
  fi
fi
if [ "$what" = "test" ] && ! command -v chromium >/dev/null 2>&1; then
  # The report test opens the HTML report in headless Chromium (Debian packages). Needs root (or
  # password-less sudo); without it the test skips itself and says why.
  sudo=""; [ "$(id -u)" = 0 ] || sudo="sudo -n"
  if ! (export DEBIAN_FRONTEND=noninteractive; $sudo apt-get update -qq && \
        $sudo apt-get install -y -qq --no-install-recommends chromium chromium-driver) >/dev/null 2>&1; then
    echo "note: could not install chromium (apt-get); the headless-browser report test will skip" >&2
  fi
fi
if ! command -v bwrap >/dev/null 2>&1; then
  # The evaluator confines candidates with bubblewrap where it works (confine.py; util-linux
  # `unshare` is the fallback). A no-op when present.
  sudo=""; [ "$(id -u)" = 0 ] || sudo="sudo -n"
  if ! (export DEBIAN_FRONTEND=noninteractive; $sudo apt-get update -qq && \
        $sudo apt-get install -y -qq --no-install-recommends bubblewrap) >/dev/null 2>&1; then
    echo "note: could not install bubblewrap (apt-get); the evaluator falls back to unshare" >&2
  fi
fi
case "$what" in
  test)  pip install -q -e '.[test,local,openai,hf]' ;;
  local) pip install -q -e '.[local]' ;;
  *)     pip install -q -e . ;;
esac
echo "kernelwright is set up in .venv ($(python -c 'import torch; print("torch", torch.__version__)'))"
