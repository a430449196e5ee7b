#!/usr/bin/env bash
# Create a virtual environment, install Quickdraft with its test tools, and with --run start the app.
#
#   scripts/setup.sh [--backend auto|cpu|cuda|vulkan|metal|cuda,vulkan] [--venv DIR] [--run] [--print-backend]
#                    [--print-cmake]
#
# llama.cpp is built with dynamic backends (Linux, Windows): a CPU module for every instruction-set level,
# the best one chosen when the app starts, plus a module for each GPU backend this machine can build and
# run: Vulkan when the Vulkan and SPIR-V headers and glslc are there, CUDA when nvcc is there and an
# NVIDIA driver is present (nvidia-smi lists a GPU, or libcuda.so.1 is installed). A module whose driver
# is missing on a later machine is reported by the app and skipped. On Apple Silicon, Metal is built in.
# --print-backend says what would be built and why each GPU backend was taken or skipped. --backend
# (or QUICKDRAFT_BACKEND) asks for GPU backends by name (cuda builds even without a driver); cpu builds
# none. CMAKE_ARGS, when set, is passed to llama.cpp's CMake as it is and wins over all of it.
# CUDA_ARCHITECTURES (e.g. "86;89") limits a CUDA build to those GPUs. Built wheels are kept in
# ~/.cache/quickdraft/llama-wheels (QUICKDRAFT_WHEEL_CACHE), one per set of CMake flags.
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${PYTHON:-python3}
VENV=.venv
BACKEND=${QUICKDRAFT_BACKEND:-auto}
RUN=0
PRINT_ONLY=0
while [ $# -gt 0 ]; do
  case "$1" in
    --backend) BACKEND=${2:?--backend needs auto, cpu, cuda, vulkan or metal}; shift 2 ;;
    --backend=*) BACKEND=${1#*=}; shift ;;
    --venv) VENV=${2:?--venv needs a directory}; shift 2 ;;
    --venv=*) VENV=${1#*=}; shift ;;
    --run) RUN=1; shift ;;
    --print-backend) PRINT_ONLY=1; shift ;;  # say what would be built, build nothing
    --print-cmake) PRINT_CMAKE=1; shift ;;   # print only the CMake flags (scripts/gpu/measure.py builds with them)
    --check-qt) check_qt_only=1; shift ;;    # only say which libraries Qt's window lacks
    -h|--help) sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
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

