#!/bin/bash
# One device call: build the CUDA llama-server, write the model, run the slot x load sweep,
# in the foreground, each run's trace written under OUT as soon as the run ends (what is
# under $OUT comes back even when the call runs out of time).
#
#   bash bench/device/sweep_lease.sh OUT TARBALL      (from the repository root)
#
# TARBALL: the llama-cpp-python 0.3.36 sdist's vendor/llama.cpp trimmed as
# shared/notes/gpu-llamacpp.md says (4.9 MB as tar.xz), carried in a git-ignored folder.
# Dry run off a GPU with a built server (no build; CPU flags; small sizes):
#   SERVER=.llama-server/llama-server MODEL=.llama-server/tiny.gguf SLOTS=1,2 LOAD=4 \
#     DRAIN=4 EXTRA="--cpu --fake-gpu" bash bench/device/sweep_lease.sh /tmp/out
# Recorded: 2026-12-06 on an H100 (5 slot counts x 2 loads, one prompt length: traces in
# tests/data/whatif/h100/), then again with three prompt lengths and a load past what 4
# slots carry (docs/advise.md, "Calibration of the bands").
OUT=${1:?OUT}
TARBALL=${2:-}
REPO="$(pwd)"
W=${W:-/tmp/tw}
SLOTS=${SLOTS:-4,64,16}
RATE_FACTORS=${RATE_FACTORS:-0.6,1.5}
MIX=${MIX:-40,160,320}
LOAD=${LOAD:-16}
DRAIN=${DRAIN:-12}
EVERY=${EVERY:-2}
mkdir -p "$OUT/sweep" $W
exec > >(tee -a "$OUT/log") 2>&1
set -x
date -u
if [ -z "$SERVER" ]; then
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  tar xJf "$TARBALL" -C $W || exit 1
  cd $W/llama.cpp || exit 1
  cmake -G Ninja -B build -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=ON -DGGML_CUDA_FA=OFF \
    -DCMAKE_CUDA_ARCHITECTURES=90 -DGGML_NATIVE=OFF -DBUILD_SHARED_LIBS=OFF -DLLAMA_BUILD_UI=OFF \
    -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
    -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_TOOLS=ON > $W/configure.log 2>&1 || { tail -30 $W/configure.log; exit 1; }
  time cmake --build build --target llama-server -j"$(nproc)" > $W/build.log 2>&1 || { tail -40 $W/build.log; exit 1; }
  date -u; echo BUILT
  PYTHONPATH=$W/llama.cpp/gguf-py python3 "$REPO/tests/engines/llamacpp/make_tiny_model.py" $W/model.gguf --shape gpu || exit 1
  SERVER=$W/llama.cpp/build/bin/llama-server
  MODEL=$W/model.gguf
  gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
  drv=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1)
  SOURCE="llama.cpp (llama-cpp-python 0.3.36 sdist, CUDA, FA off) on an $gpu (driver $drv), $(date -u +%F)"
else
  SOURCE=${SOURCE:-"dry run: $SERVER, $(date -u +%F)"}
fi
cd "$REPO" || exit 1
# shellcheck disable=SC2086
PYTHONUNBUFFERED=1 PYTHONPATH=agent python3 bench/device/llamacpp_trace.py sweep \
  --server "$SERVER" --model "$MODEL" --out "$OUT/sweep" --slots "$SLOTS" \
  --rate-factors "$RATE_FACTORS" --prompt-mix "$MIX" --ctx-per-slot 1280 \
  --load "$LOAD" --drain "$DRAIN" --every "$EVERY" --source "$SOURCE" $EXTRA
echo "sweep rc $?"
date -u; echo SWEEP-END
