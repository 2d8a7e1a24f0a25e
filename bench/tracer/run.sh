#!/usr/bin/env bash
# The tracer's capture time on a training bulwark-train rank: libdw
# in-process beside eu-stack. Usage: bash bench/tracer/run.sh [SAMPLES] [THREADS]
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${BULWARK_BUILD:-$root/build}
cmake --build "$build" -j2 --target tracer_bench bulwark-train >/dev/null
data=$(mktemp -d)
trap 'rm -rf "$data"' EXIT
"$build/bin/bulwark-train" prepare --corpus kjv --out "$data/kjv" >/dev/null
"$build/bin/tracer_bench" "$data/kjv" "${1:-10}" "${2:-2}"
