#!/usr/bin/env bash
# Pack what scripts/gpu/measure.py needs on a GPU machine that reaches no package index, into .gpu/
# (ignored by git; the device tool carries it with `carry: [".gpu"]`, 64 MiB at most):
#   .gpu/llama-src.tar.gz    llama-cpp-python's sdist (the version pyproject.toml pins) trimmed to what
#                            the product's build of the libraries, a CUDA module and two llama.cpp tools need
#   .gpu/llama-src.sha256    the untrimmed sdist's hash: measure.py keys its build cache by it
#   .gpu/wheels/             the Python packages Quickdraft's CLI and server need beyond the GPU machine's
#                            own (Python 3.12 with numpy; binary wheels for CPython 3.10 to 3.13)
#   .gpu/traces.json         the real Qwen pair's recorded acceptance (scripts/policy_replay.py record)
#   .gpu/prebuilt/           builds made here for the GPU machine (measure.py --prebuild 90), if any
#
#   scripts/gpu/pack.sh [SDIST.tar.gz] [TRACES.json]
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PYTHON:-python3}
LLAMA=$(grep -o '"llama-cpp-python==[^"]*"' pyproject.toml | tr -d '"')
VERSION=${LLAMA#*==}
SDIST=${1:-}
TRACES=${2:-scripts/gpu/data/qwen2.5-coder-1.5b+0.5b-traces.json}
pin() { grep -o "\"$1==[^\"]*\"" pyproject.toml | tr -d '"'; }
rm -rf .gpu && mkdir -p .gpu/wheels
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
if [ -z "$SDIST" ]; then  # by name from the configured index, as pip install would fetch it
  "$PY" -m pip download -q --no-deps --no-binary :all: -d "$tmp" "$LLAMA"
  SDIST="$tmp/llama_cpp_python-$VERSION.tar.gz"
fi
sha256sum "$SDIST" | cut -d' ' -f1 >.gpu/llama-src.sha256
tar xzf "$SDIST" -C "$tmp"
src="$tmp/llama_cpp_python-$VERSION"
ll="$src/vendor/llama.cpp"
# what a build with LLAMA_BUILD_TOOLS and LLAMA_BUILD_EXAMPLES configures must stay (tools/*, examples/*,
# pocs); the server, its web UI, tests, docs and the models' vocabularies go
rm -rf "$src"/.git "$src"/.github "$ll"/.github "$ll"/models "$ll"/docs "$ll"/media "$ll"/gguf-py "$ll"/.devops \
       "$ll"/tests "$ll"/benches "$ll"/tools/server "$ll"/tools/ui "$ll"/tools/cli \
       "$src"/docs "$src"/tests "$src"/examples "$src"/docker
for backend in "$ll"/ggml/src/ggml-*/; do
  case "$(basename "$backend")" in ggml-cpu|ggml-cuda|ggml-blas) ;; *) rm -rf "$backend" ;; esac
done
tar czf .gpu/llama-src.tar.gz -C "$tmp" "llama_cpp_python-$VERSION"
"$PY" -m pip download -q --no-deps --only-binary=:all: -d .gpu/wheels \
  "$(pin gguf)" "$(pin platformdirs)" "$(pin Jinja2)" diskcache==5.6.3 typing_extensions==4.16.0
# the server (the slots stage's `quickdraft serve` and its client), with what they need in turn: all pure
# Python, resolved for the oldest Python the project supports
"$PY" -m pip download -q --only-binary=:all: --python-version 3.11 --platform manylinux2014_x86_64 -d .gpu/wheels \
  "$(pin starlette)" "$(pin uvicorn)" "$(pin httpx)"
for py in 3.10 3.11 3.12 3.13; do  # binary wheels (Jinja2's MarkupSafe, gguf's PyYAML): one per Python it may meet
  "$PY" -m pip download -q --no-deps --only-binary=:all: --platform manylinux2014_x86_64 --python-version "$py" \
    -d .gpu/wheels MarkupSafe==3.0.3 PyYAML==6.0.3
done
cp "$TRACES" .gpu/traces.json
# builds made here for the GPU machine (measure.py --prebuild ARCH): its build stage unpacks the one its
# flags name instead of compiling for 5 minutes of the lease
# flags name instead of compiling for 5 minutes of the lease; one that would take .gpu past what the
# device tool carries stays behind, said so (the CPU rehearsal in CI never needs it)
for built in "$HOME"/.cache/quickdraft/gpu-prebuilt/*.tar.xz; do
  [ -e "$built" ] || continue
  if [ $(( $(du -sm .gpu | cut -f1) + $(du -sm "$built" | cut -f1) )) -le 64 ]; then
    mkdir -p .gpu/prebuilt && cp "$built" .gpu/prebuilt/
  else
    echo "pack.sh: $built left out: .gpu would pass the 64 MiB the device tool carries" >&2
  fi
done
du -sh .gpu .gpu/*
total=$(du -sm .gpu | cut -f1)
[ "$total" -le 64 ] || { echo "pack.sh: .gpu is $total MiB, over the 64 MiB the device tool carries" >&2; exit 1; }
