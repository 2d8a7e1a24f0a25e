#!/usr/bin/env bash
# bench/elastic/regroup.sh: the time the W - 1 survivors of W processes
# that are already up take to form a new generation's communicator without
# the one that left, and finish its first all-reduce, for each W (default
# 3 4 8 16 32): the regroup an elastic membership change costs them. Over
# the ring elastic jobs use (trainer/comm/ring.h: links kept, the lost member's
# two neighbours dial each other), flat and in two levels (ring.h's
# TwoLevel, groups of about sqrt(W)), and over Gloo's full mesh, one after
# the other, then the same two rings formed from plans with no store
# (ring.h's RingPlan: what the controller would send each survivor), and
# in two levels from plans with a standby's process taking the rank that
# left (--replace: generation 2 has W ranks again). All
# W run on this host, so it shows how the cost grows with W, not what a
# network would add. Then what one operation on the rendezvous
# store costs as it holds 0 to 2,000 clients (bulwark-store-bench): the
# part of the ring's regroup that still grows with W. Figures only.
# Arguments: [W ...]
set -euo pipefail
cd "$(dirname "$0")/../.."
cmake --build build --target bulwark-regroup-bench bulwark-store-bench -j "$(nproc)" >/dev/null
echo "loadavg $(cut -d' ' -f1-3 /proc/loadavg)"
build/bin/bulwark-regroup-bench --comm ring --group 1 "$@"
build/bin/bulwark-regroup-bench --comm ring --group 0 "$@"
build/bin/bulwark-regroup-bench --comm ring --group 1 --plan "$@"
build/bin/bulwark-regroup-bench --comm ring --group 0 --plan "$@"
build/bin/bulwark-regroup-bench --comm ring --group 0 --plan --replace "$@"
build/bin/bulwark-regroup-bench --comm gloo "$@"
build/bin/bulwark-store-bench
