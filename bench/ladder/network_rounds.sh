#!/usr/bin/env bash
# bench/ladder/network_rounds.sh: how long the ladder's network test stops a
# job, by ring size. A local cluster (shared stack, emulated links) of N
# machines trains the tiny model; m03's link is slowed 20x and m01 corrupts
# silently, which stops the job for the diagnose rung with the network test
# alone; the rung's seconds and outcome are printed. Each BULWARK_BIN given
# (a build's bin directory) runs the same schedule, so two builds compare in
# one run: bash bench/ladder/network_rounds.sh "4 8" build/bin /old/build/bin
# Figures only.
set -euo pipefail
cd "$(dirname "$0")/../.."
SIZES=${1:-"4 8"}
shift || true
BINS=("${@:-build/bin}")
DATA=${BULWARK_DATA:-data/kjv}
if [[ ! -f "$DATA/tokenizer.model" ]]; then
  "${BINS[0]}/bulwark-train" prepare --corpus kjv --out "$DATA" --force --quiet
fi
DATA=$(realpath "$DATA")
for n in $SIZES; do
  for bin in "${BINS[@]}"; do
    dir=$(mktemp -d /tmp/bulwark-netrounds.XXXXXX)
    b="$bin/bulwark"
    BULWARK_NETNS=off "$b" up --dir "$dir/c" --machines "$n" --standby 1 --no-netns \
      --ladder-tests network --ladder-rungs diagnose >/dev/null
    cat > "$dir/job.yaml" <<YAML
name: ring
world_size: $n
args: [--config, tiny, --data, $DATA, --steps, '1000000', --log-format, json, --threads, '1', --dist-timeout, '30']
env: {OMP_NUM_THREADS: '1'}
YAML
    "$b" submit --dir "$dir/c" "$dir/job.yaml" >/dev/null
    until "$b" status --dir "$dir/c" --json | python3 -c 'import json,sys; sys.exit(0 if json.load(sys.stdin)["job"]["last_step"] >= 20 else 1)'; do sleep 1; done
    "$b" inject slow-link --dir "$dir/c" --machine m03 --factor 20 >/dev/null
    "$b" inject sdc --dir "$dir/c" --machine m01 >/dev/null
    deadline=$((SECONDS + 300))
    line=""
    while [[ -z "$line" && $SECONDS -lt $deadline ]]; do
      sleep 1
      line=$("$b" incidents --dir "$dir/c" --json | python3 -c '
import json, sys
for i in json.load(sys.stdin):
    for r in i.get("ladder", []):
        if r.get("rung") == "diagnose" and r.get("outcome"):
            print("%.2f s  %s" % (r.get("seconds", -1), r["outcome"][:160])); sys.exit()')
    done
    printf '%2d machines  %-28s diagnose rung %s\n' "$n" "$bin" "${line:-no diagnose rung within 300 s}"
    "$b" down --dir "$dir/c" >/dev/null || true
    rm -rf "$dir"
  done
done
