#!/usr/bin/env bash
# Pack what scripts/gpu/measure.sh needs on a GPU machine that reaches no package index, into .gpu/
# (ignored by git; the device tool carries it with `carry: [".gpu"]`, 64 MiB at most):
#   .gpu/llama-src.tar.gz  llama-cpp-python's Python package and the llama.cpp it vendors, trimmed to
#                          what a CUDA build of the libraries and two tools needs
#   .gpu/wheels/           the pure-Python packages Quickdraft's CLI needs beyond that machine's own
#   .gpu/traces.json       the real Qwen pair's recorded acceptance (scripts/policy_replay.py record)
#
#   scripts/gpu/pack.sh [SDIST.tar.gz] [TRACES.json]
set -euo pipefail
cd "$(dirname "$0")/../.."
LLAMA=$(grep -o '"llama-cpp-python==[^"]*"' pyproject.toml | tr -d '"')
VERSION=${LLAMA#*==}
SDIST=${1:-}
TRACES=${2:-scripts/gpu/data/qwen2.5-coder-1.5b+0.5b-traces.json}
mkdir -p .gpu/wheels
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
if [ -z "$SDIST" ]; then
  url=$(curl -fsSL https://pypi.org/simple/llama-cpp-python/ | grep -o "https://[^\"#]*llama_cpp_python-$VERSION.tar.gz" | head -1)
  SDIST="$tmp/llama_cpp_python-$VERSION.tar.gz"
  curl -fsSL -o "$SDIST" "$url"
fi
tar xzf "$SDIST" -C "$tmp"
src="$tmp/llama_cpp_python-$VERSION"
ll="$src/vendor/llama.cpp"
rm -rf "$src"/.git "$src"/.github "$ll"/.github "$ll"/models "$ll"/docs "$ll"/media "$ll"/gguf-py "$ll"/.devops \
       "$ll"/tests "$ll"/benches "$ll"/tools/server "$ll"/tools/ui "$ll"/tools/cli \
       "$src"/docs "$src"/tests "$src"/examples "$src"/docker  # measure.sh builds without the server
for backend in "$ll"/ggml/src/ggml-*/; do
  case "$(basename "$backend")" in ggml-cpu|ggml-cuda|ggml-blas) ;; *) rm -rf "$backend" ;; esac
done
tar czf .gpu/llama-src.tar.gz -C "$tmp" "llama_cpp_python-$VERSION"
python3 -m pip download -q --no-deps --only-binary=:all: -d .gpu/wheels \
  "$(grep -o '"gguf==[^"]*"' pyproject.toml | tr -d '"')" \
  "$(grep -o '"platformdirs==[^"]*"' pyproject.toml | tr -d '"')" diskcache==5.6.3
cp "$TRACES" .gpu/traces.json
du -sh .gpu .gpu/*
