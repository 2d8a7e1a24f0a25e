#!/usr/bin/env bash
# bench/elastic/regroup.sh: the time W processes that are already up take
# to form a new generation's communicator (bulwark-train's TCPStore and
# Gloo full mesh) and finish its first all-reduce, for each W (default 2 4
# 8 16 32): the regroup an elastic membership change costs the survivors.
# All W run on this host, so it shows how the cost grows with W, not what
# a network would add. Figures only. Arguments: [W ...]
set -euo pipefail
cd "$(dirname "$0")/../.."
cmake --build build --target bulwark-regroup-bench -j "$(nproc)" >/dev/null
echo "loadavg $(cut -d' ' -f1-3 /proc/loadavg)"
exec build/bin/bulwark-regroup-bench "$@"
