#!/bin/sh
# Run llama.cpp's server tests against quickdraft serve, one pytest run per file, and print each
# file's summary line. Usage: scripts/llama_server_suite/run.sh [LLAMA_CPP_DIR] [test_file.py ...]
# LLAMA_CPP_DIR: the llama.cpp sources (default: the vendored copy unpacked at /tmp/sd); files
# default to those covering llama-server's own endpoints, CORS and keys.
here="$(cd "$(dirname "$0")" && pwd)"
llama="${1:-/tmp/sd/llama_cpp_python-0.3.36/vendor/llama.cpp}"
[ $# -gt 0 ] && shift
files="${*:-test_tokenize.py test_infill.py test_completion.py test_security.py test_template.py test_basic.py}"
export QUICKDRAFT_SUITE_PYTHON="${QUICKDRAFT_SUITE_PYTHON:-$(command -v python3)}"
export LLAMA_SERVER_BIN_PATH="$here/llama-server"
export PYTHONPATH="$here/pylib${PYTHONPATH:+:$PYTHONPATH}"
cd "$llama/tools/server/tests" || exit 2
for f in $files; do
    line=$("$QUICKDRAFT_SUITE_PYTHON" -m pytest -q -p no:cacheprovider "unit/$f" 2>&1 | tail -n 1)
    echo "$f: $line"
done
