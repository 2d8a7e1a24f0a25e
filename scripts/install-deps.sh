#!/usr/bin/env bash
# Installs what bulwark needs to build, test and run on Debian 12, as root.
# Idempotent: packages already present are skipped, so a second run costs a
# dpkg query and nothing else.
set -euo pipefail

packages=(
  build-essential cmake pkg-config make git
  # Ninja: schedules the build's compiles better than make and restarts a
  # no-op build in well under a second.
  ninja-build
  # The trainer: libtorch's C++ API. libtorch pulls the netlib reference BLAS;
  # OpenBLAS replaces it through update-alternatives and is ~30x faster.
  libtorch-dev libopenblas0-pthread libgloo-dev
  libsentencepiece-dev
  # The default corpus (King James Bible) and its dump tool.
  bible-kjv bible-kjv-text
  nlohmann-json3-dev
  # XXH3 checksums of checkpoints; spdlog (with fmt) for the control plane's logs.
  libxxhash-dev libspdlog-dev libfmt-dev
  # The command lines of bulwark and bulwark-train (header-only CLI11).
  libcli11-dev
  libgtest-dev libgmock-dev
  # The control plane: gRPC wire protocol, SQLite state, YAML job specs, and
  # eu-stack (gdb as the fallback) for the agent's on-demand stack capture.
  libgrpc++-dev protobuf-compiler-grpc protobuf-compiler libprotobuf-dev libsqlite3-dev
  libyaml-cpp-dev elfutils gdb
  # elfutils' libdw: the agent unwinds ranks in-process, no eu-stack needed.
  libdw-dev
  # HMAC-SHA256 for the agents' authenticated shard transfers; the openssl
  # command makes a cluster's CA and certificates for `bulwark up --tls`.
  libssl-dev openssl
  # The controller's Prometheus endpoint (cpp-httplib), and promtool, which
  # tests/unit/metrics_test.cc runs on its output (the package's server is not used).
  libcpp-httplib-dev prometheus
  # The Python client's tests and examples run in a virtual environment
  # with a pinned current torch (install-python.sh, at the end), made from
  # Debian's python3 with its venv module.
  python3-venv
  # The Slurm backend's tests run a real slurmctld and several slurmd on
  # this host (tests/support/slurm_cluster.sh); the packages' own services
  # are not started (no systemd here), the tests start private daemons.
  slurmctld slurmd slurm-client munge
  # A controller that outlives its machine keeps its journal and leader lease
  # in etcd (`bulwark controller --etcd`); the tests start private members.
  etcd-server etcd-client
)
if [[ "${BULWARK_BENCH:-0}" == 1 ]]; then
  # The Python reference for bench/trainer_throughput: Debian's torch, the
  # same libtorch 1.13 that bulwark-train links, so the comparison is of the
  # two programs and not of two libtorch versions.
  packages+=(python3-torch python3-numpy python3-matplotlib)
fi
if [[ "${BULWARK_LINT:-0}" == 1 ]]; then
  # make lint: clang's -Wthread-safety.
  packages+=(clang)
fi
if [[ "${BULWARK_FUZZ:-0}" == 1 ]]; then
  # make fuzz: clang with libFuzzer and the sanitizer runtimes.
  packages+=(clang libclang-rt-dev)
fi

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if ((${#missing[@]})); then
  if [[ $(id -u) -ne 0 ]]; then
    echo "install-deps: need root to install: ${missing[*]} (run as root, or install them yourself)" >&2
    exit 1
  fi
  echo "install-deps: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# The Python environment (torch 2.15.0 and the tests' packages), outside the
# clone and linked as .venv: a few milliseconds once it exists.
bash "$(dirname "$0")/install-python.sh"
