#!/usr/bin/env bash
# Build llama.cpp's llama-server from the llama-cpp-python sdist (which vendors
# llama.cpp) and write our tiny model, for the live engine tests.
#
# The result is cached under
#   ${XDG_CACHE_HOME:-$HOME/.cache}/inferwatch/llama-server/<key>/
# where <key> hashes the sdist's sha256 and the build flags, so a second run on
# the same machine reuses it and a fresh machine rebuilds. The repository gets
# a directory `.llama-server/` (ignored by git) of links into it: `llama-server`,
# `tiny.gguf`, `gguf-py`, `BUILD_INFO`; the tests read those.
#
# Usage: tests/engines/llamacpp/setup.sh [--build-only] [PYTHON]
#   PYTHON: the interpreter whose pip fetches the sdist and whose `tokenizers`
#           and numpy write the model (default .venv/bin/python).
#   --build-only: fetch and build (or find the cached build) and stop; PYTHON
#           needs only pip. .ci/run builds this way while pip installs the test
#           extras, then runs setup.sh again for the model and the links.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../../.." && pwd)"
build_only=""
if [ "${1:-}" = "--build-only" ]; then
  build_only=1
  shift
fi
python="${1:-$repo/.venv/bin/python}"

# Pinned: name, version and the sdist's sha256 (PyPI, checked on download).
sdist_name="llama-cpp-python"
sdist_version="0.3.36"
sdist_sha256="832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e"

# Only what the server needs: no web UI (its options download at build time),
# no HTTPS client (no libssl needed), a static binary that runs from the cache
# and instructions every x86-64 CPU has.
cmake_flags=(
  -DCMAKE_BUILD_TYPE=Release
  -DGGML_NATIVE=OFF
  -DBUILD_SHARED_LIBS=OFF
  -DLLAMA_BUILD_UI=OFF
  -DLLAMA_USE_PREBUILT_UI=OFF
  -DLLAMA_OPENSSL=OFF
  -DLLAMA_BUILD_TESTS=OFF
  -DLLAMA_BUILD_EXAMPLES=OFF
  -DLLAMA_BUILD_SERVER=ON
  -DLLAMA_BUILD_TOOLS=ON
)
jobs="${LLAMA_BUILD_JOBS:-2}"

key="$(printf '%s\n' "$sdist_sha256" "$(uname -m)" "${cmake_flags[@]}" | sha256sum | cut -c1-16)"
cache_root="${XDG_CACHE_HOME:-$HOME/.cache}/inferwatch/llama-server"
dest="$cache_root/$key"
mkdir -p "$cache_root"

log() { printf -- '--- llama-server: %s\n' "$*"; }

build() {
  local work="$cache_root/.work-$key"
  rm -rf "$work"
  mkdir -p "$work"
  log "fetching $sdist_name==$sdist_version from the package registry"
  "$python" -m pip download -q --no-deps --no-binary :all: \
    "$sdist_name==$sdist_version" -d "$work/dl"
  local tarball
  tarball="$(ls "$work"/dl/*.tar.gz)"
  local got
  got="$(sha256sum "$tarball" | cut -d' ' -f1)"
  if [ "$got" != "$sdist_sha256" ]; then
    echo "setup.sh: $tarball: sha256 $got, expected $sdist_sha256" >&2
    exit 2
  fi
  tar -xzf "$tarball" -C "$work"
  local src
  src="$(ls -d "$work"/llama_cpp_python-*/vendor/llama.cpp)"
  log "building llama-server with -j$jobs (about 10 minutes on 2 cores)"
  local t0=$SECONDS
  cmake -S "$src" -B "$work/build" -G "Unix Makefiles" "${cmake_flags[@]}" >"$work/configure.log"
  cmake --build "$work/build" --target llama-server -j"$jobs" >"$work/build.log"
  log "built in $((SECONDS - t0)) s"
  mkdir -p "$work/out/bin"
  cp "$work/build/bin/llama-server" "$work/out/bin/"
  # gguf-py writes the model; the server's README is the flag reference.
  cp -r "$src/gguf-py" "$work/out/gguf-py"
  printf '%s\n' "$sdist_name==$sdist_version" "sha256=$sdist_sha256" \
    "build_seconds=$((SECONDS - t0))" "${cmake_flags[@]}" >"$work/out/BUILD_INFO"
  rm -rf "$dest"
  mv "$work/out" "$dest"
  rm -rf "$work"
}

(
  # One build at a time per key, even with several checkouts on the machine.
  flock 9
  if [ -x "$dest/bin/llama-server" ]; then
    log "cached in $dest"
  else
    build
  fi
) 9>"$cache_root/.lock-$key"

if [ -n "$build_only" ]; then
  log "built: $dest (the model and the links come with a run without --build-only)"
  exit 0
fi

# The model is ours and cheap: regenerate it whenever the generator changes.
gen="$here/make_tiny_model.py"
model_key="$(sha256sum "$gen" | cut -c1-12)"
model="$dest/model/tiny-$model_key.gguf"
if [ ! -f "$model" ]; then
  log "writing the tiny model"
  mkdir -p "$dest/model"
  PYTHONPATH="$dest/gguf-py" "$python" "$gen" "$model.tmp"
  mv "$model.tmp" "$model"
fi
links="$repo/.llama-server"
mkdir -p "$links"
ln -sfn "$dest/bin/llama-server" "$links/llama-server"
ln -sfn "$model" "$links/tiny.gguf"
ln -sfn "$dest/gguf-py" "$links/gguf-py"
ln -sfn "$dest/BUILD_INFO" "$links/BUILD_INFO"
"$links/llama-server" --version 2>&1 | tail -n 4
log "ready: $links (from $dest)"
