#!/usr/bin/env bash
# bulwark on the GPU machine, which has no package registry and cannot link
# the control plane (docs/gpu.md, ../shared/reference/gpu.md). Two sides:
#
#   scripts/gpu-build.sh [--kit DIR] [--build-dir DIR]
#       On the CI-like Debian machine: gathers what the GPU machine lacks
#       into the kit (default build-gpu-kit/, git-ignored; carry it with the
#       working tree):
#         root/      nlohmann-json3-dev, libcli11-dev, libgloo-dev, libxxhash-dev
#                    and libxxhash0, unpacked from their .deb files (apt-get download, or
#                    the files already in KIT/debs)
#         bulwark/   `cmake --install` of the Debian build (bin/bulwark,
#                    share/bulwark) plus nvml_probe, the fake NVML and the
#                    shared libraries `ldd` names, less glibc, libstdc++ and
#                    libgcc (lib/); env.sh puts them on PATH and
#                    LD_LIBRARY_PATH
#         data/kjv/  the tiny trainer's data set (vocabulary 512), for the
#                    gpu-labelled tests
#
#   scripts/gpu-build.sh --build [--kit DIR]
#       On the GPU machine: configures the trainer alone
#       (-DBULWARK_TRAINER_ONLY=ON) against the libtorch of PyTorch's CUDA
#       wheel (torch.utils.cmake_prefix_path) with the kit's headers, builds
#       bulwark-train in build-gpu/ and runs the tests labelled `gpu`.
#
# Every failure is one line naming what is missing. PYTHON overrides python3.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
kit=$root/build-gpu-kit
build_dir=$root/build
mode=prepare
python=${PYTHON:-python3}
# libxxhash0: the -dev package's static library lacks the x86 dispatch
# (XXH3_64bits_dispatch), so the trainer links the shared one (run path set
# by CMake); Ubuntu has libxxhash0 too, the same soname.
debs=(nlohmann-json3-dev libcli11-dev libgloo-dev libxxhash-dev libxxhash0)

die() {
  echo "gpu-build.sh: $*" >&2
  exit 1
}

while (($#)); do
  case $1 in
    --build) mode=build ;;
    --kit) kit=${2:?--kit needs a directory}; shift ;;
    --build-dir) build_dir=${2:?--build-dir needs a directory}; shift ;;
    -h | --help) sed -n '2,27p' "${BASH_SOURCE[0]}"; exit 0 ;;
    *) die "unknown argument '$1' (--build, --kit DIR, --build-dir DIR)" ;;
  esac
  shift
done
mkdir -p "$kit"
kit=$(cd "$kit" && pwd)

# ---------------------------------------------------------------- prepare

