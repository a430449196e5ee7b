#!/usr/bin/env bash
# Create .venv and install Quickdraft with its test tools; with --run, start the app. Builds llama-cpp-python for the CPU
# unless CMAKE_ARGS says otherwise (see README: GPU builds).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
.venv/bin/python -m pip install --upgrade pip
.venv/bin/python -m pip install -e ".[dev]"
if [ "${1:-}" = "--run" ]; then
  exec .venv/bin/quickdraft-gui
fi
