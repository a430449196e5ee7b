#!/usr/bin/env bash
# Create a virtual environment, install Quickdraft with its test tools, and with --run start the app.
#
#   scripts/setup.sh [--backend auto|cpu|cuda|vulkan|metal] [--venv DIR] [--run] [--print-backend]
#
# llama-cpp-python is built for the best llama.cpp backend this machine has: CUDA when nvcc is found,
# Metal on Apple Silicon, Vulkan when the Vulkan and SPIR-V headers and glslc are there, else the CPU. The
# script says which it chose and why. --backend (or QUICKDRAFT_BACKEND) picks one; CMAKE_ARGS, when
# set, is passed to llama.cpp's CMake as it is and wins over both. CUDA_ARCHITECTURES (e.g. "86;89")
# limits a CUDA build to those GPUs; without it the build targets the GPU it finds, or common ones.
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${PYTHON:-python3}
VENV=.venv
BACKEND=${QUICKDRAFT_BACKEND:-auto}
RUN=0
PRINT_ONLY=0
while [ $# -gt 0 ]; do
  case "$1" in
    --backend) BACKEND=${2:?--backend needs cpu, cuda, vulkan, metal or auto}; shift 2 ;;
    --backend=*) BACKEND=${1#*=}; shift ;;
    --venv) VENV=${2:?--venv needs a directory}; shift 2 ;;
    --venv=*) VENV=${1#*=}; shift ;;
    --run) RUN=1; shift ;;
    --print-backend) PRINT_ONLY=1; shift ;;  # say what would be built, build nothing
    --check-qt) check_qt_only=1; shift ;;    # only say which libraries Qt's window lacks
    -h|--help) sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "setup.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done

have() { command -v "$1" >/dev/null 2>&1; }

find_nvcc() {
  if have nvcc; then command -v nvcc; return; fi
  for dir in ${CUDA_SEARCH_DIRS-"${CUDA_HOME:-} ${CUDA_PATH:-} /usr/local/cuda /opt/cuda"}; do
    if [ -n "$dir" ] && [ -x "$dir/bin/nvcc" ]; then echo "$dir/bin/nvcc"; return; fi
  done
  return 1
}

vulkan_headers() {  # llama.cpp's Vulkan backend needs the Vulkan and the SPIR-V headers
  has_header vulkan/vulkan.h && has_header spirv/unified1/spirv.hpp
}

vulkan_headers_new_enough() {  # this llama.cpp uses VK_EXT_layer_settings (Vulkan headers 1.3.2xx and later)
  grep -q VK_EXT_layer_settings "$(header_path vulkan/vulkan_core.h)" 2>/dev/null
}

has_header() { header_path "$1" >/dev/null; }

header_path() {  # the first of the include folders that has $1 (VULKAN_SDK's first)
  local dir
  for dir in ${VULKAN_SDK:+"$VULKAN_SDK/include"} /usr/include /usr/local/include; do
    if [ -f "$dir/$1" ]; then echo "$dir/$1"; return 0; fi
  done
  return 1
}

detect_backend() {  # prints "backend<TAB>why"
  if nvcc_path=$(find_nvcc); then
    printf 'cuda\tthe CUDA compiler was found (%s)\n' "$nvcc_path"
  elif [ "$(uname -s)" = Darwin ] && [ "$(uname -m)" = arm64 ]; then
    printf 'metal\tthis is a Mac with Apple Silicon\n'
  elif vulkan_headers && have glslc && vulkan_headers_new_enough; then
    printf 'vulkan\tthe Vulkan and SPIR-V headers and glslc were found\n'
  elif vulkan_headers && have glslc; then
    printf 'cpu\tthe Vulkan headers found are too old for this llama.cpp (no VK_EXT_layer_settings); point VULKAN_SDK at newer ones (README: GPU support)\n'
  else
    printf 'cpu\tno GPU toolchain was found (nvcc for CUDA; Vulkan and SPIR-V headers and glslc for Vulkan)\n'
  fi
}

cuda_architectures() {
  if [ -n "${CUDA_ARCHITECTURES:-}" ]; then echo "$CUDA_ARCHITECTURES"
  elif have nvidia-smi && nvidia-smi -L >/dev/null 2>&1; then echo native
  else echo "75;80;86;89;90"  # no GPU to ask: Turing to Hopper
  fi
}

