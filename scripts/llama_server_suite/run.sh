#!/usr/bin/env bash
# Run llama.cpp's server tests against quickdraft serve, one pytest run per file, and print each
# file's summary line. Usage: scripts/llama_server_suite/run.sh [LLAMA_CPP_DIR] [test_file.py ...]
# LLAMA_CPP_DIR: the llama.cpp sources (default: the vendored copy unpacked at /tmp/sd); files
# default to those covering llama-server's own endpoints, CORS and keys. With QUICKDRAFT_SUITE_LOGS set
# to a folder, each file's whole pytest output (-rA: every test's outcome) is kept there.
here="$(cd "$(dirname "$0")" && pwd)"
llama="${1:-/tmp/sd/llama_cpp_python-0.3.36/vendor/llama.cpp}"
[ $# -gt 0 ] && shift
files="${*:-test_tokenize.py test_infill.py test_completion.py test_security.py test_template.py test_basic.py}"
export QUICKDRAFT_SUITE_PYTHON="${QUICKDRAFT_SUITE_PYTHON:-$(command -v python3)}"
export LLAMA_SERVER_BIN_PATH="$here/llama-server"
export PYTHONPATH="$here/pylib${PYTHONPATH:+:$PYTHONPATH}"
cd "$llama/tools/server/tests" || exit 2
logs="${QUICKDRAFT_SUITE_LOGS:-$(mktemp -d)}"
mkdir -p "$logs"
for f in $files; do
    "$QUICKDRAFT_SUITE_PYTHON" -m pytest -q -rA -p no:cacheprovider "unit/$f" > "$logs/$f.log" 2>&1
    echo "$f: $(tail -n 1 "$logs/$f.log")"
done