nvidia_driver() {  # prints how the NVIDIA driver was found; fails without one
  if have nvidia-smi && nvidia-smi -L >/dev/null 2>&1; then echo "nvidia-smi lists a GPU"; return 0; fi
  if have ldconfig && ldconfig -p 2>/dev/null | grep -q 'libcuda\.so\.1 '; then echo "libcuda.so.1 is installed"; return 0; fi
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

apple_silicon() { [ "$(uname -s)" = Darwin ] && [ "$(uname -m)" = arm64 ]; }

# Each check prints "yes<TAB>why" or "no<TAB>why"; asked=1 when the backend was named with --backend.
check_cuda() {
  local asked=$1 nvcc_path driver
  if ! nvcc_path=$(find_nvcc); then
    printf 'no\tno CUDA compiler (nvcc) was found\n'
  elif [ "$asked" = 1 ]; then
    printf 'yes\tasked for with --backend (nvcc: %s)\n' "$nvcc_path"
  elif driver=$(nvidia_driver); then
    printf 'yes\tnvcc was found (%s) and %s\n' "$nvcc_path" "$driver"
  else
    printf 'no\tnvcc was found (%s) but no NVIDIA driver (nvidia-smi -L fails, libcuda.so.1 is not installed), so a CUDA build could not run here; --backend cuda builds it anyway\n' "$nvcc_path"
  fi
}

check_vulkan() {
  if ! vulkan_headers || ! have glslc; then
    printf 'no\tthe Vulkan and SPIR-V headers and glslc were not all found (README: GPU support)\n'
  elif ! vulkan_headers_new_enough; then
    printf 'no\tthe Vulkan headers found are too old for this llama.cpp (no VK_EXT_layer_settings); point VULKAN_SDK at newer ones (README: GPU support)\n'
  else
    printf 'yes\tthe Vulkan and SPIR-V headers and glslc were found\n'
  fi
}

check_metal() {
  if apple_silicon; then printf 'yes\tthis is a Mac with Apple Silicon\n'; else printf 'no\tMetal needs a Mac with Apple Silicon\n'; fi
}

cuda_architectures() {
  if [ -n "${CUDA_ARCHITECTURES:-}" ]; then echo "$CUDA_ARCHITECTURES"
  elif have nvidia-smi && nvidia-smi -L >/dev/null 2>&1; then echo native
  else echo "75;80;86;89;90"  # no GPU to ask: Turing to Hopper
  fi
}

# The plan: GPU backends to build (PLAN_GPUS), a line of why for each (PLAN_NOTES), the CMake flags (CMAKE).
make_plan() {
  local wanted=$1 name asked verdict why
  PLAN_GPUS=() PLAN_NOTES=()
  for name in ${wanted//,/ }; do
    case "$name" in auto|cpu|cuda|vulkan|metal) ;;
      *) echo "setup.sh: unknown backend '$name': choose auto, cpu, cuda, vulkan or metal" >&2; exit 2 ;;
    esac
  done
  local candidates="cuda vulkan"
  [ "$(uname -s)" = Darwin ] && candidates=metal
  case ",$wanted," in *,metal,*) candidates="$candidates metal" ;; esac
  for name in $candidates; do
    if [ "$wanted" = cpu ]; then
      PLAN_NOTES+=("$name: not built (--backend cpu)"); continue
    fi
    asked=0
    case ",$wanted," in *,"$name",*) asked=1 ;; esac
    if [ "$wanted" != auto ] && [ "$asked" = 0 ]; then
      PLAN_NOTES+=("$name: not asked for"); continue
    fi
    IFS=$'\t' read -r verdict why < <("check_$name" "$asked")
    if [ "$verdict" = yes ]; then
      PLAN_GPUS+=("$name"); PLAN_NOTES+=("$name: built: $why")
    elif [ "$asked" = 1 ]; then
      echo "setup.sh: --backend $name cannot be built here: $why" >&2; exit 1
    else
      PLAN_NOTES+=("$name: skipped: $why")
    fi
  done
  if apple_silicon; then  # one CPU family: Metal and the CPU built into libggml
    CMAKE="-DGGML_NATIVE=OFF -DGGML_METAL=$([ ${#PLAN_GPUS[@]} -gt 0 ] && echo ON || echo OFF)"
    PLAN_NOTES+=("CPU: one build for Apple Silicon, Metal built in")
  else
    CMAKE="-DGGML_BACKEND_DL=ON -DGGML_CPU_ALL_VARIANTS=ON -DGGML_NATIVE=OFF -DCMAKE_INSTALL_BINDIR=llama_cpp/lib"
    for name in "${PLAN_GPUS[@]}"; do
      case "$name" in
        cuda) CMAKE+=" -DGGML_CUDA=ON -DCMAKE_CUDA_COMPILER=$(find_nvcc) -DCMAKE_CUDA_ARCHITECTURES=$(cuda_architectures)" ;;
        vulkan) CMAKE+=" -DGGML_VULKAN=ON" ;;
      esac
    done
  fi
}

plan_summary() {  # "CPU (every instruction-set level, chosen at start) + CUDA + Vulkan"
  local cpu="CPU (every instruction-set level, chosen at start)" name
  apple_silicon && cpu="CPU"
  local text=$cpu
  for name in "${PLAN_GPUS[@]}"; do
    case "$name" in cuda) text+=" + CUDA" ;; vulkan) text+=" + Vulkan" ;; metal) text+=" + Metal" ;; esac
  done
  echo "$text"
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

