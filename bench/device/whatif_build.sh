#!/usr/bin/env bash
# Build llama-server (CPU, and CUDA when WITH_CUDA=1) on the device from the trimmed
# llama.cpp tree carried as .gl/llama-src.tar.xz (see ../shared/notes/gpu-llamacpp.md),
# and link it with the tiny model under .llama-server/ as tests/support/llamaserver.py
# expects. Used for the what-if validation runs (docs/advise.md).
set -euo pipefail
repo="$(cd "$(dirname "$0")/../.." && pwd)"
work="${WORK:-/tmp/whatif-build}"
mkdir -p "$work"
[ -d "$work/llama.cpp" ] || tar -xJf "$repo/.gl/llama-src.tar.xz" -C "$work"
cuda=OFF
[ "${WITH_CUDA:-0}" = 1 ] && cuda=ON
cmake -S "$work/llama.cpp" -B "$work/build-$cuda" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DGGML_NATIVE=OFF -DBUILD_SHARED_LIBS=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF \
  -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
  -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_TOOLS=ON -DGGML_CUDA=$cuda \
  -DCMAKE_CUDA_ARCHITECTURES=90 >"$work/configure-$cuda.log"
cmake --build "$work/build-$cuda" --target llama-server -j"$(nproc)" >"$work/build-$cuda.log"
[ -L "$repo/.llama-server" ] && rm -f "$repo/.llama-server"
mkdir -p "$repo/.llama-server"
ln -sfn "$work/build-$cuda/bin/llama-server" "$repo/.llama-server/llama-server"
ln -sfn "$repo/.gl/tiny.gguf" "$repo/.llama-server/tiny.gguf"
echo "built $work/build-$cuda/bin/llama-server"
