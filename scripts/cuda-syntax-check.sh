#!/usr/bin/env bash
# Compiles the trainer's sources as a CUDA build sees them, on a machine
# without a GPU or a CUDA libtorch: BULWARK_CUDA, BULWARK_CUDA_ASYNC_COPY and
# BULWARK_NCCL defined, against Debian's libtorch headers (1.13, whose
# c10/cuda headers are there) and the CUDA toolkit's (/usr/local/cuda), with
# -fsyntax-only. It finds what only a GPU session would otherwise find: a
# typo or a missing include inside `#ifdef BULWARK_CUDA`. It cannot find an
# API that differs between 1.13 and the GPU machine's libtorch (docs/gpu.md).
#
#   scripts/cuda-syntax-check.sh [BUILD_DIR]   (default build/, configured)
#   SOURCES="src/trainer/step/train.cc ..." scripts/cuda-syntax-check.sh   (only those)
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
cuda=${CUDA_HOME:-/usr/local/cuda}
[[ -f $cuda/include/cuda_runtime_api.h ]] || { echo "cuda-syntax-check: no CUDA toolkit at $cuda (set CUDA_HOME)" >&2; exit 1; }
[[ -f $build/build.ninja ]] || { echo "cuda-syntax-check: $build is not a configured build (make build first)" >&2; exit 1; }

# The flags of the trainer's library, from one of its compile commands.
cmd=$(ninja -C "$build" -t commands bulwark-train | grep -m1 'bulwark_torch.dir') ||
  { echo "cuda-syntax-check: no compile command of bulwark_torch in $build" >&2; exit 1; }
read -r -a words <<<"$cmd"
flags=()
for ((i = 1; i < ${#words[@]}; i++)); do
  case ${words[i]} in
    -o | -c | -MT | -MF) i=$((i + 1)) ;;  # and their argument
    -MD | -Winvalid-pch) ;;
    -include | -Xclang) i=$((i + 1)) ;;  # the precompiled header
    *) flags+=("${words[i]}") ;;
  esac
done

# Debian's libtorch ships c10/cuda without the header its CMake generates.
stub=$(mktemp -d)
trap 'rm -rf "$stub"' EXIT
mkdir -p "$stub/c10/cuda/impl"
echo '#pragma once' >"$stub/c10/cuda/impl/cuda_cmake_macros.h"

# One source: its errors (first lines) on stderr, a FAIL line, exit 1.
check_one() {
  local out
  if ! out=$("${words[0]}" "${flags[@]}" -DBULWARK_CUDA -DBULWARK_CUDA_ASYNC_COPY=1 -DBULWARK_NCCL=1 \
      -I"$stub" -isystem "$cuda/include" -fsyntax-only "$1" 2>&1); then
    { echo "FAIL $1"; grep -m 5 'error' <<<"$out" || true; } >&2
    return 1
  fi
}

# Every source, or those named (SOURCES="a.cc b.cc"), on every core.
mapfile -t sources < <(if [[ -n ${SOURCES:-} ]]; then tr ' ' '\n' <<<"$SOURCES"; else find "$root/src/trainer" -name '*.cc' | sort; fi)
jobs_max=$(nproc)
failed=0
pids=()
for src in "${sources[@]}"; do
  check_one "$src" &
  pids+=($!)
  if ((${#pids[@]} >= jobs_max)); then
    wait "${pids[0]}" || failed=$((failed + 1))
    pids=("${pids[@]:1}")
  fi
done
for pid in "${pids[@]}"; do wait "$pid" || failed=$((failed + 1)); done
echo "cuda-syntax-check: ${#sources[@]} trainer sources compiled as a CUDA build, $failed failed"
((failed == 0))
