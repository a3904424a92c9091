#!/bin/bash
# One device call: build the CUDA llama-server, write the model, run the slot x load sweep
# in the foreground. The traces and sweep.json are written to $W/sweep; OUT holds two
# files only, the log and sweep.tgz (sweep/*.jsonl.gz, sweep/sweep.json and the log), as
# a device call brings back at most 8 files from $OUT (a sweep of 3 slot counts x 2 loads
# is already 6 traces + sweep.json + log, and the first recording lost its traces to that
# limit). sweep.tgz is rewritten every 20 s while the sweep runs and once at the end, so a
# call cut off at its time limit still brings back the runs that had ended.
#
#   tar xzf sweep.tgz        (gives sweep/*.jsonl.gz, sweep/sweep.json, log)
#
#   bash bench/device/sweep_lease.sh OUT TARBALL      (from the repository root)
#
# TARBALL: the llama-cpp-python 0.3.36 sdist's vendor/llama.cpp trimmed as
# shared/notes/gpu-llamacpp.md says (4.9 MB as tar.xz), carried in a git-ignored folder.
# Dry run off a GPU with a built server (no build; CPU flags; small sizes):
#   SERVER=.llama-server/llama-server MODEL=.llama-server/tiny.gguf SLOTS=1,2 LOAD=4 \
#     DRAIN=4 EXTRA="--cpu --fake-gpu" bash bench/device/sweep_lease.sh /tmp/out
#   (36 s on this 2-core machine; OUT then holds log and sweep.tgz)
# Recorded: 2026-12-06 on an H100 (5 slot counts x 2 loads, one prompt length: traces in
# tests/data/whatif/h100/), then again with three prompt lengths and a load past what 4
# slots carry, SLOTS=4,64,16 LOAD=12 DRAIN=8 (tests/data/whatif/h100-mix/; docs/advise.md,
# "Calibration of the bands"). Those two repeated each load's prompts in the next load
# on the same server (answered from llama-server's prompt cache); the warmed sweep, each
# server warmed and each run's prompts its own, was recorded with the server kept from a
# build (KEEP_SERVER=1) and carried in .carry/ (tests/data/whatif/h100-fresh/):
#   cat .carry/llama-server.xz.* | xz -d > /tmp/tw/llama-server; chmod +x /tmp/tw/llama-server
#   (the model as below: make_tiny_model.py with the tarball's gguf-py)
#   SERVER=/tmp/tw/llama-server MODEL=/tmp/tw/model.gguf SLOTS=4,64,16,8,32 LOAD=12 DRAIN=8 \
#     EXTRA="--rates 3.79,9.1,18.95" bash bench/device/sweep_lease.sh "$OUT"
# A server built off the device (bench/device/build_cuda_server.sh, no device time) runs
# the same way, with the device's CUDA libraries on the loader path (the sixth and seventh
# recordings, tests/data/whatif/h100-sixth/ and h100-seventh/, SLOTS, LOAD, DRAIN as above
# and EXTRA="--rates 3.79,9.1,18.95 --settle"):
#   xz -dc .carry/llama-server.xz > /tmp/tw/llama-server; chmod +x /tmp/tw/llama-server
#   LD_LIBRARY_PATH=/usr/local/cuda/lib64 SERVER=/tmp/tw/llama-server MODEL=... bash $0 "$OUT"
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
rm -rf "$W/sweep"
mkdir -p "$OUT" "$W/sweep"
OUT=$(cd "$OUT" && pwd)  # absolute: pack() runs in $W
exec > >(tee -a "$OUT/log") 2>&1
# sweep.tgz: written beside and renamed, so what comes back is never half a tarball
pack() {
  cp "$OUT/log" "$W/log" 2>/dev/null
  (cd "$W" && tar czf "$OUT/.sweep.tgz.part" sweep/*.jsonl.gz sweep/sweep.json log) 2>/dev/null \
    && mv "$OUT/.sweep.tgz.part" "$OUT/sweep.tgz"
}
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
  # KEEP_SERVER=1: the built server also comes back, xz in 15 MB parts (a later lease carries
  # it and skips the build: cat llama-server.xz.* | xz -d > llama-server; chmod +x; SERVER=)
  if [ -n "$KEEP_SERVER" ]; then  # before the sweep, never beside it (it would take CPU)
    set -o pipefail
    xz -T0 -6 -c build/bin/llama-server | split -b 15m - "$OUT/llama-server.xz." \
      || { echo "KEEP_SERVER: xz or split failed"; rm -f "$OUT"/llama-server.xz.*; }
    set +o pipefail
  fi
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
(while sleep 20; do pack; done) &
PACKER=$!
# shellcheck disable=SC2086
PYTHONUNBUFFERED=1 PYTHONPATH=agent python3 bench/device/llamacpp_trace.py sweep \
  --server "$SERVER" --model "$MODEL" --out "$W/sweep" --slots "$SLOTS" \
  --rate-factors "$RATE_FACTORS" --prompt-mix "$MIX" --ctx-per-slot 1280 \
  --load "$LOAD" --drain "$DRAIN" --every "$EVERY" --source "$SOURCE" $EXTRA
echo "sweep rc $?"
kill $PACKER
date -u; echo SWEEP-END
set +x
pack
ls -l "$OUT"
