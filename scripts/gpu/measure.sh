#!/usr/bin/env bash
# Quickdraft on a real GPU, in as few calls as the device allows: build llama.cpp with CUDA, write
# Qwen2.5-shaped models with random weights (cost does not depend on the weights), measure the cost
# profiles, race our speculative loop against llama.cpp's own llama-speculative-simple on the same
# files and settings, and project the speedup of the real Qwen pair by replaying its recorded
# acceptance against the GPU's profile.
#
#   here, once:     scripts/gpu/pack.sh                 # .gpu/: trimmed llama.cpp sources, wheels, traces
#   on the GPU:     scripts/gpu/measure.sh build models # ~8 min on 16 cores (CUDA kernels for one arch)
#                   scripts/gpu/measure.sh calibrate speed replay
#   or at once:     scripts/gpu/measure.sh all
#
# Stages keep their work in $QD_GPU_WORK (default /tmp/qd-gpu), so later calls on the same warm machine
# reuse the build and the models. Results go to $OUT (the device tool's) or results/gpu: info.txt,
# profile-*.json, catch-up-*.json, speed.json, replay.txt and summary.txt, whose table is printed last.
# CPU_ONLY=1 runs the same pipeline on a CPU build with tiny shapes (a smoke test of this script).
set -euo pipefail
cd "$(dirname "$0")/../.."
REPO=$PWD
W=${QD_GPU_WORK:-/tmp/qd-gpu}
R=${OUT:-$REPO/results/gpu}
ARCH=${CUDA_ARCH:-90}
JOBS=${JOBS:-$(nproc)}
N_PREDICT=${N_PREDICT:-256}
DRAFT_LENGTHS=${DRAFT_LENGTHS:-"1 2 3 4 6 8 12 16"}
if [ "${CPU_ONLY:-0}" = 1 ]; then
  SHAPES=${SHAPES:-tiny,tiny}; MAINS=${MAINS:-tiny}; DRAFT_SHAPE=tiny; NGL=0; N_PREDICT=${N_PREDICT_CPU:-32}
else
  SHAPES=${SHAPES:-0.5b,7b,14b}; MAINS=${MAINS:-"7b 14b"}; DRAFT_SHAPE=0.5b; NGL=99
fi
PROMPT="Write a Python function that parses an ISO 8601 date and returns the weekday, with tests."
mkdir -p "$W" "$R"
export PYTHONPATH="$W/site:$W/src:$REPO" LLAMA_CPP_LIB_PATH="$W/build/bin" PYTHONUNBUFFERED=1
PY=${PYTHON:-python3}
qd() { "$PY" -m app.cli --data-dir "$W/data" "$@"; }
model() { ls "$W"/models/qwen2.5-"$1"-shape-q4_k_m.gguf; }

stage_build() {
  rm -rf "$W/src" && mkdir -p "$W/src"
  tar xzf .gpu/llama-src.tar.gz -C "$W/src" --strip-components=1
  local backend="-DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=$ARCH"
  [ "${CPU_ONLY:-0}" = 1 ] && backend="-DGGML_CUDA=OFF"
  # shellcheck disable=SC2086
  cmake -S "$W/src/vendor/llama.cpp" -B "$W/build" $(command -v ninja >/dev/null && echo -G Ninja) -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=ON \
    -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=OFF $backend >"$R/cmake.log" 2>&1 \
    || { tail -30 "$R/cmake.log"; exit 1; }
  time cmake --build "$W/build" --target llama-speculative-simple llama-bench -j "$JOBS" >"$R/build.log" 2>&1 \
    || { tail -40 "$R/build.log"; exit 1; }
  "$PY" -m pip install -q --no-index --no-deps --no-compile --upgrade --target "$W/site" .gpu/wheels/*.whl
  qd info | tee "$R/info.txt"
}

stage_models() {
  "$PY" scripts/gpu/make_shapes.py "$W/models" --shapes "$SHAPES" | tee "$R/models.txt"
}

stage_calibrate() {
  for main in $MAINS; do
    qd calibrate -m "$(model "$main")" -md "$(model "$DRAFT_SHAPE")" -ngl "$NGL" -ngld "$NGL" --draft-max 32 -c 4096 \
      | tee "$R/calibrate-$main.txt"
    cp "$(sed -n 's/^saved to //p' "$R/calibrate-$main.txt")" "$R/profile-$main.json"
  done
  "$PY" scripts/gpu/catch_up.py "$(model "$DRAFT_SHAPE")" "$NGL" >"$R/catch-up-$DRAFT_SHAPE.json"
}

stage_speed() {  # a draft identical to the main model: every token accepted, the speed ceiling
  local main; main=$(model "${MAINS%% *}")
  local rows=()
  base_ours=$(qd generate -m "$main" -ngl "$NGL" --drafter none -n "$N_PREDICT" -p "$PROMPT" --json \
              | "$PY" -c 'import json,sys; print(json.load(sys.stdin)["generation_tps"])')
  base_theirs=$("$W/build/bin/llama-bench" -m "$main" -ngl "$NGL" -p 0 -n "$N_PREDICT" -r 3 -o json \
              | "$PY" -c 'import json,sys; print(json.load(sys.stdin)[0]["avg_ts"])')
  for k in $DRAFT_LENGTHS; do
    ours=$(qd generate -m "$main" -md "$main" -ngl "$NGL" -ngld "$NGL" --drafter model --policy fixed \
           --draft-max "$k" -n "$N_PREDICT" -p "$PROMPT" --json \
           | "$PY" -c 'import json,sys; s=json.load(sys.stdin); print(s["generation_tps"], s["acceptance_rate"])')
    theirs=$("$W/build/bin/llama-speculative-simple" -m "$main" -md "$main" -ngl "$NGL" -ngld "$NGL" -c 4096 \
             --draft-max "$k" --draft-min 0 --draft-p-min 0 --temp 0 -n "$N_PREDICT" -p "$PROMPT" 2>&1 \
             | sed -n 's/.*decoded *[0-9]* tokens in *[0-9.]* seconds, speed: *\([0-9.]*\) t\/s.*/\1/p' | tail -1)
    rows+=("$k $ours ${theirs:-0}")
    echo "draft-max $k: ours ${ours% *} t/s (acceptance ${ours#* }), llama-speculative-simple ${theirs:-?} t/s"
  done
  printf '%s\n' "${rows[@]}" | "$PY" scripts/gpu/speed_table.py "$base_ours" "$base_theirs" "$R/speed.json"
}

stage_replay() {
  : >"$R/replay.txt"
  for main in $MAINS; do
    for drafter in lookup model lookup+model; do
      { echo "== $main, --drafter $drafter"
        "$PY" scripts/policy_replay.py replay .gpu/traces.json "$R/profile-$main.json" --drafter "$drafter" \
          --catch-up "$R/catch-up-$DRAFT_SHAPE.json"; } >>"$R/replay.txt"
    done
    { echo "== $main, lookup oracle bound"; "$PY" scripts/policy_replay.py bound .gpu/traces.json "$R/profile-$main.json"; } \
      >>"$R/replay.txt"
  done
  "$PY" scripts/gpu/summary.py "$R" | tee "$R/summary.txt"
}

stages=("$@")
[ ${#stages[@]} -eq 0 ] || [ "${stages[0]}" = all ] && stages=(build models calibrate speed replay)
for stage in "${stages[@]}"; do
  echo "=== $stage"
  "stage_$stage"
done
