#!/usr/bin/env bash
# Compiles the trainer as the GPU machine's build does, on a machine with
# the CUDA toolkit but no GPU and no CUDA libtorch: the same CMake with
# -DBULWARK_TRAINER_ONLY=ON -DBULWARK_CUDA=ON, Debian's libtorch presented as
# a CUDA one (a TorchConfig.cmake that includes Debian's and sets
# CAFFE2_USE_CUDA: the stand-in of docs/gpu.md), the fused kernels through
# nvcc and NCCL from the toolkit. Every object of bulwark-train is built:
# the `#ifdef BULWARK_CUDA` code, the .cu kernels and the NCCL group, which
# no CPU build compiles, are checked here rather than in a GPU session's
# minutes. The link is not: Debian ships c10's CUDA headers, not
# libc10_cuda. Nor is an API that the GPU machine's libtorch (2.x) changed.
#
#   scripts/cuda-compile-check.sh [BUILD_DIR]   (default build-cuda-check/)
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-$root/build-cuda-check}
cuda=${CUDA_HOME:-/usr/local/cuda}
[[ -x $cuda/bin/nvcc ]] || { echo "cuda-compile-check: no CUDA toolkit at $cuda (set CUDA_HOME)" >&2; exit 1; }
torch=$(dirname "$(find /usr/lib /usr/share /usr/local/lib -name TorchConfig.cmake -path '*Torch*' 2>/dev/null | head -n 1)")
[[ -f $torch/TorchConfig.cmake ]] || { echo "cuda-compile-check: no TorchConfig.cmake (Debian's libtorch-dev)" >&2; exit 1; }

# The stand-in Torch, and the one header of c10/cuda that Debian leaves out
# (PyTorch's CMake generates it).
mkdir -p "$out/standin/c10/cuda/impl"
printf 'include(%s/TorchConfig.cmake)\nset(CAFFE2_USE_CUDA ON)\n' "$torch" >"$out/standin/TorchConfig.cmake"
echo '#pragma once' >"$out/standin/c10/cuda/impl/cuda_cmake_macros.h"

cmake -S "$root" -B "$out" -G Ninja -DCMAKE_BUILD_TYPE=Release -DBULWARK_TRAINER_ONLY=ON -DBULWARK_CUDA=ON \
  -DTorch_DIR="$out/standin" -DCMAKE_CXX_FLAGS="-I$out/standin" -DCMAKE_CUDA_COMPILER="$cuda/bin/nvcc" \
  >"$out/configure.log" 2>&1 || { tail -n 20 "$out/configure.log" >&2; exit 1; }
grep 'bulwark:' "$out/configure.log"
for want in "BULWARK_CUDA on" "fused CUDA kernels on" "BULWARK_NCCL on"; do
  grep -q "$want" "$out/configure.log" || echo "cuda-compile-check: note: the configure did not say '$want'" >&2
done

# Every library of the trainer, and main.cc's object: all but the link.
targets=(bulwark_torch src/trainer/CMakeFiles/bulwark-train.dir/main.cc.o)
for t in bulwark_cuda_kernels bulwark_nccl; do
  ninja -C "$out" -t query "$t" >/dev/null 2>&1 && targets+=("$t")
done
if ! cmake --build "$out" -j"$(nproc)" --target "${targets[@]}" -- -k 0 >"$out/build.log" 2>&1; then
  grep -E 'error|FAILED' "$out/build.log" | head -n 20 >&2
  echo "cuda-compile-check: the CUDA build's code does not compile (above; $out/build.log)" >&2
  exit 1
fi
echo "cuda-compile-check: every object of bulwark-train compiles as a CUDA build (${targets[*]})"