# pip -v passes on the build's own steps, "[n/N] Building ..." (ninja) or "[ p%] Building ..." (make):
# one line for every 25th, and the last, so a compile of many minutes shows it is moving (the whole
# log is kept beside the wheel for a failure)
compile_progress() {
  awk 'match($0, /^ *\[ *[0-9]+\/[0-9]+\]/) { split(substr($0, RSTART, RLENGTH), n, /[^0-9]+/)
         if (n[2] % 25 == 0 || n[2] == n[3]) { print "setup.sh:   compiling llama.cpp: step " n[2] " of " n[3]; fflush() } }
       match($0, /^ *\[ *[0-9]+%\]/) { p = substr($0, RSTART, RLENGTH); gsub(/[^0-9]/, "", p)
         if (p != last && p % 5 == 0) { print "setup.sh:   compiling llama.cpp: " p "%"; last = p; fflush() } }'
}

make_plan "$BACKEND"
SUMMARY=$(plan_summary)
if [ -n "${CMAKE_ARGS:-}" ]; then
  CMAKE=$CMAKE_ARGS SUMMARY="custom (CMAKE_ARGS is set: $CMAKE_ARGS)" PLAN_NOTES=()
fi
if [ "${check_qt_only:-0}" = 1 ]; then check_qt_libraries; exit 0; fi
if [ "${PRINT_CMAKE:-0}" = 1 ]; then echo "$CMAKE"; exit 0; fi
echo "setup.sh: llama.cpp backends: $SUMMARY"
for note in "${PLAN_NOTES[@]}"; do echo "setup.sh:   $note"; done
echo "setup.sh:   CMake flags: $CMAKE"
[ "$PRINT_ONLY" = 1 ] && exit 0

if [ ! -x "$VENV/bin/python" ]; then
  "$PY" -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install --upgrade pip

# llama-cpp-python first, built with the plan's flags; then Quickdraft, which finds it installed. pip's
# own cache keys a built wheel by the sdist alone, whatever CMAKE_ARGS said, so the wheel is built here
# without it and kept under a name made from the flags: setting up again with the same flags reuses it.
LLAMA=$(grep -o '"llama-cpp-python==[^"]*"' pyproject.toml | tr -d '"')
STAMP="$VENV/.quickdraft-backend"
if [ "$(cat "$STAMP" 2>/dev/null)" != "$LLAMA $CMAKE" ] || ! "$VENV/bin/python" -c 'import llama_cpp' 2>/dev/null; then
  KEY=$("$VENV/bin/python" -c 'import hashlib, platform, sys; print(hashlib.sha256(" ".join(sys.argv[1:] + [platform.system(), platform.machine()]).encode()).hexdigest()[:16])' "$LLAMA" "$CMAKE")
  WHEELS="${QUICKDRAFT_WHEEL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/quickdraft/llama-wheels}/$KEY"
  if ! ls "$WHEELS"/llama_cpp_python-*.whl >/dev/null 2>&1; then
    echo "setup.sh: compiling llama.cpp with $CMAKE (most of the 13 minutes a first setup takes on 2 free cores; once per set of flags)"
    rm -rf "$WHEELS.partial"
    mkdir -p "$(dirname "$WHEELS")"
    if ! CMAKE_ARGS="$CMAKE" "$VENV/bin/python" -m pip wheel -v --no-deps --no-cache-dir --no-binary llama-cpp-python \
        "$LLAMA" -w "$WHEELS.partial" 2>&1 | tee "$WHEELS.log" | compile_progress; then
      echo "setup.sh: compiling llama.cpp failed; the end of its log ($WHEELS.log):"
      tail -n 40 "$WHEELS.log"
      exit 1
    fi
    rm -rf "$WHEELS" && mv "$WHEELS.partial" "$WHEELS"
  fi
  WHEEL=$(ls "$WHEELS"/llama_cpp_python-*.whl | head -n 1)
  "$VENV/bin/python" -m pip install --force-reinstall --no-deps "$WHEEL"
  "$VENV/bin/python" -m pip install "$WHEEL"  # its own dependencies, if this venv lacked them
  echo "$LLAMA $CMAKE" > "$STAMP"
fi
"$VENV/bin/python" -m pip install -e ".[dev]"
"$VENV/bin/python" -m app.cli info --brief || true
check_qt_libraries

if [ "$RUN" = 1 ]; then
  exec "$VENV/bin/quickdraft-gui"
fi
