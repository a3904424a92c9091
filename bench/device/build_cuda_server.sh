#!/bin/bash
# Build the CUDA llama-server OFF the device, on a machine with no GPU and no CUDA install,
# so a lease spends its minutes on the sweep instead of a 9-minute build. The CUDA 13.0
# compiler, runtime and cuBLAS come from PyPI's NVIDIA wheels, pinned to the device's
# toolkit (nvcc 13.0, driver 580: /work/.library/device/KINDS.md); the binary links the
# runtime and cuBLAS dynamically and finds the device's own libraries (/usr/local/cuda).
# The driver library (libcuda.so.1) is not in any wheel: the link uses a stub with the
# driver API's symbol names and the same soname, and the device's driver answers at run
# time (what the toolkit's own lib64/stubs/libcuda.so is for).
#
#   bash bench/device/build_cuda_server.sh TARBALL OUT_DIR
#
# TARBALL: the trimmed llama.cpp tree of sweep_lease.sh (4.9 MB as tar.xz). OUT_DIR gets
# llama-server.xz (about 28 MB), for a carried folder, and the build log. About 21 minutes
# on 2 cores (144 CUDA objects for sm_90, FlashAttention off), and 1 GB of wheels.
# On the device:
#   xz -dc .carry/llama-server.xz > /tmp/tw/llama-server; chmod +x /tmp/tw/llama-server
#   LD_LIBRARY_PATH=/usr/local/cuda/lib64 SERVER=/tmp/tw/llama-server ... sweep_lease.sh OUT
set -euo pipefail
TARBALL=$(realpath "${1:?TARBALL}")
OUT=$(mkdir -p "${2:?OUT_DIR}" && cd "$2" && pwd)
W=${W:-/tmp/cuda-build}
rm -rf "$W"
mkdir -p "$W"
python3 -m venv "$W/venv"
"$W/venv/bin/pip" install -q "nvidia-cuda-nvcc==13.0.88" "nvidia-cuda-crt==13.0.88" \
  "nvidia-nvvm==13.0.88" "nvidia-cuda-runtime==13.0.96" "nvidia-cublas==13.0.2.14" \
  "nvidia-cuda-cccl==13.0.85"
CT=$("$W/venv/bin/python" -c 'import nvidia, os; print(os.path.join(nvidia.__path__[0], "cu13"))')
# the wheels ship versioned libraries only, in lib/: CMake's FindCUDAToolkit links the
# plain names, and nvcc's own link step looks in lib64/
for lib in cudart cublas cublasLt; do ln -sf "lib$lib.so.13" "$CT/lib/lib$lib.so"; done
ln -sfn lib "$CT/lib64"
mkdir -p "$CT/lib/stubs"
echo '#include <cuda.h>' | gcc -E -I "$CT/include" -x c - \
  | grep -oP '\bcu[A-Z]\w*(?=\s*\()' | sort -u | awk '{print "void "$1"(void){}"}' > "$W/stub.c"
gcc -shared -fPIC -o "$CT/lib/stubs/libcuda.so" -Wl,-soname,libcuda.so.1 "$W/stub.c"
tar xJf "$TARBALL" -C "$W"
cd "$W/llama.cpp"
PATH="$CT/bin:$PATH" cmake -B build -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=ON -DGGML_CUDA_FA=OFF \
  -DCMAKE_CUDA_ARCHITECTURES=90 -DGGML_NATIVE=OFF -DBUILD_SHARED_LIBS=OFF -DLLAMA_BUILD_UI=OFF \
  -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
  -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_TOOLS=ON -DGGML_CCACHE=OFF \
  -DCMAKE_CUDA_COMPILER="$CT/bin/nvcc" -DCUDAToolkit_ROOT="$CT" > "$OUT/configure.log"
PATH="$CT/bin:$PATH" cmake --build build --target llama-server -j"$(nproc)" > "$OUT/build.log"
xz -T0 -9 -c build/bin/llama-server > "$OUT/llama-server.xz"
ls -l "$OUT/llama-server.xz"
