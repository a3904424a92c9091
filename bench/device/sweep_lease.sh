#!/bin/bash
# One lease: build the CUDA llama-server, write the model, run the slot x load sweep.
# Recorded on an H100 lease 2026-12-06 (docs/advise.md, "Calibration of the bands": build
# 4 min, sweep 6 min; the traces are tests/data/whatif/h100/).
# The carry folder D holds: llama.tar.xz (the llama-cpp-python 0.3.36 sdist's
# vendor/llama.cpp trimmed as shared/notes/gpu-llamacpp.md says, 4.9 MB as tar.xz) and
# repo/ (git archive HEAD agent bench alerts tests/engines/llamacpp pyproject.toml).
# Start it detached (setsid nohup bash D/sweep_lease.sh &), poll /tmp/tw/DONE, then
# tar /tmp/tw/sweep/*.jsonl.gz into $OUT (5 slot counts x 2 loads x ~35 s of load).
D="$(cd "$(dirname "$0")" && pwd)"
W=/tmp/tw
mkdir -p $W/sweep
exec >>$W/log 2>&1
set -x
date
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
tar xJf $D/llama.tar.xz -C $W
cd $W/llama.cpp
cmake -G Ninja -B build -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=ON -DGGML_CUDA_FA=OFF \
  -DCMAKE_CUDA_ARCHITECTURES=90 -DGGML_NATIVE=OFF -DBUILD_SHARED_LIBS=OFF -DLLAMA_BUILD_UI=OFF \
  -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
  -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_TOOLS=ON > $W/configure.log 2>&1 || { tail -30 $W/configure.log; touch $W/FAILED; exit 1; }
time cmake --build build --target llama-server -j16 > $W/build.log 2>&1 || { tail -40 $W/build.log; touch $W/FAILED; exit 1; }
date; echo BUILT
PYTHONPATH=$W/llama.cpp/gguf-py python3 $D/repo/tests/engines/llamacpp/make_tiny_model.py $W/model.gguf --shape gpu || { touch $W/FAILED; exit 1; }
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
cd $D/repo
PYTHONUNBUFFERED=1 PYTHONPATH=agent python3 bench/device/llamacpp_trace.py sweep \
  --server $W/llama.cpp/build/bin/llama-server --model $W/model.gguf --out $W/sweep \
  --slots 4,8,16,32,64 --rate-factors 0.6,1.2 --load 32 --drain 20 --every 2 \
  --source "llama.cpp on an $gpu, $(date -u +%F)" || touch $W/FAILED
date; echo SWEEP-END
touch $W/DONE