cmake_args_for() {
  case "$1" in
    cpu) echo "" ;;
    cuda) nvcc_path=$(find_nvcc) || { echo "setup.sh: --backend cuda needs nvcc (the CUDA toolkit)" >&2; exit 1; }
          echo "-DGGML_CUDA=on -DCMAKE_CUDA_COMPILER=$nvcc_path -DCMAKE_CUDA_ARCHITECTURES=$(cuda_architectures)" ;;
    metal) echo "-DGGML_METAL=on" ;;
    vulkan) echo "-DGGML_VULKAN=on" ;;
    *) echo "setup.sh: unknown backend '$1': choose cpu, cuda, vulkan, metal or auto" >&2; exit 2 ;;
  esac
}

# Qt's xcb platform plugin (the window on X11) needs these libraries, which a fresh Debian or Ubuntu
# may lack; without them the app stops with "Could not load the Qt platform plugin xcb".
QT_XCB_LIBRARIES="libxcb-cursor0:libxcb-cursor.so.0 libxcb-icccm4:libxcb-icccm.so.4
  libxcb-keysyms1:libxcb-keysyms.so.1 libxcb-shape0:libxcb-shape.so.0 libxcb-render-util0:libxcb-render-util.so.0
  libxcb-image0:libxcb-image.so.0 libxkbcommon-x11-0:libxkbcommon-x11.so.0 libegl1:libEGL.so.1
  libfontconfig1:libfontconfig.so.1 libdbus-1-3:libdbus-1.so.3"

check_qt_libraries() {  # prints the one apt command that installs what is missing (Linux only)
  [ "$(uname -s)" = Linux ] && have ldconfig || return 0
  local known missing=() entry
  known=$(ldconfig -p)
  for entry in $QT_XCB_LIBRARIES; do
    grep -q "${entry#*:}" <<<"$known" || missing+=("${entry%%:*}")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    echo "setup.sh: the window needs libraries this system lacks; install them with:"
    echo "  sudo apt install ${missing[*]}"
  fi
}

if [ "$BACKEND" = auto ]; then
  IFS=$'\t' read -r BACKEND WHY < <(detect_backend)
else
  WHY="asked for with --backend"
fi
CMAKE=$(cmake_args_for "$BACKEND")
if [ -n "${CMAKE_ARGS:-}" ]; then
  CMAKE=$CMAKE_ARGS BACKEND=custom WHY="CMAKE_ARGS is set: $CMAKE_ARGS"
fi
if [ "${check_qt_only:-0}" = 1 ]; then check_qt_libraries; exit 0; fi
echo "setup.sh: llama.cpp backend: $BACKEND ($WHY)"
[ "$PRINT_ONLY" = 1 ] && exit 0

if [ ! -x "$VENV/bin/python" ]; then
  "$PY" -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install --upgrade pip

# llama-cpp-python first, built for the backend; then Quickdraft, which finds it installed. pip caches
# the wheel it builds by the sdist alone, whatever CMAKE_ARGS said, so only the CPU build goes
# through the cache: a GPU build is always compiled afresh and never cached.
LLAMA=$(grep -o '"llama-cpp-python==[^"]*"' pyproject.toml | tr -d '"')
STAMP="$VENV/.quickdraft-backend"
if [ "$(cat "$STAMP" 2>/dev/null)" != "$BACKEND $CMAKE" ] || ! "$VENV/bin/python" -c 'import llama_cpp' 2>/dev/null; then
  if [ "$BACKEND" = cpu ]; then
    if [ -f "$STAMP" ]; then  # leaving a GPU build: put the CPU one back
      "$VENV/bin/python" -m pip install --force-reinstall --no-deps "$LLAMA"
    else
      "$VENV/bin/python" -m pip install "$LLAMA"
    fi
  else
    echo "setup.sh: compiling llama.cpp with $CMAKE (this takes a while)"
    CMAKE_ARGS="$CMAKE" "$VENV/bin/python" -m pip install --force-reinstall --no-deps --no-cache-dir \
      --no-binary llama-cpp-python "$LLAMA"
    "$VENV/bin/python" -m pip install "$LLAMA"  # its own dependencies, if this venv lacked them
  fi
  echo "$BACKEND $CMAKE" > "$STAMP"
fi
"$VENV/bin/python" -m pip install -e ".[dev]"
"$VENV/bin/python" -m app.cli info --brief || true
check_qt_libraries

if [ "$RUN" = 1 ]; then
  exec "$VENV/bin/quickdraft-gui"
fi