prepare() {
  for tool in apt-get dpkg-deb cmake ldd; do
    command -v "$tool" >/dev/null || die "the preparation side runs on Debian with $tool; it is not on PATH"
  done
  [[ -f $build_dir/CMakeCache.txt ]] ||
    die "no configured build in $build_dir: run cmake -S . -B build first (README), or pass --build-dir"

  # The .deb files: those already in the kit, else apt-get download.
  mkdir -p "$kit/debs"
  local missing=() pkg
  for pkg in "${debs[@]}"; do
    compgen -G "$kit/debs/${pkg}_*.deb" >/dev/null && continue
    (cd "$kit/debs" && apt-get download "$pkg") >"$kit/debs/apt-$pkg.log" 2>&1 || missing+=("$pkg")
  done
  ((${#missing[@]} == 0)) ||
    die "cannot get the .deb files of: ${missing[*]} (apt-get download failed, see $kit/debs/apt-*.log; run apt-get update, or put the files in $kit/debs)"
  rm -rf "$kit/root"
  for pkg in "${debs[@]}"; do
    local deb
    deb=$(compgen -G "$kit/debs/${pkg}_*.deb" | head -n 1)
    dpkg-deb -x "$deb" "$kit/root" || die "cannot unpack $deb"
  done
  rm -rf "$kit/root/usr/share/doc"

  # The Debian-built control plane, its tools and their shared libraries.
  echo "gpu-build.sh: building bulwark, bulwark-train, bulwark-prepare, nvml_probe, fake_nvml in $build_dir"
  cmake --build "$build_dir" -j2 --target bulwark bulwark-train bulwark-prepare nvml_probe fake_nvml >"$kit/build.log" 2>&1 ||
    die "building in $build_dir failed (see $kit/build.log)"
  rm -rf "$kit/bulwark"
  cmake --install "$build_dir" --prefix "$kit/bulwark" --strip >"$kit/install.log" 2>&1 ||
    die "cmake --install into $kit/bulwark failed (see $kit/install.log)"
  # The GPU machine builds its own bulwark-train against the wheel; the data
  # is prepared here.
  rm -f "$kit/bulwark/bin/bulwark-train" "$kit/bulwark/bin/bulwark-prepare"
  mkdir -p "$kit/bulwark/lib"
  cp "$build_dir/bin/nvml_probe" "$kit/bulwark/bin/" && strip --strip-debug "$kit/bulwark/bin/nvml_probe"
  local fake
  fake=$(find "$build_dir" -name 'libfake-nvidia-ml.so' -print -quit)
  [[ -n $fake ]] || die "the fake NVML library was not built in $build_dir"
  cp "$fake" "$kit/bulwark/lib/"
  local bin lib path
  for bin in "$kit/bulwark/bin/bulwark" "$kit/bulwark/bin/nvml_probe"; do
    if ldd "$bin" | grep -q 'not found'; then
      die "$bin has libraries ldd cannot find: $(ldd "$bin" | grep 'not found' | tr -s ' \t\n' ' ')"
    fi
    while read -r lib path; do
      case $lib in
        linux-vdso* | ld-linux* | libc.so* | libm.so* | libstdc++* | libgcc_s* | libpthread* | libdl.so* | librt.so*) ;;
        *) [[ -f $path ]] && cp -L "$path" "$kit/bulwark/lib/$lib" ;;
      esac
    done < <(ldd "$bin" | awk '$2 == "=>" { print $1, $3 }')
  done
  cat >"$kit/env.sh" <<'EOF'
# source build-gpu-kit/env.sh: the carried Debian-built bulwark (and
# nvml_probe) on PATH, with their shared libraries.
kit=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
export PATH="$kit/bulwark/bin:$PATH"
export LD_LIBRARY_PATH="$kit/bulwark/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export BULWARK_FAKE_NVML_LIB="$kit/bulwark/lib/libfake-nvidia-ml.so"
EOF

  if [[ ! -f $kit/data/kjv/tokenizer.model ]]; then
    rm -rf "$kit/data/kjv"
    "$build_dir/bin/bulwark-train" prepare --corpus kjv --out "$kit/data/kjv" --vocab-size 512 --quiet ||
      die "preparing the data set into $kit/data/kjv failed"
  fi

  local mib
  mib=$(du -sm --exclude=debs --exclude='*.log' "$kit" | cut -f1)
  echo "gpu-build.sh: kit ready in $kit (${mib} MiB without debs/ and logs: root/ $(du -sh "$kit/root" | cut -f1)," \
    "bulwark/ $(du -sh "$kit/bulwark" | cut -f1), data/ $(du -sh "$kit/data" | cut -f1))"
  ((mib < 48)) || echo "gpu-build.sh: warning: the device tool carries 64 MiB with the working tree; the kit takes ${mib} MiB" >&2
}

# ---------------------------------------------------------------- build

build() {
  local need=(usr/include/nlohmann/json.hpp usr/include/CLI/CLI.hpp usr/include/gloo/algorithm.h usr/include/xxhash.h
    usr/lib/x86_64-linux-gnu/libxxhash.so) absent=() f
  for f in "${need[@]}"; do [[ -f $kit/root/$f ]] || absent+=("$f"); done
  [[ -f $kit/data/kjv/tokenizer.model ]] || absent+=(data/kjv)
  ((${#absent[@]} == 0)) ||
    die "the kit $kit lacks ${absent[*]}: run scripts/gpu-build.sh on the CI machine and carry build-gpu-kit"
  command -v cmake >/dev/null || die "--build needs cmake on PATH"

  local info
  info=$("$python" -c 'import torch, torch.utils; print(torch.utils.cmake_prefix_path); print(torch.__version__); print(torch.version.cuda or "")' 2>&1) ||
    die "$python cannot import torch ($(printf '%s\n' "$info" | tail -n 1)); --build takes libtorch from PyTorch's CUDA wheel"
  local prefix version cuda
  prefix=$(sed -n 1p <<<"$info") version=$(sed -n 2p <<<"$info") cuda=$(sed -n 3p <<<"$info")
  [[ -n $cuda ]] ||
    die "the torch $python imports (torch $version, $prefix) has no CUDA (torch.version.cuda is None); --build needs PyTorch's CUDA wheel"
  echo "gpu-build.sh: torch $version with CUDA $cuda ($prefix)"

  local out=$root/build-gpu
  configure() {
    cmake -S "$root" -B "$out" -DCMAKE_BUILD_TYPE=Release -DBULWARK_TRAINER_ONLY=ON -DBULWARK_CUDA=ON \
      -DCMAKE_PREFIX_PATH="$prefix;$kit/root/usr" -DCMAKE_CXX_FLAGS="-isystem $kit/root/usr/include" \
      -DBULWARK_GPU_TEST_DATA="$kit/data/kjv" -DCMAKE_POLICY_VERSION_MINIMUM=3.5 "$@" >"$kit/gpu-configure.log" 2>&1 ||
      die "configuring $out failed: $(grep -m1 -A2 'CMake Error' "$kit/gpu-configure.log" | tr -s ' \n' ' ') (see $kit/gpu-configure.log)"
  }
  configure -DBULWARK_CUDA_KERNELS=ON -DBULWARK_CUDA_ASYNC_COPY=ON
  grep -E 'bulwark:|CMake Warning' -A1 "$kit/gpu-configure.log" || true
  if ! cmake --build "$out" -j"$(nproc)" --target all >"$kit/gpu-build.log" 2>&1; then
    # The fused kernels (nvcc), the asynchronous checkpoint copy (c10's
    # CUDA headers) and NCCL (the wheel's copy of it) are the code no CPU
    # build compiles as the GPU build does: without them the trainer still
    # runs on the GPU, on libtorch's kernels, reducing over Gloo.
    echo "gpu-build.sh: the build failed: $(grep -m1 'error' "$kit/gpu-build.log"); again without the fused CUDA kernels, the asynchronous copy and NCCL" >&2
    grep -m 12 -A 4 'error' "$kit/gpu-build.log" >&2 || true
    cp "$kit/gpu-build.log" "$kit/gpu-build-first.log"
    configure -DBULWARK_CUDA_KERNELS=OFF -DBULWARK_CUDA_ASYNC_COPY=OFF -DBULWARK_NCCL=OFF
    cmake --build "$out" -j"$(nproc)" --target all >"$kit/gpu-build.log" 2>&1 ||
      die "building bulwark-train failed: $(grep -m1 'error' "$kit/gpu-build.log") (see $kit/gpu-build.log)"
  fi
  # The help captured first: `--help | grep -q` fails under pipefail when
  # grep quits at its first match and the trainer gets SIGPIPE.
  local help
  help=$("$out/bin/bulwark-train" --help 2>&1) || die "$out/bin/bulwark-train does not start: $(tail -n 1 <<<"$help")"
  grep -q -- '--device' <<<"$help" || die "$out/bin/bulwark-train --help does not offer --device (an old binary?)"
  ctest --test-dir "$out" -L gpu --output-on-failure || die "gpu-labelled tests failed (above)"
  echo "gpu-build.sh: $out/bin/bulwark-train built against torch $version (CUDA $cuda); gpu tests passed."
  echo "gpu-build.sh: the carried control plane: source $kit/env.sh"
}

if [[ $mode == build ]]; then build; else prepare; fi
